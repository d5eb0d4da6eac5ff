/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Whole-system sampling against the live kernel: while this process keeps a
 * CPU busy reading /dev/zero, the sampler must see samples, attribute them to
 * real basic blocks of the model (on the read path among them), keep its
 * totals consistent, and start a fresh interval on every take.
 */
#include <errno.h>
#include <fcntl.h>
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

int main(void)
{
	char err[256] = "";
	struct hp_open_opts o = { .quiet = true };
	if (hp_model_open_kernel(&o, &kernel, err, sizeof(err)) < 0)
		fprintf(stderr, "cannot open the kernel model: %s\n", err);
	RUN(samples_map_onto_real_blocks);
	RUN(take_starts_a_new_interval);
	RUN(bad_options_are_refused);
	hp_model_free(kernel);
	TEST_EXIT();
}
