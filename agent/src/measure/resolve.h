/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Code resources to measurement rows: each resource of a request (parsed,
 * spec.h) is looked up in the target's code model and becomes a function row, a block
 * row, or both (a function with --blocks gives its row and one per block,
 * unreachable traps aside).
 * A block is only ever its start: an address or function+OFF inside a block
 * is refused, since a probe in the middle of an instruction would corrupt it
 * and a probe inside a block does not count the block.
 */
#ifndef HOTPATH_MEASURE_RESOLVE_H
#define HOTPATH_MEASURE_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "measure/spec.h"
#include "model/model.h"

#define HP_ROW_NONE UINT32_MAX

enum hp_row_kind { HP_ROW_FUNCTION = 0, HP_ROW_BLOCK = 1 };

struct hp_row {
	uint8_t kind;      /* enum hp_row_kind */
	uint32_t mod, fn;  /* indices into the model */
	uint32_t block;    /* block rows: index of the block within the function */
	uint32_t resource; /* index of the request's resource word it came from */
	uint32_t func_row; /* block rows: the row of their function, or HP_ROW_NONE */
	bool implicit;     /* a block row added by --blocks rather than named in the request */
};

enum { HP_RESOLVE_NOT_FOUND = 1, HP_RESOLVE_NOT_A_BLOCK = 2, HP_RESOLVE_TOO_MANY = 4 };

/*
 * Resolve n resources against m; a function resource adds its block rows
 * when blocks is set, or when word_blocks (may be NULL) is set for it. Rows
 * come out in request order, a
 * function's block rows right after its function row, without duplicates.
 * Returns 0, -ENOMEM, or -EINVAL with *why set to one of the HP_RESOLVE_
 * codes and err naming the resource (labels[i], as the request wrote it) and the reason (candidates for an ambiguous
 * name, the containing block for an address inside one). At most max_rows
 * rows; more gives HP_RESOLVE_TOO_MANY.
 */
int hp_resolve(const struct hp_model *m, const struct hp_resource_spec *res, const char *const *labels, size_t n,
	       bool blocks, const bool *word_blocks, size_t max_rows, struct hp_row **rows, size_t *nrows, int *why,
	       char *err, size_t errlen);

/*
 * Whether block b of f is an unreachable trap: nothing in the function's CFG
 * leads to it and it starts with a trap (int3, ud2: the speculation barriers
 * compilers put after returns and jumps, or padding). It cannot run without a
 * fault, so its count is 0 by construction: --blocks does not probe it (the
 * kernel refuses probes on int3) and edge derivation counts it as 0.
 */
bool hp_block_unreachable_trap(const struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			       uint32_t b);

#endif
