// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel's noreturn cache file (kernel_cache.h). Its text:
 *
 *   hotpath-kernel-noreturn 1
 *   agent HEX        the writing agent binary's GNU build id
 *   boot UUID        /proc/sys/kernel/random/boot_id
 *   build HEX        the kernel's build id
 *   vmlinux N SPAN   vmlinux's function count and text span (decimal)
 *   n OFF | p OFF    one line per function that never returns: named or
 *                    proven, its offset from vmlinux's base (hex), ascending
 *   end COUNT SUM    the entries, and FNV-1a 64 of every byte before "end"
 *
 * The reader takes nothing on trust: every header line must be the one this
 * key gives, every entry in bounds and in order, the count and the sum right
 * and nothing after the end line.
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/private_file.h"
#include "target/kernel_cache.h"
#include "target/target_elf.h"

#define MAGIC       "hotpath-kernel-noreturn 1\n"
/* More entries than this is no vmlinux's (whatever its function count). */
#define MAX_ENTRIES (1u << 20)

static uint64_t fnv1a(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= (uint8_t)p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The header for k: its lines, in order, into buf. Its length, or -1 if it
 * does not fit. */
static int header(const struct hp_kcache_key *k, char *buf, size_t len)
{
	int n = snprintf(buf, len, MAGIC "agent %s\nboot %s\nbuild %s\nvmlinux %" PRIu64 " %" PRIu64 "\n", k->agent,
			 k->boot, k->build, k->nfuncs, k->span);

	return n < 0 || (size_t)n >= len ? -1 : n;
}

static bool plain(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || *s == '-'))
			return false;
	return true;
}

static void self_build_id(char *out)
{
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	Elf *e;

	out[0] = 0;
	if (fd < 0)
		return;
	if (elf_version(EV_CURRENT) != EV_NONE && (e = elf_begin(fd, ELF_C_READ, NULL))) {
		hp_elf_build_id(e, out);
		elf_end(e);
	}
	close(fd);
}

int hp_kcache_key_now(struct hp_kcache_key *k, const char *build, uint64_t nfuncs, uint64_t span)
{
	FILE *f;

	memset(k, 0, sizeof(*k));
	self_build_id(k->agent);
	if ((f = fopen("/proc/sys/kernel/random/boot_id", "re"))) {
		if (!fgets(k->boot, sizeof(k->boot), f))
			k->boot[0] = 0;
		fclose(f);
	}
	k->boot[strcspn(k->boot, "\n")] = 0;
	snprintf(k->build, sizeof(k->build), "%s", build ? build : "");
	k->nfuncs = nfuncs;
	k->span = span;
	/* Without any of them a file could outlive what it describes. */
	return plain(k->agent) && plain(k->boot) && plain(k->build) ? 0 : -ENOENT;
}

int hp_kcache_encode(const struct hp_kcache_key *k, const struct hp_kcache_fn *v, size_t n, char **out, size_t *len)
{
	size_t cap = 512 + n * 24, at;
	char *buf;
	int h;

	*out = NULL;
	*len = 0;
	if (n > k->nfuncs || n > MAX_ENTRIES)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (v[i].off >= k->span || (i && v[i].off <= v[i - 1].off))
			return -EINVAL;
	if (!(buf = malloc(cap)))
		return -ENOMEM;
	if ((h = header(k, buf, cap)) < 0) {
		free(buf);
		return -EINVAL;
	}
	at = (size_t)h;
	for (size_t i = 0; i < n; i++)
		at += (size_t)snprintf(buf + at, cap - at, "%c %" PRIx64 "\n", v[i].named ? 'n' : 'p', v[i].off);
	at += (size_t)snprintf(buf + at, cap - at, "end %zu %016" PRIx64 "\n", n, fnv1a(buf, at));
	*out = buf;
	*len = at;
	return 0;
}

#define WHY(code, ...)                              \
	do {                                        \
		snprintf(why, whylen, __VA_ARGS__); \
		r = (code);                         \
		goto fail;                          \
	} while (0)

/* The hex number of s[0, n): 1-16 lower-case digits. */
static bool hex_of(const char *s, size_t n, uint64_t *x)
{
	if (!n || n > 16)
		return false;
	*x = 0;
	for (size_t i = 0; i < n; i++) {
		int d = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10 : -1;
		if (d < 0)
			return false;
		*x = *x << 4 | (uint64_t)d;
	}
	return true;
}

int hp_kcache_decode(const char *buf, size_t len, const struct hp_kcache_key *k, struct hp_kcache_fn **v, size_t *n,
		     char *why, size_t whylen)
{
	char head[512], tail[64];
	struct hp_kcache_fn *out = NULL;
	size_t cap, at, count = 0;
	int h, r;

	*v = NULL;
	*n = 0;
	if (len > HP_KERNEL_CACHE_MAX_BYTES)
		WHY(-EBADMSG, "%zu bytes, more than any cache", len);
	if (len < sizeof(MAGIC) - 1 || memcmp(buf, MAGIC, sizeof(MAGIC) - 1))
		WHY(-EBADMSG, "not a kernel noreturn cache of this format");
	if ((h = header(k, head, sizeof(head))) < 0)
		WHY(-EINVAL, "the key does not fit a header");
	if (len < (size_t)h || memcmp(buf, head, (size_t)h)) {
		/* Which line differs says why. */
		static const char *const what[] = { "format", "agent binary", "boot", "kernel build", "vmlinux" };
		size_t line = 0;
		for (size_t i = 0; i < (size_t)h && i < len && buf[i] == head[i]; i++)
			line += buf[i] == '\n';
		WHY(-ESTALE, "written for another %s", what[line < 5 ? line : 4]);
	}
	cap = k->nfuncs < MAX_ENTRIES ? (size_t)k->nfuncs : MAX_ENTRIES;
	if (!(out = malloc((cap ? cap : 1) * sizeof(*out))))
		WHY(-ENOMEM, "out of memory");
	for (at = (size_t)h; at < len;) {
		const char *nl = memchr(buf + at, '\n', len - at);
		size_t ll;
		uint64_t off;

		if (!nl)
			WHY(-EBADMSG, "cut short: its last line has no end");
		ll = (size_t)(nl - (buf + at));
		if (ll >= 4 && !memcmp(buf + at, "end ", 4))
			break;
		if (ll < 3 || (buf[at] != 'n' && buf[at] != 'p') || buf[at + 1] != ' ' ||
		    !hex_of(buf + at + 2, ll - 2, &off))
			WHY(-EBADMSG, "entry %zu is not 'n OFFSET' or 'p OFFSET'", count + 1);
		if (off >= k->span)
			WHY(-EBADMSG, "entry %zu at +0x%" PRIx64 " is past vmlinux's text", count + 1, off);
		if (count && off <= out[count - 1].off)
			WHY(-EBADMSG, "entry %zu at +0x%" PRIx64 " is out of order", count + 1, off);
		if (count >= cap)
			WHY(-EBADMSG, "more entries than vmlinux has functions");
		out[count++] = (struct hp_kcache_fn){ off, buf[at] == 'n' };
		at += ll + 1;
	}
	if (at >= len)
		WHY(-EBADMSG, "cut short: no end line");
	snprintf(tail, sizeof(tail), "end %zu %016" PRIx64 "\n", count, fnv1a(buf, at));
	if (len - at != strlen(tail) || memcmp(buf + at, tail, len - at))
		WHY(-EBADMSG, "its end line does not match its %zu entries (count or checksum)", count);
	*v = out;
	*n = count;
	return 0;
fail:
	free(out);
	return r;
}

int hp_kcache_load(const char *dir, const struct hp_kcache_key *k, struct hp_kcache_fn **v, size_t *n, char *why,
		   size_t whylen)
{
	char path[512], *buf = NULL;
	size_t got = 0;
	int r;

	*v = NULL;
	*n = 0;
	snprintf(path, sizeof(path), "%s/%s", dir, HP_KERNEL_CACHE_FILE);
	if ((r = hp_private_file_read(path, geteuid(), HP_KERNEL_CACHE_MAX_BYTES, &buf, &got, why, whylen)) < 0)
		return r;
	r = hp_kcache_decode(buf, got, k, v, n, why, whylen);
	free(buf);
	return r;
}

int hp_kcache_store(const char *dir, const struct hp_kcache_key *k, const struct hp_kcache_fn *v, size_t n, char *why,
		    size_t whylen)
{
	char path[512];
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	int r;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(why, whylen, "cannot make %s: %s", dir, strerror(errno));
		return -errno;
	}
	/* Another user's directory, or one others may write to, is not ours to trust. */
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
		snprintf(why, whylen, "%s is not a directory only this user can write to", dir);
		return -EPERM;
	}
	if ((r = hp_kcache_encode(k, v, n, &buf, &len)) < 0) {
		snprintf(why, whylen, "cannot encode the cache: %s", strerror(-r));
		return r;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, HP_KERNEL_CACHE_FILE);
	r = hp_private_file_replace(path, buf, len, why, whylen);
	free(buf);
	return r;
}
