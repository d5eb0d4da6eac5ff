/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the x86 decoder and the CFG builder on arbitrary bytes taken as one function.
 * Beyond "no crash, no sanitizer report", it checks the model's invariants on every input:
 * blocks tile the function exactly; every block holds at least one instruction, except that a
 * function marked undecodable ends in one block without instructions or successors starting at
 * bad_offset; and every fallthrough or taken successor names the start of a block (a switch or label
 * table's entries too: tables are read from the input's own bytes).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cfg.h"

#define BASE 0xffffffff81000000ull

/* Switch and label tables are read from the input itself: a table jump
 * whose table lies in the function's bytes is resolved, its entries (and
 * the run of a label table) taken from the fuzzer's data. */
struct input {
	const uint8_t *data;
	size_t size;
};

static int read_input(void *ctx, uint64_t addr, void *buf, size_t len)
{
	const struct input *in = ctx;

	if (addr < BASE || addr - BASE > in->size || len > in->size - (addr - BASE))
		return -1;
	memcpy(buf, in->data + (addr - BASE), len);
	return 0;
}

static void fail(const char *what, size_t i)
{
	fprintf(stderr, "invariant broken: %s (block %zu)\n", what, i);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t ret_thunk[] = { BASE + 0x100000 };
	static const uint64_t ind_thunk[] = { BASE + 0x200000 };
	struct hp_cfg_env env = { ret_thunk, 1, ind_thunk, 1 };
	struct hp_cfg_arena a = { 0 };
	struct hp_function f = { .name = "fuzz", .addr = BASE };
	struct input in = { data, size };

	if (size > 1 << 16)
		size = in.size = 1 << 16;
	env.read_data = read_input;
	env.data_ctx = &in;
	f.size = (uint32_t)size;
	if (hp_cfg_build(&env, data, &f, &a) < 0)
		abort(); /* only -ENOMEM is possible */

	bool undecodable = f.flags & HP_FN_UNDECODABLE;
	if (undecodable && f.bad_offset >= f.size)
		fail("bad_offset beyond the function", 0);
	uint32_t next = 0;
	for (size_t i = 0; i < f.nblocks; i++) {
		const struct hp_block *b = &a.blocks[f.block_start + i];
		bool remainder = undecodable && i == f.nblocks - 1;
		if (b->offset != next)
			fail("blocks do not tile: gap or overlap", i);
		if (b->size == 0)
			fail("empty block", i);
		if (remainder ? (b->offset != f.bad_offset || b->ninsn || b->nsucc) : b->ninsn == 0)
			fail(remainder ? "undecodable remainder is not one bare block at bad_offset" :
					 "block without instructions",
			     i);
		next = b->offset + b->size;
	}
	if (next != f.size)
		fail("blocks do not cover the function", f.nblocks);
	for (size_t i = 0; i < f.nblocks; i++) {
		const struct hp_block *b = &a.blocks[f.block_start + i];
		for (size_t s = 0; s < b->nsucc; s++) {
			const struct hp_succ *su = &a.succs[b->succ_start + s];
			if (su->kind < HP_SUCC_FALLTHROUGH || su->kind > HP_SUCC_RETURN)
				fail("unknown successor kind", i);
			if (su->kind != HP_SUCC_FALLTHROUGH && su->kind != HP_SUCC_TAKEN)
				continue;
			size_t lo = 0, hi = f.nblocks;
			while (lo < hi) { /* blocks are sorted by offset */
				size_t mid = (lo + hi) / 2;
				if (a.blocks[f.block_start + mid].offset < su->target)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (lo == f.nblocks || a.blocks[f.block_start + lo].offset != su->target)
				fail("successor inside the function is not a block start", i);
		}
	}
	hp_cfg_arena_free(&a);
	return 0;
}
