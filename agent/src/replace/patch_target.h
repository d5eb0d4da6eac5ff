/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where replacement writes: the target interface. The install and revert
 * engine (install_engine.c, revert.c) is written against these operations
 * only; a running process implements them with ptrace and /proc/PID/mem
 * (process_target.c), and the kernel module's /dev/hotpath implements the same set (allocate a
 * code heap near text, write it, redirect an entry, patch a call site,
 * undo, release) in the kernel target.
 *
 * Every change to existing code is an undo record: prepared first (the
 * original bytes read, the new ones computed, nothing written), journaled
 * by the engine, then applied; restoring writes the original bytes back.
 * A target may need scratch bytes of its own to work (the process target's
 * injection trampolines): they are an undo record too.
 */
#ifndef HOTPATH_REPLACE_PATCH_TARGET_H
#define HOTPATH_REPLACE_PATCH_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HP_UNDO_MAX 16

enum hp_undo_kind { HP_UNDO_SCRATCH, HP_UNDO_ENTRY, HP_UNDO_CALL };

struct hp_undo {
	uint8_t kind; /* enum hp_undo_kind */
	uint8_t len;
	uint64_t addr;
	uint8_t orig[HP_UNDO_MAX]; /* what was there */
	uint8_t now[HP_UNDO_MAX];  /* what the change writes */
	/* Scratch records are longer: their bytes live here (malloc'd). */
	uint8_t *big_orig, *big_now;
	size_t big_len;
};

/* A code heap: the copy's image (code, then its unwind data) where it runs,
 * and a writable area beside it for the unwinder's registration. */
struct hp_heap {
	char name[64]; /* unique per install: how leftovers are found after a crash */
	uint64_t addr;
	size_t len;
	size_t rw_off; /* from here to len the heap is read+write (counters), not exec; 0: none */
	uint64_t data; /* writable area, 0 when none */
	size_t data_len;
	uint64_t unwind;   /* the registered .eh_frame (a kernel copy's position map), 0 when none */
	size_t unwind_len; /* its bytes, as the plan has them */
	bool unwind_registered;
};

/* Where an instruction boundary of the original runs in the copy: the
 * address a thread stopped at orig_pc may continue from, or 0. */
typedef uint64_t (*hp_pc_map_fn)(void *ctx, uint64_t orig_pc);

struct hp_patch_target;

struct hp_patch_ops {
	const char *kind; /* "process", "kernel" */
	/* Where the file (path, GNU build id) is loaded: its load bias (the
	 * address its file address 0 has). -ENOENT not loaded, -ESTALE another
	 * build is loaded there (err says which). */
	int (*module_base)(struct hp_patch_target *t, const char *path, const char *build_id, uint64_t *bias, char *err,
			   size_t errlen);
	/* Stop the target's code from running (every thread of a process). */
	int (*quiesce)(struct hp_patch_target *t, char *err, size_t errlen);
	/* Let it run again. */
	void (*resume)(struct hp_patch_target *t);
	int (*read)(struct hp_patch_target *t, uint64_t addr, void *buf, size_t len);
	/* The bytes as they are, breakpoints included (read hides a uprobe's
	 * int3 as the file's byte, which would also hide an int3-valued byte of
	 * our own writes: a rel32 holding 0xcc). NULL: read is raw already. */
	int (*read_raw)(struct hp_patch_target *t, uint64_t addr, void *buf, size_t len);
	/* Scratch bytes the target needs while quiesced (len 0: none). */
	int (*prepare_scratch)(struct hp_patch_target *t, struct hp_undo *u, char *err, size_t errlen);
	/* A free, page-aligned place for len bytes within [lo, hi), nearest to near. */
	int (*heap_place)(struct hp_patch_target *t, uint64_t lo, uint64_t hi, uint64_t near, size_t len,
			  uint64_t *addr, char *err, size_t errlen);
	/* Give back a place heap_place chose when the install stops before
	 * heap_map (NULL: placing holds nothing). */
	void (*heap_unplace)(struct hp_patch_target *t, uint64_t addr);
	/* Map h->len bytes of image at h->addr, executable, and (h->data_len
	 * not 0) a writable data area anywhere, setting h->data and its real
	 * h->data_len; h->name names them. */
	int (*heap_map)(struct hp_patch_target *t, struct hp_heap *h, const uint8_t *image, char *err, size_t errlen);
	/* Register / deregister the unwind data at h->unwind with the target's
	 * unwinder (0 and nothing done when the target has none). */
	int (*unwind_register)(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen);
	int (*unwind_deregister)(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen);
	/* Before an unwind_deregister (and before its journal record): mark the
	 * call as not yet finished, for unwind_settle. */
	int (*unwind_arm)(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen);
	/* After an unwind_register (or an unwind_deregister) cut short by the
	 * agent's death: whether the call finished (1: then h->unwind_registered
	 * is set as it left it), had not run (0), or may still be running in
	 * some thread (-EAGAIN). The target is quiesced. */
	int (*unwind_settle)(struct hp_patch_target *t, struct hp_heap *h, bool deregister, char *err, size_t errlen);
	/* Undo records for redirecting fn's entry to new_entry, and for making
	 * the call instruction at site call new_target. Nothing is written. */
	int (*prepare_entry)(struct hp_patch_target *t, uint64_t fn, uint64_t new_entry, struct hp_undo *u, char *err,
			     size_t errlen);
	int (*prepare_call)(struct hp_patch_target *t, uint64_t site, uint64_t new_target, struct hp_undo *u, char *err,
			    size_t errlen);
	/* Write u->now (apply) or u->orig (restore), never while a thread is
	 * inside the bytes: its PC is moved with map (may be NULL) or the
	 * target runs briefly and the write is tried again. */
	int (*apply)(struct hp_patch_target *t, const struct hp_undo *u, hp_pc_map_fn map, void *ctx, char *err,
		     size_t errlen);
	int (*restore)(struct hp_patch_target *t, const struct hp_undo *u, char *err, size_t errlen);
	/* Whether code in [lo, hi) may still be running (1, why filled), or not (0). */
	int (*in_use)(struct hp_patch_target *t, uint64_t lo, uint64_t hi, char *why, size_t wlen);
	/* Free the heap (and its data area). */
	int (*heap_release)(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen);
	/* Leftovers of an install named name after a crash: heaps still
	 * mapped are described into h (1), none (0). */
	int (*heap_find)(struct hp_patch_target *t, const char *name, struct hp_heap *h);
	/* The target is still the one planned for (the process did not exit). */
	bool (*alive)(struct hp_patch_target *t);
	void (*close)(struct hp_patch_target *t);
};

struct hp_patch_target {
	const struct hp_patch_ops *ops;
	void *priv;
	char desc[128];    /* "process 1234 (name)" */
	uint64_t instance; /* which run of it: a process's start time (ticks after boot) */
	/* Timing of the last quiesce, for reports and benchmarks. */
	double quiesce_seconds;
	/* Threads found inside bytes about to be written: moved to the copy's
	 * equivalent instruction, or waited for (the target ran briefly). */
	unsigned pcs_moved, waits;
};

/* The process target: pid, which must have started at start_time (clock
 * ticks after boot; 0: not checked). */
int hp_patch_target_process(int pid, uint64_t start_time, struct hp_patch_target *t, char *err, size_t errlen);

/* The kernel target (kernel_target.c): hotpath.ko's /dev/hotpath, opened
 * once and held for the rest of this process's life (closing it makes the
 * module undo what this process installed); t->instance is this process's
 * start time. -ENOENT (the message says to load hotpath.ko) when the
 * device is missing, -EBUSY when another process holds it. */
int hp_patch_target_kernel(struct hp_patch_target *t, char *err, size_t errlen);

/* How many kernel code heaps hotpath.ko keeps draining (freed, but a task's
 * stack may still be inside: released once the last one has left), from
 * /sys/module/hotpath/parameters/draining; -1 when the module is not loaded
 * or says nothing readable. */
long hp_kernel_heaps_draining(void);

void hp_undo_free(struct hp_undo *u);

#endif
