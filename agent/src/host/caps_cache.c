// SPDX-License-Identifier: Apache-2.0
/*
 * The capability probe's per-boot cache (caps_cache.h). Its text:
 *
 *   hotpath-caps 1
 *   NAME VALUE             the key's lines (hp_caps_key_now), in order
 *   ...
 *   cap NAME 0|1 DETAIL    one per cached capability, in probe order
 *   end COUNT SUM          the entries, and FNV-1a 64 of every byte before "end"
 *
 * The reader takes nothing on trust: the header must be the one this key
 * gives, byte for byte; every capability line must name the next cached
 * capability, with 0 or 1 and a detail of printable ASCII that fits; the
 * count and the sum must be right, and nothing may follow the end line.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/private_file.h"
#include "host/caps_cache.h"

#define MAGIC "hotpath-caps 1\n"

/* The cached capabilities, in the order hp_caps_probe reports them. */
static const char *const cached[] = { "fentry",          "fexit",  "kprobes", "kretprobes", "tracepoints",
				      "raw_tracepoints", "tp_btf", "uprobes", "uretprobes", "uprobe_multi" };
#define NCACHED (sizeof(cached) / sizeof(cached[0]))

bool hp_caps_cached_name(const char *name)
{
	for (size_t i = 0; i < NCACHED; i++)
		if (!strcmp(cached[i], name))
			return true;
	return false;
}

static uint64_t fnv1a(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= (uint8_t)p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The GNU build id of the running program, from its loaded notes (no file is
 * read: what runs is what is named). */
static int note_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	char *out = data;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;

		if (ph->p_type != PT_NOTE)
			continue;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			const char *name = p + sizeof(*n);
			const unsigned char *desc = (const unsigned char *)name + ((n->n_namesz + 3) & ~3u);

			if ((const char *)desc + n->n_descsz > end)
				break;
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !memcmp(name, "GNU", 4) &&
			    n->n_descsz && n->n_descsz <= 32) {
				for (size_t j = 0; j < n->n_descsz; j++)
					snprintf(out + 2 * j, 3, "%02x", desc[j]);
				return 1;
			}
			p = (const char *)desc + ((n->n_descsz + 3) & ~3u);
		}
	}
	return 1; /* the first object is the program itself: stop there */
}

/* The first line of path, without its newline; "-" when unreadable. */
static void first_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "re");

	snprintf(out, len, "-");
	if (!f)
		return;
	if (!fgets(out, (int)len, f))
		snprintf(out, len, "-");
	fclose(f);
	out[strcspn(out, "\n")] = 0;
}

/* The value of "Field:" in /proc/self/status, spaces squeezed out. */
static void status_field(const char *field, char *out, size_t len)
{
	char line[256];
	size_t fl = strlen(field);
	FILE *f = fopen("/proc/self/status", "re");

	snprintf(out, len, "-");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, field, fl) || line[fl] != ':')
			continue;
		const char *v = line + fl + 1;
		v += strspn(v, " \t");
		snprintf(out, len, "%.*s", (int)strcspn(v, "\n"), v);
		break;
	}
	fclose(f);
}

static void link_of(const char *path, char *out, size_t len)
{
	ssize_t n = readlink(path, out, len - 1);

	if (n < 0)
		n = snprintf(out, len, "-");
	out[n] = 0;
}

/* Printable ASCII, no newline: what a key value or a detail may hold. */
static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return false;
	return true;
}

int hp_caps_key_now(struct hp_caps_key *k)
{
	/* Each line one thing an answer may depend on. A file that is missing
	 * gives "-", which is an answer too (e.g. no lockdown LSM). */
	static const struct {
		const char *name, *path;
	} files[] = {
		{ "boot", "/proc/sys/kernel/random/boot_id" },
		{ "release", "/proc/sys/kernel/osrelease" },
		{ "version", "/proc/sys/kernel/version" },
		{ "lockdown", "/sys/kernel/security/lockdown" },
		{ "unprivileged_bpf_disabled", "/proc/sys/kernel/unprivileged_bpf_disabled" },
		{ "perf_event_paranoid", "/proc/sys/kernel/perf_event_paranoid" },
		{ "ftrace_enabled", "/proc/sys/kernel/ftrace_enabled" },
		{ "bpf_jit_enable", "/proc/sys/net/core/bpf_jit_enable" },
		{ "kprobes_enabled", "/sys/kernel/debug/kprobes/enabled" },
	};
	static const struct {
		const char *name, *path;
	} present[] = {
		{ "tracefs", "/sys/kernel/tracing/events" },
		{ "debugfs_tracing", "/sys/kernel/debug/tracing/events" },
		{ "kprobe_events", "/sys/kernel/tracing/kprobe_events" },
		{ "kprobe_pmu", "/sys/bus/event_source/devices/kprobe" },
		{ "uprobe_pmu", "/sys/bus/event_source/devices/uprobe" },
	};
	static const char *const ns[] = { "mnt", "pid", "user", "cgroup" };
	char agent[65] = "", v[256], boot[256];
	size_t at = 0;
	int n;

	memset(k, 0, sizeof(*k));
	dl_iterate_phdr(note_cb, agent);
	first_line(files[0].path, boot, sizeof(boot));
	/* Without either a file could outlive what it describes. */
	if (!agent[0] || !strcmp(boot, "-") || !boot[0])
		return -ENOENT;
#define LINE(...)                                                              \
	do {                                                                   \
		n = snprintf(k->text + at, sizeof(k->text) - at, __VA_ARGS__); \
		if (n < 0 || (size_t)n >= sizeof(k->text) - at)                \
			return -ENOSPC;                                        \
		at += (size_t)n;                                               \
	} while (0)
	LINE("agent %s\n", agent);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		first_line(files[i].path, v, sizeof(v));
		if (!printable(v))
			return -ENOENT;
		LINE("%s %s\n", files[i].name, v);
	}
	for (size_t i = 0; i < sizeof(present) / sizeof(present[0]); i++)
		LINE("%s %s\n", present[i].name, access(present[i].path, F_OK) ? "no" : "yes");
	LINE("euid %u\n", (unsigned)geteuid());
	status_field("CapEff", v, sizeof(v));
	LINE("cap_eff %s\n", v);
	status_field("Seccomp", v, sizeof(v));
	LINE("seccomp %s\n", v);
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		char p[64];
		snprintf(p, sizeof(p), "/proc/self/ns/%s", ns[i]);
		link_of(p, v, sizeof(v));
		if (!printable(v))
			return -ENOENT;
		LINE("ns_%s %s\n", ns[i], v);
	}
#undef LINE
	return 0;
}

int hp_caps_cache_encode(const struct hp_caps_key *k, const struct hp_caps *c, char **out, size_t *len)
{
	size_t cap = sizeof(MAGIC) + strlen(k->text) + NCACHED * (sizeof(c->caps[0].detail) + 40) + 64, at = 0, i;
	char *buf;

	*out = NULL;
	*len = 0;
	for (i = 0; i < NCACHED; i++) {
		const struct hp_cap *x = hp_caps_find(c, cached[i]);
		if (!x || !printable(x->detail))
			return -EINVAL;
	}
	if (!(buf = malloc(cap)))
		return -ENOMEM;
	at += (size_t)snprintf(buf + at, cap - at, "%s%s", MAGIC, k->text);
	for (i = 0; i < NCACHED; i++) {
		const struct hp_cap *x = hp_caps_find(c, cached[i]);
		at += (size_t)snprintf(buf + at, cap - at, "cap %s %d %s\n", x->name, x->available ? 1 : 0, x->detail);
	}
	at += (size_t)snprintf(buf + at, cap - at, "end %zu %016" PRIx64 "\n", (size_t)NCACHED, fnv1a(buf, at));
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

int hp_caps_cache_decode(const char *buf, size_t len, const struct hp_caps_key *k, struct hp_caps *c, char *why,
			 size_t whylen)
{
	size_t hl = strlen(k->text), at, count = 0;
	char tail[64];
	int r;

	memset(c, 0, sizeof(*c));
	if (len > HP_CAPS_CACHE_MAX_BYTES)
		WHY(-EBADMSG, "%zu bytes, more than any cache", len);
	if (len < sizeof(MAGIC) - 1 || memcmp(buf, MAGIC, sizeof(MAGIC) - 1))
		WHY(-EBADMSG, "not a capability cache of this format");
	at = sizeof(MAGIC) - 1;
	if (len - at < hl || memcmp(buf + at, k->text, hl)) {
		/* The first key line that differs says why. */
		size_t line = at, i;
		for (i = 0; i < hl && at + i < len && buf[at + i] == k->text[i]; i++)
			if (k->text[i] == '\n')
				line = at + i + 1;
		size_t key_at = line - at;
		WHY(-ESTALE, "written for another %.*s", (int)strcspn(k->text + key_at, " \n"), k->text + key_at);
	}
	at += hl;
	for (; at < len && count < NCACHED; count++) {
		const char *line = buf + at, *nl = memchr(line, '\n', len - at);
		size_t ll, nl_len = strlen(cached[count]);
		struct hp_cap *x = &c->caps[c->n];

		if (!nl)
			WHY(-EBADMSG, "cut short: its last line has no end");
		ll = (size_t)(nl - line);
		/* "cap NAME 0|1 DETAIL" */
		if (ll < 4 + nl_len + 3 || memcmp(line, "cap ", 4) || memcmp(line + 4, cached[count], nl_len) ||
		    line[4 + nl_len] != ' ' || (line[5 + nl_len] != '0' && line[5 + nl_len] != '1') ||
		    line[6 + nl_len] != ' ')
			WHY(-EBADMSG, "line %zu is not 'cap %s 0|1 DETAIL'", count + 1, cached[count]);
		const char *d = line + 7 + nl_len;
		size_t dl = ll - 7 - nl_len;
		if (dl >= sizeof(x->detail))
			WHY(-EBADMSG, "%s's detail is longer than any probe writes", cached[count]);
		for (size_t i = 0; i < dl; i++)
			if ((unsigned char)d[i] < 0x20 || (unsigned char)d[i] > 0x7e)
				WHY(-EBADMSG, "%s's detail holds a byte that is not printable", cached[count]);
		x->name = cached[count];
		x->available = line[5 + nl_len] == '1';
		memcpy(x->detail, d, dl);
		x->detail[dl] = 0;
		c->n++;
		at += ll + 1;
	}
	if (count < NCACHED)
		WHY(-EBADMSG, "cut short: %zu of %zu capabilities", count, (size_t)NCACHED);
	snprintf(tail, sizeof(tail), "end %zu %016" PRIx64 "\n", count, fnv1a(buf, at));
	if (len - at != strlen(tail) || memcmp(buf + at, tail, len - at))
		WHY(-EBADMSG, "its end line does not match its %zu capabilities (count or checksum)", count);
	return 0;
fail:
	memset(c, 0, sizeof(*c));
	return r;
}

/* dir is a directory (not a link) that only root may write to. */
static int root_dir(const char *dir, char *why, size_t whylen)
{
	struct stat st;

	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
		snprintf(why, whylen, "%s is not a directory only root can write to", dir);
		return -EPERM;
	}
	return 0;
}

int hp_caps_cache_load(const char *dir, const struct hp_caps_key *k, struct hp_caps *c, char *why, size_t whylen)
{
	char path[512], *buf = NULL;
	size_t got = 0;
	int r;

	memset(c, 0, sizeof(*c));
	snprintf(path, sizeof(path), "%s/%s", dir, HP_CAPS_CACHE_FILE);
	if ((r = hp_private_file_read(path, 0, HP_CAPS_CACHE_MAX_BYTES, &buf, &got, why, whylen)) < 0)
		return r;
	if ((r = root_dir(dir, why, whylen)) < 0)
		goto fail;
	if ((r = hp_caps_cache_decode(buf, got, k, c, why, whylen)) < 0) {
		char was[200];
		snprintf(was, sizeof(was), "%s", why);
		snprintf(why, whylen, "%s: %s", path, was);
	}
fail:
	free(buf);
	return r;
}

int hp_caps_cache_store(const char *dir, const struct hp_caps_key *k, const struct hp_caps *c, char *why, size_t whylen)
{
	char path[512], *buf = NULL;
	size_t len = 0;
	int r;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		snprintf(why, whylen, "cannot make %s: %s", dir, strerror(errno));
		return r;
	}
	if ((r = root_dir(dir, why, whylen)) < 0)
		return r;
	if ((r = hp_caps_cache_encode(k, c, &buf, &len)) < 0) {
		snprintf(why, whylen, "these answers are not cached: %s", strerror(-r));
		return r;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, HP_CAPS_CACHE_FILE);
	r = hp_private_file_replace(path, buf, len, why, whylen);
	free(buf);
	return r;
}

enum hp_caps_source hp_caps_get(struct hp_caps *c, bool model_ok, const char *model_detail, const char *dir,
				bool refresh, char *note, size_t notelen)
{
	const char *env = getenv("HOTPATH_CAPS_CACHE");
	struct hp_caps_key k;
	struct hp_caps bpf;
	char why[400] = "";
	bool use = geteuid() == 0 && !(env && !strcmp(env, "off"));

	if (note && notelen)
		note[0] = 0;
	if (!dir)
		dir = HP_CAPS_CACHE_DIR;
	if (!dir[0] || !use || hp_caps_key_now(&k) < 0) {
		hp_caps_probe(c, model_ok, model_detail);
		return HP_CAPS_PROBED;
	}
	if (!refresh) {
		int r = hp_caps_cache_load(dir, &k, &bpf, why, sizeof(why));
		if (r == 0) {
			hp_caps_probe_with(c, model_ok, model_detail, &bpf);
			hp_caps_apply_denials(c);
			return HP_CAPS_CACHED;
		}
		/* A cache of another key is simply replaced; anything else is told. */
		if (r != -ENOENT && r != -ESTALE && note && notelen)
			snprintf(note, notelen, "capability cache refused, probing: %s", why);
	}
	hp_caps_probe_with(c, model_ok, model_detail, NULL);
	if (hp_caps_cache_store(dir, &k, c, why, sizeof(why)) < 0 && note && notelen && !note[0])
		snprintf(note, notelen, "capability cache not written: %s", why);
	hp_caps_apply_denials(c);
	return HP_CAPS_PROBED;
}
