// SPDX-License-Identifier: Apache-2.0
/*
 * The JSON writer's addresses (base/json.h): a process's address is a number,
 * a kernel's (above 2^63 - 1) the same decimal digits as a string, so that a
 * JSON reader with signed 64-bit integers reads the agent's own output
 * (jansson refuses a bigger number as "too big integer"; hp_json_u64, which
 * the profile reader uses, and Python's int() take either form). Checked on
 * the text written; the kernel lane plans from `measure kernel --json` as is.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "harness.h"

static void written(uint64_t addr, char *text, size_t len)
{
	FILE *fp = fmemopen(text, len, "w");
	struct json j;
	json_init(&j, fp);
	json_obj_begin(&j);
	json_kaddr(&j, "a", addr);
	json_obj_end(&j);
	fclose(fp);
}

static void addresses_are_numbers_or_digit_strings(void)
{
	const uint64_t cases[] = { 0,
				   0x55d0c0de1000ull,
				   (uint64_t)INT64_MAX,
				   (uint64_t)INT64_MAX + 1,
				   0xffffffff81000000ull,
				   0xffffffffc0a01234ull,
				   UINT64_MAX };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[128] = "", want[128];
		written(cases[i], text, sizeof(text));
		text[strcspn(text, "\n")] = 0; /* the writer ends a document with a newline */
		bool quoted = cases[i] > (uint64_t)INT64_MAX;
		snprintf(want, sizeof(want), quoted ? "{\"a\":\"%" PRIu64 "\"}" : "{\"a\":%" PRIu64 "}", cases[i]);
		EXPECT(!strcmp(text, want), "0x%" PRIx64 " written as %s, not %s", cases[i], text, want);
	}
}

int main(void)
{
	RUN(addresses_are_numbers_or_digit_strings);
	TEST_EXIT();
}
