/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inline block counters in a running process (KernInst: counters spliced
 * into the code, no trap): for each function, an instrumented copy
 * (plan/instrument.h); the copies of one module combined into one plan
 * (instrument_set.c) that the install engine installs like a hot set (one
 * heap, one quiesce, one journal, one unwinder registration, every entry
 * spliced, call sites redirected), their counters read live from the
 * process (process_vm_readv), then reverted as one (call sites first, then
 * the entries, then the heap). The mechanism of `hotpathd measure --blocks
 * --inline`. It lives in replace/ because it installs: measure/ is below
 * plan/ and replace/ in the layers.
 */
#ifndef HOTPATH_REPLACE_COUNTERS_H
#define HOTPATH_REPLACE_COUNTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "measure/thread_watch.h"
#include "model/model.h"
#include "plan/plan.h"
#include "replace/install.h"
#include "replace/patch_target.h"

struct hp_counted_fn {
	const struct hp_module *mod;
	const struct hp_function *fn;
	struct hp_plan plan;       /* the instrumented copy, as laid out in its install's combined plan */
	size_t install;            /* its install: hp_counted.installs[install] */
	uint64_t entry, new_entry; /* in the process: the original's entry, its copy's */
	uint64_t counters;         /* its counters in the process: 8 bytes per slot (plan.instrument) */
	bool installed;
};

/* One install: every counted copy of one module (hp_counted_install). */
struct hp_counted_install {
	struct hp_install_result res;
	size_t nfns;
	bool installed;
};

/* How the increments are chosen (hp_counted_begin). */
enum hp_count_mode {
	HP_COUNT_AUTO = 0, /* plain while one thread is proved to run the process, else locked */
	HP_COUNT_LOCKED,   /* lock-prefixed: exact with any number of threads */
	HP_COUNT_PLAIN,    /* plain; exact only where one thread is proved */
};

struct hp_counted {
	int pid;
	char state_dir[4096];
	struct hp_counted_fn *fns;
	size_t n;
	struct hp_counted_install *installs; /* one per module of fns, in install order */
	size_t ninstalls;
	/* Set by hp_counted_begin (hp_counted_install: plain as asked, exact
	 * when locked). */
	bool plain;                   /* increments without a lock prefix */
	bool watched;                 /* the window is watched (a consistent start and end) */
	bool exact;                   /* the counts are exact (updated by poll and hold) */
	char how[400];                /* why these increments, and why not exact */
	struct hp_thread_watch watch; /* when watched */
	uint64_t **base;              /* each function's counters when the window began: counts since */
	struct hp_patch_target held;  /* unwatched: every thread stopped for a read (hold_all) */
	bool holding;
};

/*
 * Install counted copies of fns[0..n) (functions of m, the model of process
 * pid) with lock-prefixed increments unless plain, on a spanning tree's
 * complement of edges unless every_block (plan/instrument.h). The copies of
 * one module are one install (hp_instrument_combine: one heap, one quiesce,
 * one journal, one unwinder registration, every entry spliced); functions
 * of several modules make one install per module. All or nothing: on an
 * error every copy installed so far is reverted and err says which function
 * and why (-ESRCH: the process is gone; -EPERM: a function cannot move, or
 * its copy failed verification; other errnos from the install).
 */
int hp_counted_install(int pid, struct hp_model *m, const char *state_dir, const struct hp_function *const *fns,
		       const struct hp_module *const *mods, size_t n, bool plain, bool every_block,
		       struct hp_counted *out, char *err, size_t errlen);
/*
 * Whether function fn of mod (in m) can be counted inline: its entry can
 * take the jump to a copy (the install's rule), and its counted copy
 * planned (locked increments, counters on edges) as hp_counted_install
 * would plan it, nothing installed. 0, or -EPERM with why filled (it
 * cannot move, or its copy failed verification), or another negative errno.
 */
int hp_counted_check(struct hp_model *m, const struct hp_module *mod, const struct hp_function *fn, char *why,
		     size_t len);
/* The bytes an entry jump covers (jmp rel32). */
#define HP_COUNTED_ENTRY_JUMP 5
/*
 * The order hp_counted_install lays out and installs fns[0..n) in (order[n]:
 * indices): a function whose first bytes call another of them goes before
 * that one. Installed after it, the callee's install would have redirected
 * that call site, and the caller's entry jump, covering part of it, would be
 * refused (the engine now leaves such a call alone).
 */
void hp_counted_order(const struct hp_function *const *fns, const struct hp_module *const *mods, size_t n,
		      size_t *order);
/*
 * hp_counted_install with the increments mode chooses. Plain ones are watched
 * (measure/thread_watch.h): the process's one thread is seized and stopped,
 * the counters taken as the window's start, and every task it starts is
 * seen. AUTO: a process with more threads, or one that cannot be watched,
 * is counted with locked increments instead (c->how says why). PLAIN: such
 * a process is counted plain, not exact. Every mode's window starts once
 * every copy is installed (the counters then are its base). Call
 * hp_counted_poll often during the window, hp_counted_hold before the reads.
 */
int hp_counted_begin(int pid, struct hp_model *m, const char *state_dir, const struct hp_function *const *fns,
		     const struct hp_module *const *mods, size_t n, enum hp_count_mode mode, bool every_block,
		     struct hp_counted *out, char *err, size_t errlen);
/* Forward the watched process's signals, see the tasks it starts (which
 * make the counts inexact): 0, or -ESRCH when the process is gone. */
int hp_counted_poll(struct hp_counted *c);
/* Stop the process for the reads (a consistent end of the window: the
 * watched thread, or else every thread, until hp_counted_revert); the reads
 * after it give the counts since the window began. */
void hp_counted_hold(struct hp_counted *c);
/* The counts of function i's blocks now (counts[fn->nblocks], derived from
 * the counted edges by flow conservation) and, when counted on edges and
 * edge_counts is not NULL, of its counting edges (edge_counts[ncedges] in
 * the plan's instrument->cedges order): 0, or -ESRCH
 * when the process is gone, other negative errnos with err filled. */
int hp_counted_read(const struct hp_counted *c, size_t i, uint64_t *counts, uint64_t *edge_counts, char *err,
		    size_t errlen);
/* Revert every install (in reverse order; a watch ends first) and free c: 0, or the
 * first error (err filled); a process that exited leaves nothing to revert. */
int hp_counted_revert(struct hp_counted *c, char *err, size_t errlen);

#endif
