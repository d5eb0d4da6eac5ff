// SPDX-License-Identifier: Apache-2.0
/*
 * kmodtest: the kernel lane's proof of hotpath.ko's first slice, run in the
 * guest after its init loaded the module (it loads nothing itself).
 *
 *   kmodtest CYCLES
 *
 * Through /dev/hotpath (agent/kmod/hotpath_uapi.h) it reads the test module's
 * lane_step, writes a tiny function into a code heap (mov $1,%eax; ret: "take
 * the first branch every time"), redirects lane_step to it, and sees reads of
 * /proc/hotpath_lane change from "qooo" (every fourth read takes lane_step's
 * first branch) to "qqqq" and back on UNDO, CYCLES times; closes the device
 * with a redirect in place and sees the original back; and offers bad
 * requests that must be refused with their errno, leaving the behaviour as
 * it was. Then the same code through a call site (ABI 2): lane_read's call of
 * lane_step is made to call the heap (CALL_PATCH, through the kernel's
 * text_poke_bp) and back (CALL_UNDO), CYCLES times, with its own refusals,
 * and a close with a call site and a redirect in place restores both.
 * Prints one "ok - " / "FAIL - " line per check, "bytes NAME ADDR HEX" for
 * the host to compare with the .ko, "cycles C wrong W" (redirects), "call
 * cycles C wrong W", and last "kmodtest: P passed, F failed". Exit status 1
 * if a check failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hotpath_uapi.h"

#define LANE_FILE "/proc/hotpath_lane"
#define PATTERN_N 8
static const char original[] = "qoooqooo"; /* lane_step: first branch when n % 4 == 0 */
static const char redirected[] = "qqqqqqqq";
/* mov $1, %eax; ret; int3 */
static const unsigned char code[] = { 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3, 0xcc };

/* hotpath.ko's count of heaps freed by their opener that a task may still be
 * inside (kept until it has left); -1 when the module has no such count. */
static int draining(void)
{
	FILE *f = fopen("/sys/module/hotpath/parameters/draining", "r");
	int n = -1;

	if (f) {
		if (fscanf(f, "%d", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

static int passed, failed;

static void check(int ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("%s - %s", ok ? "ok" : "FAIL", name);
	if (fmt) {
		printf(": ");
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
	}
	printf("\n");
	fflush(stdout);
	if (ok)
		passed++;
	else
		failed++;
}

/* 0 or the errno of the request. */
static int req(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? errno : 0;
}

/* An address from /proc/kallsyms: NAME of module MOD (NULL: vmlinux). With
 * next, the address of the symbol that follows it in the same module. */
static uint64_t sym(const char *name, const char *mod, uint64_t *next)
{
	FILE *f = fopen("/proc/kallsyms", "r");
	char line[512], s[256], m[256], type;
	unsigned long long a;
	uint64_t found = 0, after = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		int n = sscanf(line, "%llx %c %255s [%255[^]]]", &a, &type, s, m);

		if (n < 3 || (mod ? n != 4 || strcmp(m, mod) : n != 3))
			continue;
		if (!found && !strcmp(s, name))
			found = a;
		else if (found && a > found && (!after || a < after))
			after = a;
	}
	fclose(f);
	if (next)
		*next = after;
	return found;
}

/* PATTERN_N reads of one byte on one open of /proc/hotpath_lane. */
static void pattern(char *out)
{
	int fd = open(LANE_FILE, O_RDONLY);
	int i;

	memset(out, '?', PATTERN_N);
	out[PATTERN_N] = '\0';
	if (fd < 0)
		return;
	for (i = 0; i < PATTERN_N; i++)
		if (read(fd, &out[i], 1) != 1)
			out[i] = '!';
	close(fd);
}

static int behaves(const char *want)
{
	char got[PATTERN_N + 1];

	pattern(got);
	return !strcmp(got, want);
}

/* b lies within a rel32 of a. */
static int near(uint64_t a, uint64_t b)
{
	int64_t d = (int64_t)(a - b);

	return d > -(int64_t)0x80000000ll && d < 0x7fffffffll;
}

static void hex(const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static int read_text(int fd, uint64_t addr, void *buf, uint32_t len)
{
	struct hotpath_read r = { .addr = addr, .buf = (uintptr_t)buf, .len = len };

	return req(fd, HOTPATH_READ, &r);
}

/* A sealed heap holding code; its id, address in *addr. -1 on failure. */
static int heap_with_code(int fd, uint64_t *addr)
{
	struct hotpath_heap_alloc a = { .size = 64 };
	struct hotpath_heap_write w = { .len = sizeof(code), .buf = (uintptr_t)code };
	struct hotpath_heap_id s;

	if (req(fd, HOTPATH_HEAP_ALLOC, &a))
		return -1;
	w.id = s.id = a.id;
	s.flags = 0;
	if (req(fd, HOTPATH_HEAP_WRITE, &w) || req(fd, HOTPATH_HEAP_SEAL, &s))
		return -1;
	*addr = a.addr;
	return (int)a.id;
}

/* The first e8 rel32 in bytes[0..len) (read at addr) calling to, or 0. */
static uint64_t call_of(const unsigned char *bytes, uint32_t len, uint64_t addr, uint64_t to)
{
	for (uint32_t i = 0; i + 5 <= len; i++) {
		int32_t rel;

		memcpy(&rel, bytes + i + 1, 4);
		if (bytes[i] == 0xe8 && addr + i + 5 + (uint64_t)(int64_t)rel == to)
			return addr + i;
	}
	return 0;
}

static int call_patch(int fd, uint64_t site, uint64_t target, const unsigned char *expect)
{
	struct hotpath_call c = { .site = site, .target = target };

	memcpy(c.expect, expect, sizeof(c.expect));
	return req(fd, HOTPATH_CALL_PATCH, &c);
}

static int call_undo(int fd, uint64_t site)
{
	struct hotpath_call_undo u = { .site = site };

	return req(fd, HOTPATH_CALL_UNDO, &u);
}

/* err is want, and lane_step still behaves as the original. */
static void refused(const char *name, int err, int want)
{
	int same = behaves(original);

	check(err == want && same, name, "%s (expected %s), lane_step %s", err ? strerror(err) : "accepted",
	      strerror(want), same ? "unchanged" : "CHANGED");
}

/* A position map (ABI 3) at offset at of a heap whose code starts at 0: one
 * symbol named name over the code's len bytes, one run of them as the
 * original's state at orig. magic and nruns as given (to make bad ones). */
static size_t make_map(unsigned char *out, uint32_t at, uint32_t len, const char *name, uint64_t orig, uint32_t magic,
		       uint32_t nruns)
{
	struct hotpath_map_head h = { .magic = magic,
				      .version = HOTPATH_MAP_VERSION,
				      .code_to_map = at,
				      .nsyms = 1,
				      .nruns = nruns,
				      .strtab_len = (uint32_t)strlen(name) + 1 };
	struct hotpath_map_sym sy = { .off = 0, .size = len, .name = 0 };
	struct hotpath_map_run r = { .off = 0, .len = len, .orig = orig, .kind = HOTPATH_RUN_STATE_AT };
	size_t n = 0;

	memcpy(out + n, &h, sizeof(h)), n += sizeof(h);
	memcpy(out + n, &sy, sizeof(sy)), n += sizeof(sy);
	memcpy(out + n, &r, sizeof(r)), n += sizeof(r);
	memcpy(out + n, name, strlen(name) + 1), n += strlen(name) + 1;
	return n;
}

/* ABI 3: a copy's names and unwind entries (HOTPATH_HEAP_UNWIND). A heap with
 * the tiny code at 0 and maps after it (a good one, bad ones), sealed; every
 * bad map refused with its errno and nothing named; the good one names the
 * code "lane_step [hotpath]" in /proc/kallsyms at the heap's address; a
 * second registration refused; DROP removes the name; HEAP_FREE drops a
 * registered heap's names with it. */
static void unwind_checks(int fd, uint64_t step, uint64_t jiffies)
{
	static const unsigned char code[] = { 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3 };
	enum { GOOD = 0x100, MAGIC = 0x200, NAME = 0x300, DATA = 0x400, SIZES = 0x500 };
	static const struct {
		uint32_t at;
		const char *name, *what;
		int bad_orig;
		uint32_t magic, nruns;
		int want;
	} maps[] = {
		{ MAGIC, "lane_step", "a map with a wrong magic", 0, 0x12345678u, 1, EINVAL },
		{ NAME, "lane step", "a map naming a function with a space", 0, HOTPATH_MAP_MAGIC, 1, EINVAL },
		{ DATA, "lane_step", "a map whose run is data (jiffies), not code", 1, HOTPATH_MAP_MAGIC, 1, ENOENT },
		{ SIZES, "lane_step", "a map whose counts disagree with its length", 0, HOTPATH_MAP_MAGIC, 2, EINVAL },
	};
	unsigned char map[128];
	size_t lens[5] = { 0 };
	struct hotpath_heap_alloc a = { .size = 4096 };
	int err = req(fd, HOTPATH_HEAP_ALLOC, &a);

	check(!err, "HEAP_ALLOC for the unwind checks", err ? strerror(err) : NULL);
	if (err)
		return;
	struct hotpath_heap_write w = { .id = a.id, .len = sizeof(code), .buf = (uintptr_t)code };
	err = req(fd, HOTPATH_HEAP_WRITE, &w);
	size_t n = make_map(map, GOOD, sizeof(code), "lane_step", step, HOTPATH_MAP_MAGIC, 1);
	struct hotpath_heap_write wm = { .id = a.id, .offset = GOOD, .len = (uint32_t)n, .buf = (uintptr_t)map };
	err = err ? err : req(fd, HOTPATH_HEAP_WRITE, &wm);
	lens[0] = n;
	for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]) && !err; i++) {
		lens[i + 1] = make_map(map, maps[i].at, sizeof(code), maps[i].name, maps[i].bad_orig ? jiffies : step,
				       maps[i].magic, maps[i].nruns);
		struct hotpath_heap_write wb = {
			.id = a.id, .offset = maps[i].at, .len = (uint32_t)lens[i + 1], .buf = (uintptr_t)map
		};
		err = req(fd, HOTPATH_HEAP_WRITE, &wb);
	}
	check(!err, "HEAP_WRITE of the code and its maps", err ? strerror(err) : NULL);
	struct hotpath_heap_unwind u = { .id = a.id, .offset = GOOD, .len = (uint32_t)lens[0] };
	refused("HEAP_UNWIND of an unsealed heap refused", req(fd, HOTPATH_HEAP_UNWIND, &u), EPERM);
	struct hotpath_heap_id s = { .id = a.id };
	err = req(fd, HOTPATH_HEAP_SEAL, &s);
	check(!err, "HEAP_SEAL of the unwind checks' heap", err ? strerror(err) : NULL);
	for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
		struct hotpath_heap_unwind b = { .id = a.id, .offset = maps[i].at, .len = (uint32_t)lens[i + 1] };
		char what[128];
		snprintf(what, sizeof(what), "HEAP_UNWIND of %s refused", maps[i].what);
		refused(what, req(fd, HOTPATH_HEAP_UNWIND, &b), maps[i].want);
	}
	struct hotpath_heap_unwind past = { .id = a.id, .offset = 4000, .len = 200 };
	refused("HEAP_UNWIND of a map past the heap's end refused", req(fd, HOTPATH_HEAP_UNWIND, &past), ERANGE);
	check(sym("lane_step", "hotpath", NULL) == 0, "no refused map named anything", NULL);
	err = req(fd, HOTPATH_HEAP_UNWIND, &u);
	uint64_t named = sym("lane_step", "hotpath", NULL);
	check(!err && named == a.addr, "HEAP_UNWIND names the copy lane_step [hotpath] at the heap",
	      "%s, kallsyms %#llx, heap %#llx", err ? strerror(err) : "ok", (unsigned long long)named,
	      (unsigned long long)a.addr);
	refused("a second HEAP_UNWIND of the heap refused", req(fd, HOTPATH_HEAP_UNWIND, &u), EEXIST);
	err = req(fd, HOTPATH_HEAP_UNWIND_DROP, &s);
	check(!err && sym("lane_step", "hotpath", NULL) == 0, "HEAP_UNWIND_DROP removes the name",
	      err ? strerror(err) : NULL);
	refused("HEAP_UNWIND_DROP of a heap with none refused", req(fd, HOTPATH_HEAP_UNWIND_DROP, &s), ENOENT);
	err = req(fd, HOTPATH_HEAP_UNWIND, &u);
	err = err ? err : req(fd, HOTPATH_HEAP_FREE, &s);
	check(!err && sym("lane_step", "hotpath", NULL) == 0, "HEAP_FREE of a named heap removes its name with it",
	      err ? strerror(err) : NULL);
}

int main(int argc, char **argv)
{
	int cycles = argc > 1 ? atoi(argv[1]) : 200;
	uint64_t step_end, step = sym("lane_step", "hotpath_lane", &step_end);
	uint64_t lread_end, lread = sym("lane_read", "hotpath_lane", &lread_end);
	uint64_t nap = sym("lane_nap", "hotpath_lane", NULL);
	uint64_t jiffies = sym("jiffies", NULL, NULL);
	uint64_t vmlinux_fn = sym("do_syscall_64", NULL, NULL); /* noinstr: no ftrace site */
	unsigned char before[256], bytes[256], after[256], heapbuf[64], bad[16], rdbefore[256], rdnow[256];
	struct hotpath_info info;
	struct utsname u;
	uint32_t len, rdlen;
	uint64_t heap, site;
	int fd, fd2, id, err, wrong = 0;

	if (!step || !nap || !jiffies || !vmlinux_fn || step_end <= step || !lread || lread_end <= lread) {
		check(0, "symbols",
		      "lane_step %#llx..%#llx, lane_read %#llx..%#llx, lane_nap %#llx, jiffies %#llx, do_syscall_64 %#llx",
		      (unsigned long long)step, (unsigned long long)step_end, (unsigned long long)lread,
		      (unsigned long long)lread_end, (unsigned long long)nap, (unsigned long long)jiffies,
		      (unsigned long long)vmlinux_fn);
		return 1;
	}
	len = step_end - step < sizeof(bytes) ? (uint32_t)(step_end - step) : sizeof(bytes);
	rdlen = lread_end - lread < sizeof(rdbefore) ? (uint32_t)(lread_end - lread) : sizeof(rdbefore);
	fd = open(HOTPATH_DEVICE, O_RDWR);
	if (fd < 0) {
		check(0, "open " HOTPATH_DEVICE, "%s (is hotpath.ko loaded?)", strerror(errno));
		printf("kmodtest: %d passed, %d failed\n", passed, failed);
		return 1;
	}

	/* INFO and READ. */
	uname(&u);
	err = req(fd, HOTPATH_INFO, &info);
	check(!err && info.abi_version == HOTPATH_ABI_VERSION && !strcmp(info.release, u.release), "INFO",
	      "ABI %u, release %s (uname: %s)", err ? 0 : info.abi_version, err ? strerror(err) : info.release,
	      u.release);
	check(behaves(original), "lane_step behaves as compiled before any request", NULL);
	err = read_text(fd, step, before, len);
	check(!err, "READ lane_step", "%u bytes at %#llx%s%s", len, (unsigned long long)step, err ? ": " : "",
	      err ? strerror(err) : "");
	printf("bytes lane_step %llx ", (unsigned long long)step);
	hex(before, len);
	printf("\n");
	refused("READ of a data symbol (jiffies) refused", read_text(fd, jiffies, bytes, 8), ERANGE);
	refused("READ of a user address refused", read_text(fd, (uintptr_t)&passed, bytes, 8), ERANGE);
	refused("READ longer than the limit refused", read_text(fd, step, bytes, HOTPATH_READ_MAX + 1), E2BIG);
	refused("READ of a range wrapping past the address space refused", read_text(fd, UINT64_MAX - 3, bytes, 8),
		ERANGE);

	/* A heap, written, not yet sealed. */
	struct hotpath_heap_alloc a = { .size = 64 };
	err = req(fd, HOTPATH_HEAP_ALLOC, &a);
	heap = a.addr;
	check(!err && !(heap & 4095) && near(heap, step) && near(heap + 4096, vmlinux_fn) && near(heap, vmlinux_fn),
	      "HEAP_ALLOC near the code", "%#llx: %lld MiB from lane_step, %lld MiB from do_syscall_64%s%s",
	      (unsigned long long)heap, (long long)(heap - step) / (1 << 20),
	      (long long)(heap - vmlinux_fn) / (1 << 20), err ? ": " : "", err ? strerror(err) : "");
	id = (int)a.id;
	struct hotpath_heap_alloc a0 = { .size = 0 }, abig = { .size = HOTPATH_HEAP_MAX + 1 };
	refused("HEAP_ALLOC of 0 bytes refused", req(fd, HOTPATH_HEAP_ALLOC, &a0), EINVAL);
	refused("HEAP_ALLOC above the limit refused", req(fd, HOTPATH_HEAP_ALLOC, &abig), E2BIG);
	struct hotpath_heap_write w = { .id = id, .len = sizeof(code), .buf = (uintptr_t)code };
	err = req(fd, HOTPATH_HEAP_WRITE, &w);
	check(!err, "HEAP_WRITE of the replacement (mov $1,%eax; ret)", err ? strerror(err) : NULL);
	struct hotpath_heap_write wout = { .id = id, .offset = 4096 - 2, .len = sizeof(code), .buf = (uintptr_t)code };
	refused("HEAP_WRITE past the heap's end refused", req(fd, HOTPATH_HEAP_WRITE, &wout), ERANGE);
	struct hotpath_redirect r = { .entry = step, .target = heap };
	refused("REDIRECT into an unsealed heap refused", req(fd, HOTPATH_REDIRECT, &r), EPERM);

	/* Sealed: read-only, executable. */
	struct hotpath_heap_id s = { .id = id };
	err = req(fd, HOTPATH_HEAP_SEAL, &s);
	check(!err, "HEAP_SEAL", err ? strerror(err) : NULL);
	struct hotpath_heap_write w2 = { .id = id, .len = 1, .buf = (uintptr_t) "\x90" };
	refused("HEAP_WRITE after the seal refused", req(fd, HOTPATH_HEAP_WRITE, &w2), EPERM);
	err = read_text(fd, heap, heapbuf, sizeof(heapbuf));
	check(!err && !memcmp(heapbuf, code, sizeof(code)) && heapbuf[sizeof(code)] == 0xcc &&
		      heapbuf[sizeof(heapbuf) - 1] == 0xcc,
	      "the heap holds the code, int3 after it, unchanged by the refused write", err ? strerror(err) : NULL);
	refused("a second HEAP_SEAL refused", req(fd, HOTPATH_HEAP_SEAL, &s), EPERM);

	/* Bad redirects. */
	struct hotpath_redirect r1 = { .entry = step + 1, .target = heap };
	refused("REDIRECT of a non-ftrace entry (lane_step+1) refused", req(fd, HOTPATH_REDIRECT, &r1), EINVAL);
	struct hotpath_redirect rn = { .entry = vmlinux_fn, .target = heap };
	refused("REDIRECT of a noinstr function (do_syscall_64) refused", req(fd, HOTPATH_REDIRECT, &rn), EINVAL);
	struct hotpath_redirect rdata = { .entry = jiffies, .target = heap };
	refused("REDIRECT of a data address refused", req(fd, HOTPATH_REDIRECT, &rdata), ERANGE);
	struct hotpath_redirect rf = { .entry = step, .target = nap };
	refused("REDIRECT to code outside the opener's heaps refused", req(fd, HOTPATH_REDIRECT, &rf), ERANGE);
	memcpy(bad, before, sizeof(bad));
	bad[sizeof(bad) - 1] ^= 0xff;
	struct hotpath_redirect rx = { .entry = step, .target = heap, .expect = (uintptr_t)bad, .expect_len = 16 };
	refused("REDIRECT with other original bytes than expected refused", req(fd, HOTPATH_REDIRECT, &rx), EBADMSG);
	struct hotpath_redirect rl = { .entry = step, .target = heap, .expect = (uintptr_t)bad, .expect_len = 33 };
	refused("REDIRECT expecting more bytes than the limit refused", req(fd, HOTPATH_REDIRECT, &rl), E2BIG);
	struct hotpath_redirect rg = { .entry = step, .target = heap, .flags = 1 };
	refused("REDIRECT with unknown flags refused", req(fd, HOTPATH_REDIRECT, &rg), EINVAL);
	refused("an unknown request refused", req(fd, _IO(HOTPATH_IOC_MAGIC, 99), NULL), ENOTTY);

	/* The redirect, with the original bytes as expected. */
	struct hotpath_redirect ok = { .entry = step, .target = heap, .expect = (uintptr_t)before, .expect_len = 16 };
	err = req(fd, HOTPATH_REDIRECT, &ok);
	check(!err && behaves(redirected), "REDIRECT lane_step to the heap changes /proc/hotpath_lane to qqqq",
	      err ? strerror(err) : NULL);
	err = read_text(fd, step, bytes, len);
	check(!err && memcmp(bytes, before, 5) && bytes[0] == 0xe8 && !memcmp(bytes + 5, before + 5, len - 5),
	      "while redirected only the 5-byte ftrace site differs (a call)", NULL);
	err = syscall(SYS_delete_module, "hotpath_lane", O_NONBLOCK) ? errno : 0;
	check(err == EWOULDBLOCK && behaves(redirected),
	      "hotpath_lane cannot be unloaded while lane_step is redirected", "%s", err ? strerror(err) : "unloaded");
	err = req(fd, HOTPATH_REDIRECT, &ok);
	check(err == EBUSY && behaves(redirected), "a second REDIRECT of the same entry refused, the first stays", "%s",
	      err ? strerror(err) : "accepted");
	struct hotpath_heap_id f = { .id = id };
	err = req(fd, HOTPATH_HEAP_FREE, &f);
	check(err == EBUSY && behaves(redirected), "HEAP_FREE of a heap a redirect points into refused", "%s",
	      strerror(err));
	struct hotpath_undo undo = { .entry = step };
	err = req(fd, HOTPATH_UNDO, &undo);
	check(!err && behaves(original), "UNDO restores the original behaviour", err ? strerror(err) : NULL);
	err = read_text(fd, step, after, len);
	check(!err && !memcmp(after, before, len), "UNDO restores lane_step's bytes", NULL);
	refused("UNDO of an entry not redirected refused", req(fd, HOTPATH_UNDO, &undo), ENOENT);
	unwind_checks(fd, step, jiffies);

	/* Many cycles, each result checked. */
	for (int i = 0; i < cycles; i++) {
		if (req(fd, HOTPATH_REDIRECT, &ok) || !behaves(redirected))
			wrong++;
		if (req(fd, HOTPATH_UNDO, &undo) || !behaves(original))
			wrong++;
	}
	printf("cycles %d wrong %d\n", cycles, wrong);
	check(!wrong, "REDIRECT/UNDO cycles", "%d cycles, %d wrong results", cycles, wrong);

	/* One opener at a time, root only. */
	fd2 = open(HOTPATH_DEVICE, O_RDWR);
	err = fd2 < 0 ? errno : 0;
	check(fd2 < 0 && err == EBUSY, "a second opener refused", "%s", fd2 < 0 ? strerror(err) : "opened");
	if (fd2 >= 0)
		close(fd2);
	pid_t pid = fork();
	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(100);
		_exit(open(HOTPATH_DEVICE, O_RDWR) < 0 ? errno : 0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	err = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	check(err == EACCES || err == EPERM, "a non-root opener refused", "%s",
	      err > 0 && err < 100 ? strerror(err) : "opened or did not run");

	/* Call sites: lane_read's call of lane_step made to call the heap. */
	err = read_text(fd, lread, rdbefore, rdlen);
	site = err ? 0 : call_of(rdbefore, rdlen, lread, step);
	check(site != 0, "lane_read calls lane_step (e8 rel32)", "at %#llx", (unsigned long long)site);
	const unsigned char *orig5 = site ? rdbefore + (site - lread) : rdbefore;
	unsigned char wrong5[5];
	memcpy(wrong5, orig5, 5);
	wrong5[4] ^= 0x01;
	refused("CALL_PATCH of a data address (jiffies) refused", call_patch(fd, jiffies, heap, orig5), ERANGE);
	refused("CALL_PATCH of a user address refused", call_patch(fd, (uintptr_t)&passed, heap, orig5), ERANGE);
	refused("CALL_PATCH with other original bytes than expected refused", call_patch(fd, site, heap, wrong5),
		EBADMSG);
	refused("CALL_PATCH of a call one byte off refused", call_patch(fd, site + 1, heap, orig5), EBADMSG);
	refused("CALL_PATCH of an ftrace site (lane_step's entry) refused",
		call_patch(fd, step, heap, (const unsigned char *)"\xe8\0\0\0\0"), EINVAL);
	memcpy(bad, orig5, 5);
	bad[0] = 0xe9;
	refused("CALL_PATCH expecting another instruction than a call refused", call_patch(fd, site, heap, bad),
		EINVAL);
	refused("CALL_PATCH to code outside the opener's heaps refused", call_patch(fd, site, nap, orig5), ERANGE);
	struct hotpath_heap_alloc a2 = { .size = 64 };
	err = req(fd, HOTPATH_HEAP_ALLOC, &a2);
	refused("CALL_PATCH into an unsealed heap refused", err ? -1 : call_patch(fd, site, a2.addr, orig5), EPERM);
	struct hotpath_heap_id f2 = { .id = a2.id };
	if (!err)
		req(fd, HOTPATH_HEAP_FREE, &f2);
	struct hotpath_call cf = { .site = site, .target = heap, .flags = 1 };
	memcpy(cf.expect, orig5, 5);
	refused("CALL_PATCH with unknown flags refused", req(fd, HOTPATH_CALL_PATCH, &cf), EINVAL);
	err = read_text(fd, lread, rdnow, rdlen);
	check(!err && !memcmp(rdnow, rdbefore, rdlen), "the refused CALL_PATCHes wrote nothing (lane_read's bytes)",
	      NULL);
	refused("CALL_UNDO of a site not patched refused", call_undo(fd, site), ENOENT);

	err = call_patch(fd, site, heap, orig5);
	check(!err && behaves(redirected), "CALL_PATCH of lane_read's call makes /proc/hotpath_lane qqqq", "%s",
	      err ? strerror(err) : "patched");
	err = read_text(fd, lread, rdnow, rdlen);
	check(!err && call_of(rdnow, rdlen, lread, heap) == site && !memcmp(rdnow, rdbefore, site - lread) &&
		      !memcmp(rdnow + (site - lread) + 5, rdbefore + (site - lread) + 5, rdlen - (site - lread) - 5),
	      "while patched only the call's 5 bytes differ: a call of the heap", NULL);
	err = call_patch(fd, site, heap, rdnow + (site - lread));
	check(err == EBUSY && behaves(redirected), "a second CALL_PATCH of the same site refused, the first stays",
	      "%s", err ? strerror(err) : "accepted");
	memcpy(bad, rdnow + (site - lread) + 2, 5);
	bad[0] = 0xe8;
	err = call_patch(fd, site + 2, heap, bad);
	check(err == EBUSY && behaves(redirected), "a CALL_PATCH overlapping a patched site refused", "%s",
	      err ? strerror(err) : "accepted");
	err = req(fd, HOTPATH_HEAP_FREE, &f);
	check(err == EBUSY && behaves(redirected), "HEAP_FREE of a heap a call site points into refused", "%s",
	      strerror(err));
	err = syscall(SYS_delete_module, "hotpath_lane", O_NONBLOCK) ? errno : 0;
	check(err == EWOULDBLOCK && behaves(redirected),
	      "hotpath_lane cannot be unloaded while its call site is patched", "%s", err ? strerror(err) : "unloaded");
	err = call_undo(fd, site);
	check(!err && behaves(original), "CALL_UNDO restores the original behaviour", err ? strerror(err) : NULL);
	err = read_text(fd, lread, rdnow, rdlen);
	check(!err && !memcmp(rdnow, rdbefore, rdlen), "CALL_UNDO restores lane_read's bytes", NULL);
	int call_wrong = 0;
	for (int i = 0; i < cycles; i++) {
		if (call_patch(fd, site, heap, orig5) || !behaves(redirected))
			call_wrong++;
		if (call_undo(fd, site) || !behaves(original))
			call_wrong++;
	}
	printf("call cycles %d wrong %d\n", cycles, call_wrong);
	check(!call_wrong, "CALL_PATCH/CALL_UNDO cycles", "%d cycles, %d wrong results", cycles, call_wrong);

	err = req(fd, HOTPATH_HEAP_FREE, &f);
	check(!err, "HEAP_FREE once nothing points into the heap", err ? strerror(err) : NULL);
	/* No task's stack is inside it (its code never sleeps): released at
	 * once, not left draining (guest/kdrain.sh has a task inside one). */
	int dr = draining();
	check(dr == 0, "HEAP_FREE of a heap no task is inside releases it at once (draining 0)", "draining %d", dr);
	refused("HEAP_FREE of a freed heap refused", req(fd, HOTPATH_HEAP_FREE, &f), ENOENT);

	/* Closing with a call site and a redirect in place undoes both. */
	id = heap_with_code(fd, &heap);
	struct hotpath_redirect left = { .entry = step, .target = heap };
	err = id < 0 ? -1 : req(fd, HOTPATH_REDIRECT, &left);
	if (!err && site)
		err = call_patch(fd, site, heap, orig5);
	check(!err && behaves(redirected), "a call site and a redirect left in place before close", NULL);
	close(fd);
	check(behaves(original), "closing the device restores the original behaviour", NULL);
	dr = draining();
	check(dr == 0, "closing the device released its heaps at once (draining 0)", "draining %d", dr);
	fd = open(HOTPATH_DEVICE, O_RDWR);
	err = fd < 0 ? errno : read_text(fd, step, after, len);
	check(!err && !memcmp(after, before, len),
	      "after close: the device opens again, lane_step's bytes are the original", err ? strerror(err) : NULL);
	err = fd < 0 ? -1 : read_text(fd, lread, rdnow, rdlen);
	check(!err && !memcmp(rdnow, rdbefore, rdlen), "after close: lane_read's call site bytes are the original",
	      NULL);
	if (fd >= 0)
		close(fd);

	printf("kmodtest: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
