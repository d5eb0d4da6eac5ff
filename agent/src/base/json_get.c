// SPDX-License-Identifier: Apache-2.0
/*
 * Reading numbers from parsed JSON (see json_get.h).
 */
#include "base/json_get.h"

#include <errno.h>
#include <stdlib.h>

bool hp_json_u64(const json_t *v, uint64_t *out)
{
	if (json_is_integer(v)) {
		*out = (uint64_t)json_integer_value(v);
		return true;
	}
	if (json_is_string(v)) {
		char *e;
		const char *s = json_string_value(v);
		errno = 0;
		*out = strtoull(s, &e, 0);
		return !errno && e != s && !*e;
	}
	return false;
}
