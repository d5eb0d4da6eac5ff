// SPDX-License-Identifier: Apache-2.0
/*
 * Running measurements kept in the state folder (see measurement_store.h).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/measurement_store.h"

void hp_measurement_save(const char *dir, const char *id, const Hotpath__V1__MeasurementInfo *info)
{
	if (!dir[0])
		return;
	char path[4400], tmp[4400];
	snprintf(path, sizeof(path), "%s/%s.pb", dir, id);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, id);
	size_t len = hotpath__v1__measurement_info__get_packed_size(info);
	uint8_t *buf = malloc(len ? len : 1);
	FILE *f = buf ? fopen(tmp, "we") : NULL;
	bool ok = false;
	if (f) {
		hotpath__v1__measurement_info__pack(info, buf);
		ok = fwrite(buf, 1, len, f) == len;
		ok = fclose(f) == 0 && ok;
		ok = ok && rename(tmp, path) == 0;
	}
	if (!ok) {
		unlink(tmp);
		hp_log(false, "cannot keep measurement %s in %s: it will not survive a restart of the agent", id, dir);
	}
	free(buf);
}

void hp_measurement_unsave(const char *dir, const char *id)
{
	if (!dir[0])
		return;
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s.pb", dir, id);
	unlink(path);
}
