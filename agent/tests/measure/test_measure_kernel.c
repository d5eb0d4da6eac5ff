// SPDX-License-Identifier: Apache-2.0
/*
 * Kernel measurements on this machine's live kernel. Where kprobes and
 * fentry are forbidden (these VMs), block counts come from PC sampling: while
 * this process reads /dev/zero, the sampled block counts of the read path's
 * functions must be labelled sampled, carry their samples, land in those
 * functions, obey the pid and command-name predicates in the kernel, and
 * derive no edges (samples are time, not executions). Reading is bounded by
 * this thread's CPU time, so a loaded machine gives the same sample count.
 */
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>

#include "harness.h"
#include "measure/measure.h"
#include "target/target.h"

static struct hp_model *kernel;
static struct hp_caps caps;
static const char *read_path[] = { "vfs_read",       "ksys_read",     "__x64_sys_read",
				   "read_iter_zero", "iov_iter_zero", "rep_stos_alternative",
				   "clear_user",     "read_zero" };
static const char *present[8];
static size_t npresent;

static double thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Read /dev/zero for cpu_s seconds of this thread's CPU time (at most 20 s of wall time). */
static void read_zero(double cpu_s)
{
	static char buf[1 << 16];
	int fd = open("/dev/zero", O_RDONLY);
	double c0 = thread_cpu();
	time_t end = time(NULL) + 20;
	while (fd >= 0 && thread_cpu() - c0 < cpu_s && time(NULL) < end)
		if (read(fd, buf, sizeof(buf)) < 0)
			break;
	if (fd >= 0)
		close(fd);
}

static int open_sampled(int where_pid, const char *where_comm, struct hp_measure **h, char *err, size_t errlen)
{
	struct hp_measure_spec s = { .target = HP_MEASURE_KERNEL,
				     .resources = present,
				     .nresources = npresent,
				     .metrics = HP_METRIC_BIT(HP_METRIC_COUNT),
				     .blocks = true,
				     .where_pid = where_pid,
				     .where_comm = where_comm };
	struct hp_measure_env env = { .kernel = kernel, .caps = &caps };
	return hp_measure_open(&s, &env, h, err, errlen);
}

/* Samples in the rows (function rows and their blocks counted once: blocks only). */
static uint64_t block_samples(struct hp_measure *h, const struct hp_measure_reading *r)
{
	uint64_t n = 0;
	for (size_t i = 0; i < r->nrows; i++)
		if (hp_measure_rows(h)[i].kind == HP_ROW_BLOCK)
			n += r->rows[i].samples;
	return n;
}

static void sampled_blocks_land_in_the_read_path(void)
{
	REQUIRE(kernel, "kernel model did not open");
	if (hp_caps_find(&caps, "kprobes")->available)
		SKIP("this host counts kernel blocks exactly with kprobes");
	struct hp_measure *h = NULL;
	char err[2048];
	REQUIRE(open_sampled(getpid(), NULL, &h, err, sizeof(err)) == 0, "open: %s", err);
	read_zero(1.5);
	struct hp_measure_reading r;
	REQUIRE(hp_measure_total(h, &r) == 0, "total failed");
	const struct hp_measure_row *rows = hp_measure_rows(h);
	uint64_t in_blocks = block_samples(h, &r), in_functions = 0;
	for (size_t i = 0; i < r.nrows; i++) {
		const struct hp_metric_value *c = &r.rows[i].v[HP_METRIC_COUNT];
		EXPECT(c->present && c->label == HP_LABEL_SAMPLED, "%s row not labelled sampled", rows[i].function);
		EXPECT(c->total == r.rows[i].samples, "count %llu is not its samples %llu",
		       (unsigned long long)c->total, (unsigned long long)r.rows[i].samples);
		EXPECT(!strcmp(c->mechanism, "perf_sampling"), "mechanism %s", c->mechanism);
		if (rows[i].kind == HP_ROW_FUNCTION)
			in_functions += r.rows[i].samples;
	}
	/* 997 Hz for 1.5 s of this thread's CPU: ~1500 samples, most on the read path. */
	printf("# %llu of %llu samples of this process in %zu read-path functions\n", (unsigned long long)in_blocks,
	       (unsigned long long)r.samples_total, npresent);
	EXPECT(in_blocks >= 300, "only %llu samples in the read path's blocks", (unsigned long long)in_blocks);
	EXPECT(in_functions == in_blocks, "function rows sum %llu, their blocks %llu", (unsigned long long)in_functions,
	       (unsigned long long)in_blocks);
	EXPECT(r.samples_total >= in_blocks, "totals %llu < %llu", (unsigned long long)r.samples_total,
	       (unsigned long long)in_blocks);
	struct hp_function_edges *fe = NULL;
	size_t nfe = 1;
	EXPECT(hp_measure_edges(h, &r, &fe, &nfe) == 0 && nfe == 0, "edges derived from samples (%zu functions)", nfe);
	hp_measure_edges_free(fe, nfe);
	hp_measure_reading_free(&r);
	hp_measure_close(h);
}

static void predicates_filter_samples_in_the_kernel(void)
{
	REQUIRE(kernel, "kernel model did not open");
	if (hp_caps_find(&caps, "kprobes")->available)
		SKIP("this host counts kernel blocks exactly with kprobes");
	struct hp_measure *h = NULL;
	char err[2048], comm[16];
	struct hp_measure_reading r;
	/* Process 1 (init) does not read /dev/zero: none of this process's samples pass. */
	REQUIRE(open_sampled(1, NULL, &h, err, sizeof(err)) == 0, "open: %s", err);
	read_zero(0.7);
	REQUIRE(hp_measure_total(h, &r) == 0, "total failed");
	uint64_t other = block_samples(h, &r);
	hp_measure_reading_free(&r);
	hp_measure_close(h);
	prctl(PR_GET_NAME, comm);
	REQUIRE(open_sampled(0, comm, &h, err, sizeof(err)) == 0, "open: %s", err);
	read_zero(0.7);
	REQUIRE(hp_measure_total(h, &r) == 0, "total failed");
	uint64_t mine = block_samples(h, &r);
	hp_measure_reading_free(&r);
	hp_measure_close(h);
	EXPECT(other <= 5, "%llu read-path samples passed --pid 1", (unsigned long long)other);
	EXPECT(mine >= 100, "only %llu samples passed --comm %s", (unsigned long long)mine, comm);
}

static void intervals_add_up(void)
{
	REQUIRE(kernel, "kernel model did not open");
	struct hp_measure *h = NULL;
	char err[2048];
	if (hp_caps_find(&caps, "kprobes")->available)
		SKIP("this host counts kernel blocks exactly with kprobes");
	REQUIRE(open_sampled(getpid(), NULL, &h, err, sizeof(err)) == 0, "open: %s", err);
	uint64_t sum = 0;
	struct hp_measure_reading r;
	for (int i = 0; i < 3; i++) {
		read_zero(0.2);
		REQUIRE(hp_measure_read(h, &r) == 0, "read failed");
		EXPECT(r.seconds > 0 && r.end_unix_ns > r.start_unix_ns, "empty interval");
		sum += block_samples(h, &r);
		hp_measure_reading_free(&r);
	}
	REQUIRE(hp_measure_total(h, &r) == 0, "total failed");
	uint64_t total = block_samples(h, &r);
	hp_measure_reading_free(&r);
	hp_measure_close(h);
	/* total comes after the last read: it may only have more. */
	EXPECT(sum > 0 && total >= sum && total - sum <= 20, "intervals %llu, total %llu", (unsigned long long)sum,
	       (unsigned long long)total);
}

int main(void)
{
	char err[256];
	struct hp_open_opts o = { .quiet = true };
	if (hp_model_open_kernel(&o, &kernel, err, sizeof(err)) < 0)
		fprintf(stderr, "cannot open the kernel model: %s\n", err);
	for (size_t i = 0; kernel && i < sizeof(read_path) / sizeof(read_path[0]); i++)
		if (hp_model_find(kernel, read_path[i], NULL, NULL))
			present[npresent++] = read_path[i];
	hp_caps_probe(&caps, kernel != NULL, "kernel model");
	RUN(sampled_blocks_land_in_the_read_path);
	RUN(predicates_filter_samples_in_the_kernel);
	RUN(intervals_add_up);
	hp_model_free(kernel);
	TEST_EXIT();
}
