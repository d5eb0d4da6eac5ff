/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The words a measurement request is made of, parsed before anything touches
 * a target: code resources ("vfs_read", "libc.so.6:malloc", "fx_work+0x1a",
 * "0xffffffff81234560") and metric lists ("count,wall,vtime"). Pure string
 * parsing with no side effects, so it is fuzzed (fuzz/fuzz_spec.c) and shared
 * by the CLI and the daemon.
 */
#ifndef HOTPATH_MEASURE_SPEC_H
#define HOTPATH_MEASURE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* kperfmon's metrics. Values index arrays; names are the CLI's words. */
enum hp_metric {
	HP_METRIC_COUNT,             /* function entries or block executions */
	HP_METRIC_WALL,              /* inclusive thread-ns between entry and every exit */
	HP_METRIC_VTIME,             /* the same, stopped while the thread is switched out */
	HP_METRIC_CONCURRENCY,       /* threads inside, averaged over the interval */
	HP_METRIC_CYCLES,            /* hardware-event timers (need a PMU) ... */
	HP_METRIC_INSTRUCTIONS,      /* ... */
	HP_METRIC_ICACHE_STALL,      /* ... */
	HP_METRIC_BRANCH_MISPREDICT, /* ... */
	HP_METRIC_N
};
#define HP_METRIC_BIT(m) (1u << (m))
#define HP_METRICS_TIMERS \
	(HP_METRIC_BIT(HP_METRIC_WALL) | HP_METRIC_BIT(HP_METRIC_VTIME) | HP_METRIC_BIT(HP_METRIC_CONCURRENCY))
#define HP_METRICS_HARDWARE                                                        \
	(HP_METRIC_BIT(HP_METRIC_CYCLES) | HP_METRIC_BIT(HP_METRIC_INSTRUCTIONS) | \
	 HP_METRIC_BIT(HP_METRIC_ICACHE_STALL) | HP_METRIC_BIT(HP_METRIC_BRANCH_MISPREDICT))

/* "count", "wall", "vtime", "concurrency", "cycles", "instructions", "icache_stall", "branch_mispredict". */
const char *hp_metric_name(enum hp_metric m);
/* The key of the value in JSON and the daemon's batches: "count", "wall_ns", "vtime_ns", "concurrency", ... */
const char *hp_metric_key(enum hp_metric m);
/* The unit of its value: "calls" (function count), "ns", "threads", "cycles", "instructions". */
const char *hp_metric_unit(enum hp_metric m, bool block_row);

/*
 * Parse a comma-separated metric list into a bit set (HP_METRIC_BIT). Every
 * word must be a metric name; duplicates are fine, an empty list is not.
 * Returns 0, or -EINVAL with the reason in err.
 */
int hp_metrics_parse(const char *s, uint32_t *mask, char *err, size_t errlen);
/* Write mask as a metric list ("count,wall") into buf. */
void hp_metrics_format(uint32_t mask, char *buf, size_t len);

#define HP_RESOURCE_MAX 512 /* longest resource word accepted */

/* One code resource as written, before it is looked up in a target. */
struct hp_resource_spec {
	bool is_address;                /* "0x..." */
	uint64_t address;               /* is_address */
	char name[HP_RESOURCE_MAX + 1]; /* function name or "module:name" (a query for hp_model_find_all) */
	bool has_offset;                /* "name+OFF" */
	uint64_t offset;                /* has_offset: bytes from the function start, < 2^32 */
};

/*
 * Parse one resource word: an address (0x followed by 1..16 hex digits), or
 * a function name (optionally module:name) optionally followed by +OFF, OFF
 * hex with 0x or decimal. Names are printable, without spaces, at most
 * HP_RESOURCE_MAX bytes. Returns 0, or -EINVAL with the reason in err.
 */
int hp_resource_parse(const char *s, struct hp_resource_spec *out, char *err, size_t errlen);
/* Write r back in its canonical form ("name", "name+0x1a", "0xffff...") into buf. */
void hp_resource_format(const struct hp_resource_spec *r, char *buf, size_t len);

#endif
