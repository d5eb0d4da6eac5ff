/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small private files read and replaced whole (the per-boot caches:
 * target/kernel_cache.c, host/caps_cache.c).
 */
#ifndef HOTPATH_BASE_PRIVATE_FILE_H
#define HOTPATH_BASE_PRIVATE_FILE_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Reads the regular file at path whole, never through a link, only when owner
 * owns it, no one else may read or write it (mode & 077 == 0) and it has at
 * most max bytes: *buf (malloc'd, NUL-terminated, the caller frees it) and
 * *len. 0, or a negative errno with why filled; -ENOENT (no file) leaves why
 * as it was, since a missing cache is no error.
 */
int hp_private_file_read(const char *path, uid_t owner, size_t max, char **buf, size_t *len, char *why, size_t whylen);

/*
 * Replaces the file at path whole: the bytes go to PATH.<pid>, created 0600
 * and never through a link, then are renamed over PATH, so a reader sees the
 * old file or the new one, never a part. 0, or a negative errno with why
 * filled (nothing is left behind).
 */
int hp_private_file_replace(const char *path, const char *buf, size_t len, char *why, size_t whylen);

#endif
