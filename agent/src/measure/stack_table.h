/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The call stacks of one sampling interval, aggregated: each distinct stack
 * once (its frames leaf first, mapped onto the code model where they can be),
 * and one count per (stack, process, command, CPU). The sampler's drain thread
 * adds every sample's chain; taking an interval moves everything into an
 * hp_stack_set the caller owns and starts the next interval empty. Memory is
 * bounded: a sample whose stack or count does not fit the interval's tables is
 * counted as dropped, never silently lost.
 */
#ifndef HOTPATH_STACK_TABLE_H
#define HOTPATH_STACK_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* Where a frame lies (values match proto hotpath.v1.FrameKind). */
enum hp_frame_kind {
	HP_FRAME_KERNEL = 1,      /* a function of the model: mod, fn, offset from the function start */
	HP_FRAME_KERNEL_ADDR = 2, /* kernel text outside every known function: offset is the address */
	HP_FRAME_USER = 3,        /* a file mapped executable: mod indexes paths, offset is the file offset */
	HP_FRAME_USER_ADDR = 4,   /* user memory no file backs (JIT code, garbage chains): offset is the address */
};

/* Distinct stacks and counts of one interval at most (a sample beyond is dropped). */
#define HP_STACKS_PER_INTERVAL       32768
#define HP_STACK_COUNTS_PER_INTERVAL 49152

/*
 * One frame. The leaf is the sampled PC; every other frame is a return
 * address, so its offset may equal its function's size (a call at the very
 * end of a function that never returns).
 */
struct hp_frame {
	uint8_t kind;    /* enum hp_frame_kind */
	uint32_t mod;    /* KERNEL: model module index; USER: index into hp_stack_set.paths */
	uint32_t fn;     /* KERNEL: function index within the module; else 0 */
	uint64_t offset; /* see enum hp_frame_kind */
};

/* A frame as the sampler maps it: a user file is named by a path that stays
 * valid until the interval is taken. */
struct hp_frame_in {
	uint8_t kind;
	uint32_t mod, fn;
	uint64_t offset;
	const char *path; /* HP_FRAME_USER */
};

struct hp_stack {
	uint32_t first;   /* index of the leaf in hp_stack_set.frames */
	uint32_t nframes; /* frames[first .. first + nframes), leaf first */
};

struct hp_stack_count {
	uint32_t stack; /* index into hp_stack_set.stacks */
	uint32_t pid;   /* process (thread group) id; 0 is the idle task */
	uint32_t cpu;
	uint32_t comm; /* index into hp_stack_set.comms */
	uint64_t count;
};

/* Everything one interval counted. All arrays belong to the set. */
struct hp_stack_set {
	struct hp_frame *frames;
	size_t nframes;
	struct hp_stack *stacks;
	size_t nstacks;
	struct hp_stack_count *counts;
	size_t ncounts;
	char **paths; /* files user frames lie in */
	size_t npaths;
	char (*comms)[16]; /* command names, NUL-terminated, printable ASCII */
	size_t ncomms;
	uint64_t samples;        /* samples counted: the sum of counts */
	uint64_t dropped;        /* samples with a chain that did not fit the interval's tables */
	uint64_t at_depth_limit; /* counted chains as long as the depth limit (possibly cut) */
};

struct hp_stack_table;

struct hp_stack_table *hp_stack_table_new(unsigned depth_limit);
void hp_stack_table_free(struct hp_stack_table *t);
/* Count one sample's chain (n frames, leaf first). */
void hp_stack_table_add(struct hp_stack_table *t, const struct hp_frame_in *frames, size_t n, uint32_t pid,
			uint32_t cpu, const char *comm);
/* Move the interval into *out (owned by the caller) and start empty; 0 or -ENOMEM (then *out is empty and
 * the interval is lost). */
int hp_stack_table_take(struct hp_stack_table *t, struct hp_stack_set *out);
void hp_stack_set_free(struct hp_stack_set *s);

#endif
