/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Profiles: measured execution counts per basic block (and, when measured,
 * per CFG edge) for the functions of one target, as the plan consumes them.
 * Read from `hotpathd measure --json` output or from a profile a plan saved;
 * several workloads merge with per-workload normalisation and weights
 * (FDPR); each function carries a CFG signature so counts taken on other
 * code are refused, naming the function.
 */
#ifndef HOTPATH_PROFILE_H
#define HOTPATH_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

struct hp_prof_block {
	uint32_t offset; /* from the function start */
	double count;
};

struct hp_prof_edge {
	uint32_t from, to; /* block offsets */
	double count;
};

struct hp_prof_fn {
	char *name;
	uint64_t addr;
	char signature[17]; /* "" when the source had none */
	struct hp_prof_block *blocks;
	size_t nblocks, cap_blocks; /* capacities: for hp_grow (base/grow.h), 0 when unknown */
	struct hp_prof_edge *edges;
	size_t nedges, cap_edges;
};

struct hp_profile {
	struct hp_prof_fn *fns;
	size_t nfns, cap_fns;
	bool estimated;   /* counts estimated from PC samples, not counted */
	char source[256]; /* what the counts came from */
	char scope[160];  /* "" for every call; "calls under ROOT" for a second pass */
	double weight;    /* for merging */
};

/* The CFG signature of f: a hash of its blocks' offsets, sizes,
 * instruction counts and successor kinds and offsets, as 16 hex digits. */
void hp_cfg_signature(const struct hp_module *mod, const struct hp_function *f, char out[17]);

/* Read a profile file (measure JSON, or a saved plan profile) against model
 * m. Returns 0, or a negative errno with a reason in err. */
int hp_profile_read(const char *path, const struct hp_model *m, struct hp_profile *out, char *err, size_t errlen);
/* Same from a JSON text. */
int hp_profile_parse(const char *text, size_t len, const struct hp_model *m, struct hp_profile *out, char *err,
		     size_t errlen);
/* The code addresses the profile file at path counts, read without a model:
 * the blocks and edge ends of measure output, the functions of a saved
 * profile (a plan's own profile too). For opening a model of just the
 * functions holding them (hp_open_opts.only_addresses); hp_profile_read
 * still checks them. *out is malloc'd; 0, or a negative errno with the
 * reason in err. */
int hp_profile_read_addresses(const char *path, uint64_t **out, size_t *nout, char *err, size_t errlen);
/* hp_profile_read for hot code that stays in place (plan --resident): a
 * saved plan profile's "resident" functions too (the hot code its plan
 * left in place, other modules' included), those no longer where they were
 * (a library not mapped here) skipped. */
int hp_profile_read_resident(const char *path, const struct hp_model *m, struct hp_profile *out, char *err,
			     size_t errlen);

/* Merge n profiles into out: each is scaled so its block counts sum to
 * 1e6, then multiplied by its weight. Profiles of different scopes do not
 * merge (-EINVAL). */
int hp_profile_merge(const struct hp_profile *in, size_t n, struct hp_profile *out);

/* Add count to (function f, block offset off); for tests and samplers. */
int hp_profile_add(struct hp_profile *p, const struct hp_module *mod, const struct hp_function *f, uint32_t off,
		   double count);
int hp_profile_add_edge(struct hp_profile *p, const struct hp_module *mod, const struct hp_function *f, uint32_t from,
			uint32_t to, double count);

/* A deep copy of in: 0 or -ENOMEM (out is then empty). */
int hp_profile_copy(const struct hp_profile *in, struct hp_profile *out);
const struct hp_prof_fn *hp_profile_find(const struct hp_profile *p, uint64_t addr);
void hp_profile_free(struct hp_profile *p);

#endif
