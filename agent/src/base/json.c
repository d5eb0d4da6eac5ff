// SPDX-License-Identifier: Apache-2.0
/*
 * Streaming JSON writer. Output is compact (one line) and ends with a newline
 * when the outermost value closes, so one command prints one JSON document.
 */
#include <inttypes.h>
#include <math.h>

#include "base/json.h"

void json_init(struct json *j, FILE *fp)
{
	j->fp = fp;
	j->depth = 0;
	j->first[0] = true;
	j->after_key = false;
}

/* Separator before a value or key at the current level. */
static void sep(struct json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (!j->first[j->depth])
		fputc(',', j->fp);
	j->first[j->depth] = false;
}

static void open(struct json *j, char c)
{
	sep(j);
	fputc(c, j->fp);
	if (j->depth < 63)
		j->depth++;
	j->first[j->depth] = true;
}

static void close_(struct json *j, char c)
{
	fputc(c, j->fp);
	if (j->depth > 0)
		j->depth--;
	if (j->depth == 0)
		fputc('\n', j->fp);
}

void json_obj_begin(struct json *j)
{
	open(j, '{');
}
void json_obj_end(struct json *j)
{
	close_(j, '}');
}
void json_arr_begin(struct json *j)
{
	open(j, '[');
}
void json_arr_end(struct json *j)
{
	close_(j, ']');
}

void json_quote(FILE *fp, const char *s)
{
	fputc('"', fp);
	for (; *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			fprintf(fp, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", fp);
		else if (c == '\t')
			fputs("\\t", fp);
		else if (c < 0x20 || c == 0x7f)
			fprintf(fp, "\\u%04x", c);
		else
			fputc(c, fp);
	}
	fputc('"', fp);
}

void json_key(struct json *j, const char *key)
{
	sep(j);
	json_quote(j->fp, key);
	fputc(':', j->fp);
	j->after_key = true;
}

void json_str(struct json *j, const char *s)
{
	sep(j);
	if (s)
		json_quote(j->fp, s);
	else
		fputs("null", j->fp);
}

void json_u64(struct json *j, uint64_t v)
{
	sep(j);
	fprintf(j->fp, "%" PRIu64, v);
}

/* An address: a number while it fits a signed 64-bit integer (a process's),
 * else the same decimal digits as a string (a kernel's: JSON readers such as
 * jansson refuse integers above 2^63 - 1; hp_json_u64 and Python's int()
 * read both forms). */
void json_addr(struct json *j, uint64_t v)
{
	sep(j);
	fprintf(j->fp, v > (uint64_t)INT64_MAX ? "\"%" PRIu64 "\"" : "%" PRIu64, v);
}

void json_i64(struct json *j, int64_t v)
{
	sep(j);
	fprintf(j->fp, "%" PRId64, v);
}

void json_double(struct json *j, double v, int decimals)
{
	sep(j);
	if (isfinite(v))
		fprintf(j->fp, "%.*f", decimals, v);
	else
		fputs("null", j->fp);
}

void json_bool(struct json *j, bool v)
{
	sep(j);
	fputs(v ? "true" : "false", j->fp);
}

void json_null(struct json *j)
{
	sep(j);
	fputs("null", j->fp);
}

void json_kstr(struct json *j, const char *key, const char *s)
{
	json_key(j, key);
	json_str(j, s);
}

void json_ku64(struct json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	json_u64(j, v);
}

void json_kaddr(struct json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	json_addr(j, v);
}
