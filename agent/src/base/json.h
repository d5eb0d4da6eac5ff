/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A tiny streaming JSON writer: objects, arrays, strings, integers, doubles,
 * booleans and null, with commas and escaping handled by the writer. Used by
 * every command that has a --json form.
 */
#ifndef HOTPATH_JSON_H
#define HOTPATH_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct json {
	FILE *fp;
	int depth;
	bool first[64]; /* per nesting level: nothing written yet */
	bool after_key;
};

void json_init(struct json *j, FILE *fp);
/* s as a quoted JSON string at fp, escaped; for output written by hand. */
void json_quote(FILE *fp, const char *s);
void json_obj_begin(struct json *j);
void json_obj_end(struct json *j);
void json_arr_begin(struct json *j);
void json_arr_end(struct json *j);
void json_key(struct json *j, const char *key);
void json_str(struct json *j, const char *s); /* NULL writes null */
void json_u64(struct json *j, uint64_t v);
/* An address: a number up to INT64_MAX, a string of its decimal digits above. */
void json_addr(struct json *j, uint64_t v);
void json_i64(struct json *j, int64_t v);
void json_double(struct json *j, double v, int decimals);
void json_bool(struct json *j, bool v);
void json_null(struct json *j);
/* key + value shorthands */
void json_kstr(struct json *j, const char *key, const char *s);
void json_ku64(struct json *j, const char *key, uint64_t v);
void json_kaddr(struct json *j, const char *key, uint64_t v);

#endif
