/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The capability probe's answers kept for the rest of the boot. The probes
 * that load and fire BPF programs (fentry, fexit, kprobes, kretprobes,
 * tracepoints, raw_tracepoints, tp_btf, uprobes, uretprobes, uprobe_multi)
 * cost seconds under emulation, mostly in parsing the kernel's BTF, and
 * their answers do not change within a boot unless one of the things the key
 * holds changes. The others (kallsyms, sampling, the PMU, ptrace, cgroup v2,
 * code replacement) are cheap and depend on settings a key would have to
 * follow anyway (kptr_restrict, Yama, mounts), so they are always probed.
 *
 * The file is root's (0600, in a directory only root may write to,
 * HP_CAPS_CACHE_DIR) and holds the answers for one key: this boot (boot id),
 * this kernel (release and version string), the agent binary (its GNU build
 * id), and every setting that can change an answer within a boot: lockdown,
 * the BPF, perf, ftrace and JIT sysctls, whether kprobes are enabled, which
 * tracing file systems are mounted, and the calling process's effective
 * capabilities, seccomp mode and namespaces. A file written for another key,
 * or not exactly as written (size, names, order, count, checksum), is
 * refused with the reason and the probes run. Only root reads or writes it:
 * another user's process always probes. HOTPATH_CAPS_CACHE=off bypasses it
 * (probes run, nothing is read or written).
 */
#ifndef HOTPATH_CAPS_CACHE_H
#define HOTPATH_CAPS_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "host/caps.h"

#define HP_CAPS_CACHE_DIR       "/run/hotpathd"
#define HP_CAPS_CACHE_FILE      "caps"
/* The cached answers' text is ~2 KiB; no valid file comes near this. */
#define HP_CAPS_CACHE_MAX_BYTES (64u << 10)
#define HP_CAPS_KEY_MAX         2048

/* What a cache file must have been written for: "NAME VALUE" lines. */
struct hp_caps_key {
	char text[HP_CAPS_KEY_MAX];
};

/* The key of this process now. -ENOENT when the boot id or the agent's build
 * id cannot be read (then nothing is cached); -ENOSPC if it does not fit. */
int hp_caps_key_now(struct hp_caps_key *k);

/* Whether a capability's answer is kept in the cache (the BPF probes). */
bool hp_caps_cached_name(const char *name);

/* The file's text for c's cached answers under key k: malloc'd into *out,
 * its length into *len. 0, or -EINVAL when c lacks one of them or a detail
 * holds anything but printable ASCII (then it is not cached). */
int hp_caps_cache_encode(const struct hp_caps_key *k, const struct hp_caps *c, char **out, size_t *len);

/* Read a file's text written for k into *c (the cached answers only, in
 * probe order). 0, or -EBADMSG / -ESTALE (another key) with why. */
int hp_caps_cache_decode(const char *buf, size_t len, const struct hp_caps_key *k, struct hp_caps *c, char *why,
			 size_t whylen);

/* The cache of key k in dir: 0; -ENOENT when there is none; another negative
 * errno with why when one is there but refused (the directory or the file
 * not root's alone, too large, or decode refuses it). */
int hp_caps_cache_load(const char *dir, const struct hp_caps_key *k, struct hp_caps *c, char *why, size_t whylen);

/* Write c's cached answers for k into dir (created 0700 if missing), replacing
 * the file at once (a temporary file renamed). 0 or a negative errno with why. */
int hp_caps_cache_store(const char *dir, const struct hp_caps_key *k, const struct hp_caps *c, char *why,
			size_t whylen);

/* Where hp_caps_get's answers came from. */
enum hp_caps_source {
	HP_CAPS_PROBED = 0, /* every probe ran (no cache, or bypassed, or refused) */
	HP_CAPS_CACHED = 1, /* the BPF probes' answers from the cache, the rest probed */
};

/*
 * hp_caps_probe with the cache in dir (NULL: HP_CAPS_CACHE_DIR; "": none):
 * when refresh is false and a valid file is there, the BPF probes' answers
 * come from it; otherwise every probe runs and, as root, the file is
 * (re)written. A refused file or a failed write is told in note (else "").
 * HOTPATH_DENY_MECHANISMS applies either way, after.
 */
enum hp_caps_source hp_caps_get(struct hp_caps *c, bool model_ok, const char *model_detail, const char *dir,
				bool refresh, char *note, size_t notelen);

#endif
