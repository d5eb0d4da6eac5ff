/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Targets: the three places code can live, each opened as one code model.
 * The live kernel (/proc/kallsyms and kernel text read through BPF), an ELF
 * file on disk, and a running process (its mapped ELF files, bytes from
 * /proc/PID/mem). Everything above this layer works on struct hp_model and
 * does not care which target produced it.
 */
#ifndef HOTPATH_TARGET_H
#define HOTPATH_TARGET_H

#include <stdbool.h>
#include <stddef.h>

#include "model/model.h"

/* Options for opening a model. */
struct hp_open_opts {
	const char *only_function; /* parse just this function (fast CLI path); NULL = all */
	int threads;               /* decode threads; 0 = number of online CPUs */
	bool quiet;                /* no progress on stderr */
};

/*
 * Open a model. Each returns 0 and fills *out, or a negative errno and writes a
 * one-line human-readable reason into err (e.g. the missing capability).
 */
int hp_model_open_kernel(const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen);
int hp_model_open_elf(const char *path, const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen);
int hp_model_open_pid(int pid, const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen);

#endif
