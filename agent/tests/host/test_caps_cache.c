// SPDX-License-Identifier: Apache-2.0
/*
 * The capability probe's per-boot cache (host/caps_cache.h) on this
 * machine's kernel: its key is this boot's, kernel's and agent's; answers
 * written by a real probe read back identical; a file written for another
 * key (each line in turn), changed in any byte, cut short anywhere, too
 * large, not root's alone, in a folder others may write to, or a link, is
 * refused and the probes run; HOTPATH_CAPS_CACHE=off bypasses it;
 * HOTPATH_DENY_MECHANISMS still applies to cached answers. And the cache's
 * word is not the kernel's: a forged file (root's own, checksum right) that
 * claims this kernel's forbidden mechanisms still ends in the kernel's
 * refusal when a measurement loads them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "harness.h"
#include "host/caps.h"
#include "host/caps_cache.h"
#include "measure/measure.h"

static struct hp_caps probed; /* every probe, no cache, no denials */
static char dir[64];

static bool same_answers(const struct hp_caps *a, const struct hp_caps *b, char *why, size_t len)
{
	if (a->n != b->n) {
		snprintf(why, len, "%zu vs %zu capabilities", a->n, b->n);
		return false;
	}
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->caps[i].name, b->caps[i].name) || a->caps[i].available != b->caps[i].available ||
		    strcmp(a->caps[i].detail, b->caps[i].detail)) {
			snprintf(why, len, "%s: %d '%s' vs %s: %d '%s'", a->caps[i].name, a->caps[i].available,
				 a->caps[i].detail, b->caps[i].name, b->caps[i].available, b->caps[i].detail);
			return false;
		}
	return true;
}

static int write_file(const char *path, const char *buf, size_t len, mode_t mode)
{
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
	if (fd < 0)
		return -errno;
	ssize_t w = write(fd, buf, len);
	close(fd);
	chmod(path, mode);
	return w == (ssize_t)len ? 0 : -EIO;
}

static char cache_path[128];

static void the_key_is_this_boot_kernel_and_agent(void)
{
	struct hp_caps_key k, k2;
	REQUIRE(hp_caps_key_now(&k) == 0, "no key on this machine");
	REQUIRE(hp_caps_key_now(&k2) == 0 && !strcmp(k.text, k2.text), "the key changes between two reads");
	char boot[64] = "", want[128];
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	REQUIRE(f && fgets(boot, sizeof(boot), f), "boot id unreadable");
	fclose(f);
	boot[strcspn(boot, "\n")] = 0;
	snprintf(want, sizeof(want), "\nboot %s\n", boot);
	EXPECT(strstr(k.text, want), "the key has no line '%s': %s", want + 1, k.text);
	struct utsname u;
	uname(&u);
	snprintf(want, sizeof(want), "\nrelease %s\n", u.release);
	EXPECT(strstr(k.text, want), "the key has no line for release %s", u.release);
	EXPECT(!strncmp(k.text, "agent ", 6) && strspn(k.text + 6, "0123456789abcdef") >= 16,
	       "the key does not start with the agent's build id: %.80s", k.text);
	static const char *const lines[] = { "\nlockdown ",
					     "\nunprivileged_bpf_disabled ",
					     "\nperf_event_paranoid ",
					     "\nftrace_enabled ",
					     "\nkprobes_enabled ",
					     "\ntracefs ",
					     "\ncap_eff ",
					     "\nseccomp ",
					     "\nns_mnt ",
					     "\neuid 0\n" };
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		EXPECT(strstr(k.text, lines[i]), "the key has no line%s", lines[i]);
}

static void answers_read_back_as_probed(void)
{
	struct hp_caps_key k;
	struct hp_caps back;
	char why[512] = "";
	REQUIRE(hp_caps_key_now(&k) == 0, "no key");
	REQUIRE(hp_caps_cache_store(dir, &k, &probed, why, sizeof(why)) == 0, "store: %s", why);
	struct stat st;
	REQUIRE(stat(cache_path, &st) == 0, "no file at %s", cache_path);
	EXPECT(st.st_uid == 0 && (st.st_mode & 0777) == 0600, "the file is %o, uid %u", st.st_mode & 0777,
	       (unsigned)st.st_uid);
	REQUIRE(hp_caps_cache_load(dir, &k, &back, why, sizeof(why)) == 0, "load: %s", why);
	/* What is cached: exactly the BPF probes, in order. */
	struct hp_caps want = { .n = 0 };
	for (size_t i = 0; i < probed.n; i++)
		if (hp_caps_cached_name(probed.caps[i].name))
			want.caps[want.n++] = probed.caps[i];
	EXPECT(want.n == 10, "%zu cached capabilities", want.n);
	EXPECT(same_answers(&want, &back, why, sizeof(why)), "read back: %s", why);
	/* The whole answer from the cache equals the probes' (bpf_text_read as given). */
	struct hp_caps whole;
	hp_caps_probe_with(&whole, true, "checked by the target tests", &back);
	EXPECT(same_answers(&probed, &whole, why, sizeof(why)), "with the cache: %s", why);
}

static void another_key_line_by_line_is_stale(void)
{
	struct hp_caps_key k;
	struct hp_caps back;
	char why[512] = "", *buf = NULL;
	size_t len = 0;
	REQUIRE(hp_caps_key_now(&k) == 0, "no key");
	REQUIRE(hp_caps_cache_encode(&k, &probed, &buf, &len) == 0, "encode");
	/* Change each key line's value in turn: the file is refused as stale, naming that line. */
	size_t lines = 0;
	for (const char *p = k.text; *p; p = strchr(p, '\n') + 1) {
		struct hp_caps_key other = k;
		char *line = other.text + (p - k.text), *sp = strchr(line, ' ');
		REQUIRE(sp, "a key line without a value: %s", line);
		sp[1] = sp[1] == 'x' ? 'y' : 'x';
		int r = hp_caps_cache_decode(buf, len, &other, &back, why, sizeof(why));
		char name[64];
		snprintf(name, sizeof(name), "another %.*s", (int)(sp - line), line);
		EXPECT(r == -ESTALE && strstr(why, name) && back.n == 0, "line '%.*s': %d %s", (int)strcspn(p, "\n"), p,
		       r, why);
		lines++;
	}
	EXPECT(lines >= 20, "only %zu key lines", lines);
	free(buf);
}

static void any_changed_byte_or_cut_is_refused(void)
{
	struct hp_caps_key k;
	struct hp_caps back;
	char why[512] = "", *buf = NULL;
	size_t len = 0, taken = 0;
	REQUIRE(hp_caps_key_now(&k) == 0, "no key");
	REQUIRE(hp_caps_cache_encode(&k, &probed, &buf, &len) == 0, "encode");
	for (size_t i = 0; i < len; i++) {
		char was = buf[i];
		buf[i] = (char)(was ^ 0x01);
		taken += hp_caps_cache_decode(buf, len, &k, &back, why, sizeof(why)) == 0;
		EXPECT(back.n == 0 && why[0], "byte %zu changed: answers kept or no reason", i);
		buf[i] = was;
	}
	EXPECT(taken == 0, "%zu one-bit changes taken", taken);
	for (size_t cut = 0; cut < len; cut++)
		taken += hp_caps_cache_decode(buf, cut, &k, &back, why, sizeof(why)) == 0;
	EXPECT(taken == 0, "%zu files cut short taken", taken);
	REQUIRE(hp_caps_cache_decode(buf, len, &k, &back, why, sizeof(why)) == 0, "the file itself: %s", why);
	free(buf);
}

/* A "fentry available" forged into text: the checksum must be recomputed by the forger. */
static char *forge(const struct hp_caps_key *k, size_t *len)
{
	struct hp_caps c = probed;
	for (size_t i = 0; i < c.n; i++)
		if (hp_caps_cached_name(c.caps[i].name) && !c.caps[i].available) {
			c.caps[i].available = true;
			snprintf(c.caps[i].detail, sizeof(c.caps[i].detail), "forged: said to work");
		}
	char *buf = NULL;
	return hp_caps_cache_encode(k, &c, &buf, len) == 0 ? buf : NULL;
}

static void a_file_not_roots_alone_is_refused(void)
{
	struct hp_caps_key k;
	struct hp_caps back;
	char why[512] = "";
	size_t len = 0;
	REQUIRE(hp_caps_key_now(&k) == 0, "no key");
	char *buf = forge(&k, &len);
	REQUIRE(buf, "forge");
	/* Readable or writable by others. */
	REQUIRE(write_file(cache_path, buf, len, 0644) == 0, "write");
	EXPECT(hp_caps_cache_load(dir, &k, &back, why, sizeof(why)) == -EPERM && back.n == 0, "0644: %s", why);
	REQUIRE(write_file(cache_path, buf, len, 0606) == 0, "write");
	EXPECT(hp_caps_cache_load(dir, &k, &back, why, sizeof(why)) == -EPERM, "0606: %s", why);
	/* Another user's file, mode right. */
	REQUIRE(write_file(cache_path, buf, len, 0600) == 0, "write");
	REQUIRE(chown(cache_path, 65534, 65534) == 0, "chown");
	EXPECT(hp_caps_cache_load(dir, &k, &back, why, sizeof(why)) == -EPERM && strstr(why, "only root"),
	       "nobody's file: %s", why);
	/* A link to a root file elsewhere. */
	char other[160];
	snprintf(other, sizeof(other), "%s.elsewhere", dir);
	REQUIRE(write_file(other, buf, len, 0600) == 0, "write");
	unlink(cache_path);
	REQUIRE(symlink(other, cache_path) == 0, "symlink");
	EXPECT(hp_caps_cache_load(dir, &k, &back, why, sizeof(why)) == -ELOOP, "a link: %s", why);
	unlink(other);
	unlink(cache_path);
	/* The right file in a folder others may write to (they could swap it). */
	REQUIRE(write_file(cache_path, buf, len, 0600) == 0, "write");
	chmod(dir, 0733);
	EXPECT(hp_caps_cache_load(dir, &k, &back, why, sizeof(why)) == -EPERM && strstr(why, "directory"),
	       "a folder others write to: %s", why);
	char w2[512];
	EXPECT(hp_caps_cache_store(dir, &k, &probed, w2, sizeof(w2)) == -EPERM, "stored into a folder others write to");
	chmod(dir, 0700);
	/* Larger than any cache (a valid file with a tail of garbage: the size is checked first). */
	char *big = malloc(HP_CAPS_CACHE_MAX_BYTES + 2);
	REQUIRE(big, "memory");
	memset(big, 'x', HP_CAPS_CACHE_MAX_BYTES + 1);
	memcpy(big, buf, len);
	REQUIRE(write_file(cache_path, big, HP_CAPS_CACHE_MAX_BYTES + 1, 0600) == 0, "write");
	EXPECT(hp_caps_cache_load(dir, &k, &back, why, sizeof(why)) == -EBADMSG && strstr(why, "more than"),
	       "too large: %s", why);
	free(big);
	/* None at all. */
	unlink(cache_path);
	EXPECT(hp_caps_cache_load(dir, &k, &back, why, sizeof(why)) == -ENOENT, "no file");
	free(buf);
}

static void get_probes_then_caches_and_can_be_bypassed(void)
{
	struct hp_caps c, again;
	char note[512], why[512];
	struct stat st;
	unlink(cache_path);
	unsetenv("HOTPATH_CAPS_CACHE");
	unsetenv("HOTPATH_DENY_MECHANISMS");
	EXPECT(hp_caps_get(&c, true, "checked by the target tests", dir, false, note, sizeof(note)) == HP_CAPS_PROBED,
	       "no file, yet not probed");
	EXPECT(!note[0], "note: %s", note);
	EXPECT(same_answers(&probed, &c, why, sizeof(why)), "first: %s", why);
	REQUIRE(stat(cache_path, &st) == 0, "the probe wrote no cache");
	EXPECT(hp_caps_get(&again, true, "checked by the target tests", dir, false, note, sizeof(note)) ==
		       HP_CAPS_CACHED,
	       "the second call probed again");
	EXPECT(same_answers(&probed, &again, why, sizeof(why)), "from the cache: %s", why);
	/* Denials apply to cached answers and are not written into the file. */
	setenv("HOTPATH_DENY_MECHANISMS", "uprobes,fentry", 1);
	EXPECT(hp_caps_get(&again, true, "x", dir, false, note, sizeof(note)) == HP_CAPS_CACHED, "denied: not cached");
	EXPECT(!hp_caps_find(&again, "uprobes")->available &&
		       strstr(hp_caps_find(&again, "uprobes")->detail, "HOTPATH_DENY_MECHANISMS"),
	       "uprobes not denied: %s", hp_caps_find(&again, "uprobes")->detail);
	unsetenv("HOTPATH_DENY_MECHANISMS");
	EXPECT(hp_caps_get(&again, true, "checked by the target tests", dir, false, note, sizeof(note)) ==
			       HP_CAPS_CACHED &&
		       same_answers(&probed, &again, why, sizeof(why)),
	       "the denial stuck in the file: %s", why);
	/* A forged file (root's own, right checksum) is what HOTPATH_CAPS_CACHE=off and `caps` (refresh) ignore. */
	struct hp_caps_key k;
	size_t len;
	REQUIRE(hp_caps_key_now(&k) == 0, "no key");
	char *buf = forge(&k, &len);
	REQUIRE(buf && write_file(cache_path, buf, len, 0600) == 0, "forge");
	setenv("HOTPATH_CAPS_CACHE", "off", 1);
	EXPECT(hp_caps_get(&again, true, "checked by the target tests", dir, false, note, sizeof(note)) ==
			       HP_CAPS_PROBED &&
		       same_answers(&probed, &again, why, sizeof(why)),
	       "HOTPATH_CAPS_CACHE=off read the file: %s", why);
	struct hp_caps_key dummy;
	char *now = NULL;
	size_t nlen = 0;
	REQUIRE(hp_caps_key_now(&dummy) == 0, "key");
	FILE *f = fopen(cache_path, "r");
	now = malloc(len + 1);
	REQUIRE(f && now, "reopen");
	nlen = fread(now, 1, len + 1, f);
	fclose(f);
	EXPECT(nlen == len && !memcmp(now, buf, len), "HOTPATH_CAPS_CACHE=off wrote the file");
	free(now);
	unsetenv("HOTPATH_CAPS_CACHE");
	EXPECT(hp_caps_get(&again, true, "checked by the target tests", dir, true, note, sizeof(note)) ==
			       HP_CAPS_PROBED &&
		       same_answers(&probed, &again, why, sizeof(why)),
	       "refresh took the file: %s", why);
	/* ...and the refresh replaced the forgery with the probes' answers. */
	EXPECT(hp_caps_get(&again, true, "checked by the target tests", dir, false, note, sizeof(note)) ==
			       HP_CAPS_CACHED &&
		       same_answers(&probed, &again, why, sizeof(why)),
	       "after the refresh: %s", why);
	/* A damaged file: told in the note, probed, and rewritten. */
	REQUIRE(write_file(cache_path, buf, len / 2, 0600) == 0, "cut");
	EXPECT(hp_caps_get(&again, true, "checked by the target tests", dir, false, note, sizeof(note)) ==
			       HP_CAPS_PROBED &&
		       strstr(note, "refused") && strstr(note, "cut short"),
	       "a cut file: note '%s'", note);
	EXPECT(hp_caps_get(&again, true, "checked by the target tests", dir, false, note, sizeof(note)) ==
		       HP_CAPS_CACHED,
	       "the cut file was not rewritten");
	/* No folder: probes, no cache. */
	EXPECT(hp_caps_get(&again, true, "checked by the target tests", "", false, note, sizeof(note)) ==
		       HP_CAPS_PROBED,
	       "\"\" used a cache");
	free(buf);
}

/* The cache claims every forbidden BPF mechanism works; a kernel measurement
 * that needs one still fails with the kernel's refusal, not silently. */
static void a_forged_answer_fails_at_load_with_the_kernel_s_reason(void)
{
	const struct hp_cap *fe = hp_caps_find(&probed, "fentry"), *kp = hp_caps_find(&probed, "kprobes");
	if (fe->available || kp->available)
		SKIP("this kernel allows fentry or kprobes: nothing forbidden to forge");
	struct hp_caps_key k;
	size_t len;
	REQUIRE(hp_caps_key_now(&k) == 0, "no key");
	char *buf = forge(&k, &len);
	REQUIRE(buf && write_file(cache_path, buf, len, 0600) == 0, "forge");
	free(buf);
	static const char *const res[] = { "vfs_read" };
	struct hp_measure_spec s = { .target = HP_MEASURE_KERNEL,
				     .resources = res,
				     .nresources = 1,
				     .metrics = HP_METRIC_BIT(HP_METRIC_COUNT) };
	struct hp_measure_env env = { .caps_cache_dir = dir };
	struct hp_measure *h = NULL;
	char err[2048] = "";
	int r = hp_measure_open(&s, &env, &h, err, sizeof(err));
	EXPECT(r < 0 && !h, "armed on a forged answer");
	/* The kernel's own refusal of the mechanism the forgery offered (here: "vfs_read: loading
	 * fentry/fexit programs for vfs_read failed: EPERM (Operation not permitted)"). */
	EXPECT(r == -HP_MEASURE_E_SYSTEM && (strstr(err, "fentry") || strstr(err, "kprobe")) && strstr(err, "failed") &&
		       (strstr(err, "EPERM") || strstr(err, "ENOENT") || strstr(err, "EACCES")),
	       "the error does not carry the kernel's refusal: %d %s", r, err);
	if (h)
		hp_measure_close(h);
	unlink(cache_path);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("ok - caps_cache # SKIP the cache is root's only\n");
		return 0;
	}
	snprintf(dir, sizeof(dir), "/tmp/hotpath-caps-XXXXXX");
	if (!mkdtemp(dir)) {
		printf("FAIL - caps_cache: mkdtemp\n");
		return 1;
	}
	snprintf(cache_path, sizeof(cache_path), "%s/%s", dir, HP_CAPS_CACHE_FILE);
	unsetenv("HOTPATH_DENY_MECHANISMS");
	hp_caps_probe_with(&probed, true, "checked by the target tests", NULL);
	RUN(the_key_is_this_boot_kernel_and_agent);
	RUN(answers_read_back_as_probed);
	RUN(another_key_line_by_line_is_stale);
	RUN(any_changed_byte_or_cut_is_refused);
	RUN(a_file_not_roots_alone_is_refused);
	RUN(get_probes_then_caches_and_can_be_bypassed);
	RUN(a_forged_answer_fails_at_load_with_the_kernel_s_reason);
	unlink(cache_path);
	rmdir(dir);
	TEST_EXIT();
}
