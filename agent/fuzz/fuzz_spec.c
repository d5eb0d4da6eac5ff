/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the words of a measurement request (measure/spec.c).
 * Each input is parsed as a resource word and as a metric list. A word that
 * parses must format back to a word that parses to the same thing; a word
 * that does not must be rejected with a printable reason. Nothing may crash
 * or read out of bounds.
 */
#include <stdlib.h>
#include <string.h>

#include "measure/spec.h"

static void check_printable(const char *s)
{
	if (!*s)
		abort(); /* a rejection must say why */
	for (; *s; s++)
		if ((unsigned char)*s < ' ' || (unsigned char)*s >= 0x7f)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), err[512], buf[HP_RESOURCE_MAX + 64];
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	struct hp_resource_spec r, again;
	err[0] = '\0';
	if (hp_resource_parse(s, &r, err, sizeof(err)) == 0) {
		hp_resource_format(&r, buf, sizeof(buf));
		if (hp_resource_parse(buf, &again, err, sizeof(err)) != 0 || again.is_address != r.is_address ||
		    again.address != r.address || again.has_offset != r.has_offset || again.offset != r.offset ||
		    strcmp(again.name, r.name))
			abort(); /* the canonical form means the same resource */
		if (!r.is_address && (!r.name[0] || strlen(r.name) > HP_RESOURCE_MAX))
			abort();
	} else {
		check_printable(err);
	}
	uint32_t mask = 0, mask2 = 0;
	err[0] = '\0';
	if (hp_metrics_parse(s, &mask, err, sizeof(err)) == 0) {
		hp_metrics_format(mask, buf, sizeof(buf));
		if (!mask || mask >= (1u << HP_METRIC_N) || hp_metrics_parse(buf, &mask2, err, sizeof(err)) != 0 ||
		    mask2 != mask)
			abort();
	} else if (!err[0]) {
		abort();
	}
	free(s);
	return 0;
}
