// SPDX-License-Identifier: Apache-2.0
/*
 * Parsers for the words of a measurement request: metric lists and code
 * resources. Hand-written because each is a few lines of grammar (see
 * spec.h); every input is bounded, checked character by character, and any
 * violation is an error that names the offending word.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/hex.h"
#include "measure/spec.h"

static const struct {
	const char *name, *key;
} metric_words[HP_METRIC_N] = {
	[HP_METRIC_COUNT] = { "count", "count" },
	[HP_METRIC_WALL] = { "wall", "wall_ns" },
	[HP_METRIC_VTIME] = { "vtime", "vtime_ns" },
	[HP_METRIC_CONCURRENCY] = { "concurrency", "concurrency" },
	[HP_METRIC_CYCLES] = { "cycles", "cycles" },
	[HP_METRIC_INSTRUCTIONS] = { "instructions", "instructions" },
	[HP_METRIC_ICACHE_STALL] = { "icache_stall", "icache_stall_cycles" },
	[HP_METRIC_BRANCH_MISPREDICT] = { "branch_mispredict", "branch_mispredict_cycles" },
};

const char *hp_metric_name(enum hp_metric m)
{
	return (unsigned)m < HP_METRIC_N ? metric_words[m].name : "?";
}

const char *hp_metric_key(enum hp_metric m)
{
	return (unsigned)m < HP_METRIC_N ? metric_words[m].key : "?";
}

const char *hp_metric_unit(enum hp_metric m, bool block_row)
{
	switch (m) {
	case HP_METRIC_COUNT:
		return block_row ? "executions" : "calls";
	case HP_METRIC_WALL:
	case HP_METRIC_VTIME:
		return "ns";
	case HP_METRIC_CONCURRENCY:
		return "threads";
	case HP_METRIC_INSTRUCTIONS:
		return "instructions";
	default:
		return "cycles";
	}
}

/* Errors quote the offending word: keep them printable whatever it held. */
static void printable(char *err)
{
	for (char *p = err; *p; p++)
		if ((unsigned char)*p < ' ' || (unsigned char)*p >= 0x7f)
			*p = '?';
}

int hp_metrics_parse(const char *s, uint32_t *mask, char *err, size_t errlen)
{
	*mask = 0;
	if (!s || !*s) {
		snprintf(err, errlen,
			 "empty metric list (metrics: count, wall, vtime, concurrency, cycles, "
			 "instructions, icache_stall, branch_mispredict)");
		return -EINVAL;
	}
	while (*s) {
		size_t n = strcspn(s, ",");
		int found = -1;
		for (int m = 0; m < HP_METRIC_N; m++)
			if (strlen(metric_words[m].name) == n && !strncmp(s, metric_words[m].name, n))
				found = m;
		if (found < 0) {
			snprintf(
				err, errlen,
				"unknown metric '%.*s' (metrics: count, wall, vtime, concurrency, cycles, instructions, "
				"icache_stall, branch_mispredict)",
				(int)(n > 64 ? 64 : n), s);
			return -EINVAL;
		}
		*mask |= HP_METRIC_BIT(found);
		s += n;
		if (*s == ',') {
			s++;
			if (!*s) {
				snprintf(err, errlen, "metric list ends with a comma");
				return -EINVAL;
			}
		}
	}
	return 0;
}

void hp_metrics_format(uint32_t mask, char *buf, size_t len)
{
	size_t used = 0;
	if (len)
		buf[0] = '\0';
	for (int m = 0; m < HP_METRIC_N; m++) {
		if (!(mask & HP_METRIC_BIT(m)) || used >= len)
			continue;
		int n = snprintf(buf + used, len - used, "%s%s", used ? "," : "", metric_words[m].name);
		used += n > 0 ? (size_t)n : 0;
	}
}

/* A number: 0x + 1..16 hex digits, or 1..20 decimal digits that fit 64 bits. */
static bool parse_number(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;
	if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		if (n - 2 > 16)
			return false;
		for (size_t i = 2; i < n; i++) {
			int d = hp_hex_digit(s[i]);
			if (d < 0)
				return false;
			x = x << 4 | (uint64_t)d;
		}
	} else {
		if (!n || n > 20)
			return false;
		for (size_t i = 0; i < n; i++) {
			if (s[i] < '0' || s[i] > '9')
				return false;
			uint64_t d = (uint64_t)(s[i] - '0');
			if (x > (UINT64_MAX - d) / 10)
				return false;
			x = x * 10 + d;
		}
	}
	*v = x;
	return true;
}

int hp_resource_parse(const char *s, struct hp_resource_spec *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	size_t n = s ? strnlen(s, HP_RESOURCE_MAX + 1) : 0;
	if (!n) {
		snprintf(err, errlen, "empty resource (a function name, function+0xOFF or an address 0x...)");
		return -EINVAL;
	}
	if (n > HP_RESOURCE_MAX) {
		snprintf(err, errlen, "resource '%.40s...' is longer than %d bytes", s, HP_RESOURCE_MAX);
		printable(err);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c <= ' ' || c >= 0x7f) {
			snprintf(err, errlen, "resource '%.*s' has a space or a non-printable byte at position %zu",
				 (int)(n > 64 ? 64 : n), s, i);
			printable(err);
			return -EINVAL;
		}
	}
	if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && !strchr(s, '+') && !strchr(s, ':')) {
		if (!parse_number(s, n, &out->address)) {
			snprintf(err, errlen, "'%.64s' is not an address (0x followed by 1 to 16 hex digits)", s);
			return -EINVAL;
		}
		out->is_address = true;
		return 0;
	}
	const char *plus = memchr(s, '+', n);
	size_t name_len = plus ? (size_t)(plus - s) : n;
	if (plus) {
		uint64_t off;
		if (memchr(plus + 1, '+', n - name_len - 1) || !parse_number(plus + 1, n - name_len - 1, &off) ||
		    off > UINT32_MAX) {
			snprintf(err, errlen, "'%.64s': the offset after '+' must be a number below 2^32 (0x1a or 26)",
				 s);
			return -EINVAL;
		}
		out->has_offset = true;
		out->offset = off;
	}
	if (plus && name_len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && !memchr(s, ':', name_len)) {
		/* 0xADDR+OFF: the block at OFF from the start of the function at ADDR. */
		if (!parse_number(s, name_len, &out->address)) {
			snprintf(err, errlen, "'%.64s' is not an address (0x followed by 1 to 16 hex digits)", s);
			return -EINVAL;
		}
		out->is_address = true;
		return 0;
	}
	if (!name_len || s[0] == ':' || s[name_len - 1] == ':') {
		snprintf(err, errlen, "'%.64s' has no function name (a name, module:name or name+0xOFF)", s);
		return -EINVAL;
	}
	memcpy(out->name, s, name_len);
	out->name[name_len] = '\0';
	return 0;
}

void hp_resource_format(const struct hp_resource_spec *r, char *buf, size_t len)
{
	if (r->is_address && r->has_offset)
		snprintf(buf, len, "0x%" PRIx64 "+0x%" PRIx64, r->address, r->offset);
	else if (r->is_address)
		snprintf(buf, len, "0x%" PRIx64, r->address);
	else if (r->has_offset)
		snprintf(buf, len, "%s+0x%" PRIx64, r->name, r->offset);
	else
		snprintf(buf, len, "%s", r->name);
}
