// SPDX-License-Identifier: Apache-2.0
/*
 * The words of a measurement request: metric lists and resource words, with
 * their canonical forms, and every way they can be wrong.
 */
#include <errno.h>

#include "harness.h"
#include "measure/spec.h"

static void metric_lists(void)
{
	uint32_t m;
	char err[256], buf[128];
	REQUIRE(hp_metrics_parse("count,wall,vtime,concurrency", &m, err, sizeof(err)) == 0, "%s", err);
	EXPECT(m == (HP_METRIC_BIT(HP_METRIC_COUNT) | HP_METRICS_TIMERS), "mask %#x", m);
	hp_metrics_format(m, buf, sizeof(buf));
	EXPECT(!strcmp(buf, "count,wall,vtime,concurrency"), "formatted '%s'", buf);
	REQUIRE(hp_metrics_parse("cycles,icache_stall,branch_mispredict,instructions,count,count", &m, err,
				 sizeof(err)) == 0,
		"%s", err);
	EXPECT((m & HP_METRICS_HARDWARE) == HP_METRICS_HARDWARE, "hardware metrics %#x", m);
	EXPECT(!strcmp(hp_metric_key(HP_METRIC_WALL), "wall_ns") && !strcmp(hp_metric_key(HP_METRIC_VTIME), "vtime_ns"),
	       "JSON keys");
	EXPECT(!strcmp(hp_metric_unit(HP_METRIC_COUNT, true), "executions") &&
		       !strcmp(hp_metric_unit(HP_METRIC_COUNT, false), "calls"),
	       "count units");
	static const char *const bad[] = { "", "count,", ",count", "count,,wall", "walls", "COUNT", "count wall" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		EXPECT(hp_metrics_parse(bad[i], &m, err, sizeof(err)) == -EINVAL && err[0], "'%s' accepted", bad[i]);
	}
	EXPECT(hp_metrics_parse(NULL, &m, err, sizeof(err)) == -EINVAL, "NULL accepted");
}

static void resource_words(void)
{
	struct hp_resource_spec r;
	char err[256], buf[600];
	REQUIRE(hp_resource_parse("vfs_read", &r, err, sizeof(err)) == 0, "%s", err);
	EXPECT(!r.is_address && !r.has_offset && !strcmp(r.name, "vfs_read"), "plain name");
	REQUIRE(hp_resource_parse("libc.so.6:malloc+0x1a", &r, err, sizeof(err)) == 0, "%s", err);
	EXPECT(!strcmp(r.name, "libc.so.6:malloc") && r.has_offset && r.offset == 0x1a, "module:name+0x1a");
	hp_resource_format(&r, buf, sizeof(buf));
	EXPECT(!strcmp(buf, "libc.so.6:malloc+0x1a"), "formatted '%s'", buf);
	REQUIRE(hp_resource_parse("fx_work+26", &r, err, sizeof(err)) == 0, "%s", err);
	EXPECT(r.has_offset && r.offset == 26, "decimal offset");
	REQUIRE(hp_resource_parse("foo.constprop.0+0x0", &r, err, sizeof(err)) == 0, "%s", err);
	EXPECT(!strcmp(r.name, "foo.constprop.0") && r.has_offset && r.offset == 0, "dotted name, +0x0");
	REQUIRE(hp_resource_parse("0xffffffff81234560", &r, err, sizeof(err)) == 0, "%s", err);
	EXPECT(r.is_address && r.address == 0xffffffff81234560ull, "address");
	hp_resource_format(&r, buf, sizeof(buf));
	EXPECT(!strcmp(buf, "0xffffffff81234560"), "formatted '%s'", buf);
	char long_name[HP_RESOURCE_MAX + 2];
	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = 0;
	static const char *const bad[] = {
		"",
		"+0x10",
		"f+",
		"f+0x",
		"f+0x1+2",
		"f+0xg",
		"f+4294967296",
		"0x",
		"0x12345678901234567",
		"mod:",
		":f",
		"f g",
		"f\tg",
		"f\x01",
		"f+99999999999999999999",
		"\xff\xfe",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		EXPECT(hp_resource_parse(bad[i], &r, err, sizeof(err)) == -EINVAL && err[0], "'%s' accepted", bad[i]);
		for (const char *p = err; *p; p++)
			EXPECT((unsigned char)*p >= ' ' && (unsigned char)*p < 0x7f,
			       "unprintable byte in the error for '%s'", bad[i]);
	}
	EXPECT(hp_resource_parse(long_name, &r, err, sizeof(err)) == -EINVAL && strstr(err, "longer"),
	       "a %zu-byte name accepted", strlen(long_name));
	long_name[HP_RESOURCE_MAX] = 0;
	EXPECT(hp_resource_parse(long_name, &r, err, sizeof(err)) == 0, "a %d-byte name refused: %s", HP_RESOURCE_MAX,
	       err);
}

int main(void)
{
	RUN(metric_lists);
	RUN(resource_words);
	TEST_EXIT();
}
