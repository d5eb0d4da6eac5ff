/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Edge counts of a function's CFG derived from its block counts (KernInst
 * §4). The flow network has one node per basic block, the function entry as
 * a source (its count when function entries were measured) and every way out
 * as a sink: returns, tail calls, indirect jumps and blocks without
 * successors. Where a block has no predecessor in the CFG (a jump-table
 * target, or code after a call that does not return), flow arrives from the
 * function's indirect jumps: an "indirect_in" edge. Flow conservation (a
 * block's count equals the sum of its in-edges and of its out-edges) is
 * applied to a fixed point, which derives edges exactly; what remains gets a
 * bounded approximation: each such edge has bounds [low, high] implied by
 * the exact part, and an estimate inside them that keeps flow conserved.
 */
#ifndef HOTPATH_MEASURE_EDGES_H
#define HOTPATH_MEASURE_EDGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define HP_EDGE_NO_BLOCK UINT32_MAX

enum hp_edge_kind {
	HP_EDGE_ENTRY = 0,        /* function entry -> first block */
	HP_EDGE_FALLTHROUGH = 1,  /* values 1..5 match enum hp_succ_kind */
	HP_EDGE_TAKEN = 2,        /* */
	HP_EDGE_TAIL_CALL = 3,    /* block -> out of the function */
	HP_EDGE_INDIRECT = 4,     /* block -> unknown target (counted as leaving) */
	HP_EDGE_RETURN = 5,       /* block -> out of the function */
	HP_EDGE_NO_SUCCESSOR = 6, /* block that ends without a successor (trap, undecodable, padding) */
	HP_EDGE_INDIRECT_IN = 7,  /* unknown source -> block without a predecessor */
};
const char *hp_edge_kind_name(enum hp_edge_kind k); /* "entry", "fallthrough", ..., "indirect_in" */

enum hp_edge_how {
	HP_EDGE_EXACT = 0,    /* measured (the entry) or derived by flow conservation */
	HP_EDGE_ESTIMATE = 1, /* bounded approximation: count within [low, high] */
};

struct hp_edge {
	uint32_t from; /* block index within the function, or HP_EDGE_NO_BLOCK (entry, indirect_in) */
	uint32_t to;   /* block index, or HP_EDGE_NO_BLOCK (leaves the function) */
	uint8_t kind;  /* enum hp_edge_kind */
	uint8_t how;   /* enum hp_edge_how */
	uint64_t count;
	uint64_t low, high; /* bounds; low == high == count when exact; high UINT64_MAX: unbounded */
	uint64_t target;    /* tail_call: the absolute address jumped to; else 0 */
};

struct hp_edge_result {
	struct hp_edge *edges; /* malloc'd; in block order, entry first */
	size_t nedges;
	size_t nexact;
	/* Equations (a block's in- or out-flow) that the counts violate once
	 * every edge is known: a sign of counts taken while threads were inside
	 * the function, or of lost probe hits. */
	size_t violations;
	uint64_t violation_flow; /* sum of |residual| over those equations */
};

/*
 * Derive the edges of f (a function of mod) from block_counts[i] (the count
 * of its i-th block) and, when entry_count is non-NULL, the measured number
 * of entries. block_measured[i] says which counts are known (NULL: all): a
 * block the kernel would not let be probed contributes no equation, and the
 * edges around it are derived from its neighbours where they can be.
 * Returns 0 or -ENOMEM.
 */
int hp_edges_derive(const struct hp_module *mod, const struct hp_function *f, const uint64_t *block_counts,
		    const bool *block_measured, const uint64_t *entry_count, struct hp_edge_result *out);
void hp_edge_result_free(struct hp_edge_result *r);

#endif
