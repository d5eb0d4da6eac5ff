/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inline block counters in a running process (KernInst: counters spliced
 * into the code, no trap): for each function, an instrumented copy
 * (plan/instrument.h) installed by the install engine like any plan
 * (journal, entry splice, call sites), its counter area read live from the
 * process (process_vm_readv), then reverted (call sites first, then the
 * entry, then the heap). The mechanism of `hotpathd measure --blocks
 * --inline`. It lives in replace/ because it installs: measure/ is below
 * plan/ and replace/ in the layers.
 */
#ifndef HOTPATH_REPLACE_COUNTERS_H
#define HOTPATH_REPLACE_COUNTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "plan/plan.h"
#include "replace/install.h"

struct hp_counted_fn {
	const struct hp_module *mod;
	const struct hp_function *fn;
	struct hp_plan plan;          /* the instrumented copy */
	struct hp_install_result res; /* where it was installed */
	uint64_t counters;            /* the counter area in the process: 8 bytes per block, in block order */
	bool installed;
};

struct hp_counted {
	int pid;
	char state_dir[4096];
	struct hp_counted_fn *fns;
	size_t n;
};

/*
 * Install counted copies of fns[0..n) (functions of m, the model of process
 * pid) with lock-prefixed increments unless plain, on a spanning tree's
 * complement of edges unless every_block (plan/instrument.h). All or nothing: on an
 * error every copy installed so far is reverted and err says which function
 * and why (-ESRCH: the process is gone; -EPERM: a function cannot move, or
 * its copy failed verification; other errnos from the install).
 */
int hp_counted_install(int pid, struct hp_model *m, const char *state_dir, const struct hp_function *const *fns,
		       const struct hp_module *const *mods, size_t n, bool plain, bool every_block,
		       struct hp_counted *out, char *err, size_t errlen);
/* The counts of function i's blocks now (counts[fn->nblocks], derived from
 * the counted edges by flow conservation) and, when counted on edges and
 * edge_counts is not NULL, of its counting edges (edge_counts[ncedges] in
 * the plan's instrument->cedges order): 0, or -ESRCH
 * when the process is gone, other negative errnos with err filled. */
int hp_counted_read(const struct hp_counted *c, size_t i, uint64_t *counts, uint64_t *edge_counts, char *err,
		    size_t errlen);
/* Revert every copy (in reverse order of install) and free c: 0, or the
 * first error (err filled); a process that exited leaves nothing to revert. */
int hp_counted_revert(struct hp_counted *c, char *err, size_t errlen);

#endif
