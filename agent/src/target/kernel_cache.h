/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel's noreturn cache: which functions of vmlinux never return, as a
 * whole parse of the running kernel found them, kept in a file for the rest
 * of the boot. A parse of one function needs exactly this fact about every
 * function it calls; without it, it parses the whole call closure of the
 * function (a large part of vmlinux). Whole parses (the daemon's, `hotpathd
 * parse kernel`) write the file; one-function parses read it.
 *
 * The file is root's (0600, in a 0700 directory, HP_KERNEL_CACHE_DIR) and
 * bound to this boot (boot id), this kernel build (build id), vmlinux's
 * function count and text span as kallsyms gives them now, and the agent
 * binary that wrote it (its GNU build id: any rebuild of the parser
 * invalidates it). Only vmlinux's facts are kept: they depend on nothing a
 * module load changes. A file that is not exactly as written for this key
 * (size, order, bounds, checksum) is refused with the reason and never used.
 */
#ifndef HOTPATH_KERNEL_CACHE_H
#define HOTPATH_KERNEL_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HP_KERNEL_CACHE_DIR       "/run/hotpathd"
#define HP_KERNEL_CACHE_FILE      "kernel-noreturn"
/* No real cache comes near this (a vmlinux of 50,000 functions: ~30 KiB). */
#define HP_KERNEL_CACHE_MAX_BYTES (8u << 20)

/* What a cache file must have been written for. */
struct hp_kcache_key {
	char agent[65];  /* the agent binary's GNU build id (hex) */
	char boot[64];   /* /proc/sys/kernel/random/boot_id */
	char build[65];  /* the kernel's build id (hex) */
	uint64_t nfuncs; /* vmlinux functions in the model */
	uint64_t span;   /* vmlinux: end of its last function - its base */
};

/* A function of vmlinux that never returns: its offset from vmlinux's base,
 * and whether it is known by name (else proven from its code). */
struct hp_kcache_fn {
	uint64_t off;
	bool named;
};

/* The key of this process and kernel (agent, boot), with build, nfuncs and
 * span as given. -ENOENT when the agent binary has no build id or the boot id
 * is unreadable: then nothing is cached. */
int hp_kcache_key_now(struct hp_kcache_key *k, const char *build, uint64_t nfuncs, uint64_t span);

/* The file's text for v[0, n) (sorted by off, each off < k->span, n <=
 * k->nfuncs): malloc'd into *out, its length into *len. 0 or a negative errno. */
int hp_kcache_encode(const struct hp_kcache_key *k, const struct hp_kcache_fn *v, size_t n, char **out, size_t *len);

/* Read a file's text written for key k: 0 with *v (malloc'd, sorted by off)
 * and *n; or -EBADMSG / -ESTALE (another key) with the reason in why. */
int hp_kcache_decode(const char *buf, size_t len, const struct hp_kcache_key *k, struct hp_kcache_fn **v, size_t *n,
		     char *why, size_t whylen);

/* The cache of key k in dir: 0 and *v, *n; -ENOENT when there is none; any
 * other negative errno with why when a file is there but refused (not root's
 * own, other users may read or write it, or hp_kcache_decode refuses it). */
int hp_kcache_load(const char *dir, const struct hp_kcache_key *k, struct hp_kcache_fn **v, size_t *n, char *why,
		   size_t whylen);

/* Write the cache of key k into dir (created 0700 if missing), replacing the
 * file at once (a temporary file renamed). 0 or a negative errno with why. */
int hp_kcache_store(const char *dir, const struct hp_kcache_key *k, const struct hp_kcache_fn *v, size_t n, char *why,
		    size_t whylen);

#endif
