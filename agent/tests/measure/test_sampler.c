/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Whole-system sampling against the live kernel: while this process keeps a
 * CPU busy reading /dev/zero, the sampler must see samples, attribute them to
 * real basic blocks of the model (on the read path among them), keep its
 * totals consistent, and start a fresh interval on every take. One process's
 * threads: a child spinning in a function of this program, sampled through
 * its own model, has its samples on that function's blocks, and counted
 * in an address range without a model, in that range.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "model/model.h"
#include "target/target.h"
#include "measure/sampler.h"

static struct hp_model *kernel;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void samples_map_onto_real_blocks(void)
{
	REQUIRE(kernel, "kernel model did not open");
	char err[256] = "";
	struct hp_sampler *s = hp_sampler_open(kernel, NULL, err, sizeof(err));
	REQUIRE(s, "sampler: %s", err);
	EXPECT(strcmp(hp_sampler_event(s), "cpu-clock") == 0 || strcmp(hp_sampler_event(s), "cycles") == 0, "event %s",
	       hp_sampler_event(s));
	struct hp_sample_interval iv;
	hp_sampler_take(s, &iv); /* start a clean interval */
	hp_sample_interval_free(&iv);

	static char buf[1 << 16];
	int fd = open("/dev/zero", O_RDONLY);
	REQUIRE(fd >= 0, "open /dev/zero: %s", strerror(errno));
	/* Read until this thread has had 1.5 s of CPU (not wall) time, so a loaded
	 * machine that schedules us less still yields the same number of samples. */
	double end = now_s() + 15;
	struct timespec cpu;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
	double cpu0 = cpu.tv_sec + cpu.tv_nsec / 1e9;
	do {
		if (read(fd, buf, sizeof(buf)) < 0)
			break;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
	} while (cpu.tv_sec + cpu.tv_nsec / 1e9 - cpu0 < 1.5 && now_s() < end);
	close(fd);

	REQUIRE(hp_sampler_take(s, &iv) == 0, "take failed");
	hp_sampler_close(s);
	/* At 997 Hz 1.5 s of CPU gives ~1500 samples of this thread alone. */
	EXPECT(iv.total >= 500, "only %llu samples in 1.5 s of CPU time", (unsigned long long)iv.total);
	EXPECT(iv.end_unix_ns - iv.start_unix_ns >= 1400000000LL, "interval of %lld ns",
	       (long long)(iv.end_unix_ns - iv.start_unix_ns));
	uint64_t in_blocks = 0, on_read_path = 0;
	static const char *const read_path[] = { "read_iter_zero",   "iov_iter_zero",  "vfs_read",
						 "ksys_read",        "__x64_sys_read", "do_syscall_64",
						 "entry_SYSCALL_64", "read_zero",      "rep_stos_alternative",
						 "clear_user" };
	for (size_t i = 0; i < iv.nblocks; i++) {
		const struct hp_block_count *bc = &iv.blocks[i];
		REQUIRE(bc->mod < kernel->nmods, "module index %u", bc->mod);
		const struct hp_module *mod = &kernel->mods[bc->mod];
		REQUIRE(bc->fn < mod->nfuncs, "function index %u", bc->fn);
		const struct hp_function *f = &mod->funcs[bc->fn];
		bool found = false;
		for (uint32_t b = 0; b < f->nblocks; b++)
			found |= mod->blocks[f->block_start + b].offset == bc->offset;
		EXPECT(found, "%s has no block at +%u", f->name, bc->offset);
		EXPECT(bc->count > 0, "zero count kept");
		in_blocks += bc->count;
		for (size_t k = 0; k < sizeof(read_path) / sizeof(read_path[0]); k++)
			if (strstr(f->name, read_path[k]))
				on_read_path += bc->count;
	}
	EXPECT(in_blocks + iv.user + iv.unmapped == iv.total, "%llu in blocks + %llu user + %llu unmapped != %llu",
	       (unsigned long long)in_blocks, (unsigned long long)iv.user, (unsigned long long)iv.unmapped,
	       (unsigned long long)iv.total);
	EXPECT(on_read_path >= 100, "only %llu samples on the /dev/zero read path", (unsigned long long)on_read_path);
	hp_sample_interval_free(&iv);
}

static void take_starts_a_new_interval(void)
{
	REQUIRE(kernel, "kernel model did not open");
	char err[256] = "";
	struct hp_sampler_opts o = { .frequency = 499 };
	struct hp_sampler *s = hp_sampler_open(kernel, &o, err, sizeof(err));
	REQUIRE(s, "sampler: %s", err);
	struct timespec ts = { 0, 600 * 1000000L };
	nanosleep(&ts, NULL);
	struct hp_sample_interval a, b;
	hp_sampler_take(s, &a);
	hp_sampler_take(s, &b);
	hp_sampler_close(s);
	EXPECT(a.total > 0, "no samples in 600 ms");
	EXPECT(b.total < a.total, "second take (%llu) did not start from zero (%llu)", (unsigned long long)b.total,
	       (unsigned long long)a.total);
	EXPECT(b.start_unix_ns == a.end_unix_ns, "intervals are not contiguous");
	hp_sample_interval_free(&a);
	hp_sample_interval_free(&b);
}

static void bad_options_are_refused(void)
{
	REQUIRE(kernel, "kernel model did not open");
	char err[256] = "";
	struct hp_sampler_opts o = { .ring_pages = 3 };
	struct hp_sampler *s = hp_sampler_open(kernel, &o, err, sizeof(err));
	EXPECT(!s, "a 3-page ring was accepted");
	EXPECT(strstr(err, "power of two"), "error: %s", err);
	hp_sampler_close(s);
}

static volatile unsigned long spun;

__attribute__((noinline)) static void spin(void)
{
	for (;;)
		for (unsigned i = 0; i < 1000; i++)
			spun += i ^ (spun >> 3);
}

static void *spin_thread(void *arg)
{
	(void)arg;
	spin();
	return NULL;
}

/* A child of this process spinning in spin on two threads. */
static pid_t spinning_child(void)
{
	pid_t child = fork();
	if (child == 0) {
		pthread_t t;
		pthread_create(&t, NULL, spin_thread, NULL);
		spin();
	}
	return child;
}

/* Wait until process child has had seconds of CPU (not wall) time, so
 * that a loaded machine that schedules it less yields as many samples (30 s
 * at most). 0, or -1 when its CPU clock cannot be read. */
static int cpu_time_passes(pid_t child, double seconds)
{
	clockid_t clk;
	struct timespec cpu, ts = { 0, 50 * 1000000L };
	double end = now_s() + 30, cpu0;
	if (clock_getcpuclockid(child, &clk) != 0 || clock_gettime(clk, &cpu) != 0)
		return -1;
	cpu0 = cpu.tv_sec + cpu.tv_nsec / 1e9;
	do {
		nanosleep(&ts, NULL);
		clock_gettime(clk, &cpu);
	} while (cpu.tv_sec + cpu.tv_nsec / 1e9 - cpu0 < seconds && now_s() < end);
	return 0;
}

static void a_process_is_sampled_in_its_model(void)
{
	pid_t child = spinning_child();
	REQUIRE(child > 0, "fork: %s", strerror(errno));
	struct hp_open_opts oo = { .quiet = true };
	struct hp_model *m = NULL;
	char err[256] = "";
	struct hp_sampler_opts so = { .pid = child };
	struct hp_sampler *s = NULL;
	struct hp_sample_interval iv = { 0 };
	int r = hp_model_open_pid(child, &oo, &m, err, sizeof(err));
	if (r == 0)
		s = hp_sampler_open(m, &so, err, sizeof(err));
	if (s && cpu_time_passes(child, 1.5) == 0)
		hp_sampler_take(s, &iv);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	hp_sampler_close(s);
	REQUIRE(r == 0, "model of the child: %s", err);
	REQUIRE(s, "sampler: %s", err);
	const struct hp_module *smod;
	const struct hp_function *sf = hp_model_find(m, "spin", &smod, NULL);
	REQUIRE(sf, "spin not in the child's model");
	uint64_t in_spin = 0, in_blocks = 0;
	for (size_t i = 0; i < iv.nblocks; i++) {
		const struct hp_module *mod = &m->mods[iv.blocks[i].mod];
		in_blocks += iv.blocks[i].count;
		if (&mod->funcs[iv.blocks[i].fn] == sf)
			in_spin += iv.blocks[i].count;
	}
	EXPECT(iv.total >= 500, "only %llu samples in 1.5 s of the child's CPU time", (unsigned long long)iv.total);
	EXPECT(in_blocks + iv.unmapped == iv.user && iv.user == iv.total,
	       "%llu in blocks + %llu unmapped, %llu user of %llu: not all user samples of the process",
	       (unsigned long long)in_blocks, (unsigned long long)iv.unmapped, (unsigned long long)iv.user,
	       (unsigned long long)iv.total);
	EXPECT(in_spin >= iv.total / 2, "only %llu of %llu samples in spin", (unsigned long long)in_spin,
	       (unsigned long long)iv.total);
	hp_sample_interval_free(&iv);
	hp_model_free(m);
}

/* One process's samples in given ranges, counted apart by a sampler without
 * a model (the interleaved comparison's): a child spinning in spin has most
 * of them in spin's bytes (this program's, at the same address in the
 * fork), none in a range it never runs, and every sample unmapped; without a
 * model, whole-system sampling and call chains are refused. */
static void a_process_is_counted_in_ranges_without_a_model(void)
{
	char err[256] = "";
	struct hp_sampler_opts bad = { .frequency = 997 };
	EXPECT(!hp_sampler_open(NULL, &bad, err, sizeof(err)) && strstr(err, "without a model"),
	       "the whole system was sampled without a model: %s", err);
	pid_t child = spinning_child();
	REQUIRE(child > 0, "fork: %s", strerror(errno));
	/* spin's loop is a few dozen bytes: 256 from its entry hold it (and spin_thread's call, never returning). */
	struct hp_pc_range ranges[] = { { (uint64_t)(uintptr_t)spin, (uint64_t)(uintptr_t)spin + 256 },
					{ 0x1000, 0x2000 } };
	struct hp_sampler_opts stacks = { .pid = child, .ranges = ranges, .nranges = 1, .stacks = true };
	struct hp_sampler *s = hp_sampler_open(NULL, &stacks, err, sizeof(err));
	EXPECT(!s, "call chains were sampled without a model");
	hp_sampler_close(s);
	struct hp_sample_interval in = { 0 }, none = { 0 };
	struct hp_sampler_opts so = { .pid = child, .ranges = ranges, .nranges = 1 };
	struct hp_sampler_opts so2 = { .pid = child, .ranges = ranges + 1, .nranges = 1 };
	struct hp_sampler *s2 = NULL;
	s = hp_sampler_open(NULL, &so, err, sizeof(err));
	if (s)
		s2 = hp_sampler_open(NULL, &so2, err, sizeof(err));
	if (s && s2 && cpu_time_passes(child, 1.0) == 0) {
		hp_sampler_take(s, &in);
		hp_sampler_take(s2, &none);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	hp_sampler_close(s);
	hp_sampler_close(s2);
	REQUIRE(s && s2, "sampler: %s", err);
	EXPECT(in.total >= 300, "only %llu samples in 1 s of the child's CPU time", (unsigned long long)in.total);
	EXPECT(in.in_ranges >= in.total / 2 && in.in_ranges <= in.total, "%llu of %llu samples in spin",
	       (unsigned long long)in.in_ranges, (unsigned long long)in.total);
	EXPECT(in.unmapped == in.total && in.nblocks == 0, "samples mapped without a model");
	EXPECT(none.total > 0 && none.in_ranges == 0, "%llu of %llu samples in a range never run",
	       (unsigned long long)none.in_ranges, (unsigned long long)none.total);
	hp_sample_interval_free(&in);
	hp_sample_interval_free(&none);
}

int main(void)
{
	char err[256] = "";
	struct hp_open_opts o = { .quiet = true };
	if (hp_model_open_kernel(&o, &kernel, err, sizeof(err)) < 0)
		fprintf(stderr, "cannot open the kernel model: %s\n", err);
	/* HOTPATH_SAMPLER_ONLY=process: one process's sampling only (no kernel workload). */
	const char *only = getenv("HOTPATH_SAMPLER_ONLY");
	if (only && !strcmp(only, "process")) {
		RUN(a_process_is_sampled_in_its_model);
		RUN(a_process_is_counted_in_ranges_without_a_model);
		hp_model_free(kernel);
		TEST_EXIT();
	}
	RUN(samples_map_onto_real_blocks);
	RUN(take_starts_a_new_interval);
	RUN(bad_options_are_refused);
	RUN(a_process_is_sampled_in_its_model);
	RUN(a_process_is_counted_in_ranges_without_a_model);
	hp_model_free(kernel);
	TEST_EXIT();
}
