/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replacing a small file whole (the per-boot caches: target/kernel_cache.c,
 * host/caps_cache.c): the bytes go to PATH.<pid>, created 0600 and never
 * through a link, then are renamed over PATH, so a reader sees the old file
 * or the new one, never a part.
 */
#ifndef HOTPATH_BASE_FILE_REPLACE_H
#define HOTPATH_BASE_FILE_REPLACE_H

#include <stddef.h>

/* 0, or a negative errno with why filled (nothing is left behind). */
int hp_file_replace(const char *path, const char *buf, size_t len, char *why, size_t whylen);

#endif
