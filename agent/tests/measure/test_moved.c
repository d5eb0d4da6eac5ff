// SPDX-License-Identifier: Apache-2.0
/*
 * Installed copies looked up the other way (measure/moved.h): a sample or a
 * frame at a copy address counts at the original address it runs as. Two
 * installs' blocks, flattened and sorted by copy; addresses inside a block's
 * body map to the same distance into the original block, the bytes a layout
 * added after a body (a longer branch) to the original block's last byte,
 * and addresses between or outside copied blocks (padding, emptied blocks,
 * another module's code) to nothing.
 */
#include "harness.h"
#include "measure/moved.h"

/* Install A: a function at 0x1000 with blocks of 16, 8 and 12 bytes, copied to
 * 0x9000 in the order 0, 2, then 1 (block 1 grew by 4: a branch made longer).
 * Install B: one block at 0x5000, copied to 0x8000. */
static struct hp_moved_block a_blocks[] = {
	{ .orig = 0x1000, .copy = 0x9000, .size = 16, .orig_size = 16, .offset = 0 },
	{ .orig = 0x1018, .copy = 0x9010, .size = 12, .orig_size = 12, .offset = 0x18 },
	{ .orig = 0x1010, .copy = 0x9020, .size = 12, .orig_size = 8, .offset = 0x10 },
	{ .orig = 0x1024, .copy = 0, .size = 0, .orig_size = 6, .offset = 0x24 }, /* emptied */
};
static struct hp_moved_block b_blocks[] = {
	{ .orig = 0x5000, .copy = 0x8000, .size = 32, .orig_size = 32, .offset = 0 },
};

static void copies_map_back_to_their_originals(void)
{
	struct hp_moved_code mc[2] = {
		{ .pid = 0, .blocks = a_blocks, .nblocks = 4 },
		{ .pid = 0, .blocks = b_blocks, .nblocks = 1 },
	};
	struct hp_moved_block *b;
	size_t n;
	REQUIRE(hp_moved_copies(mc, 2, &b, &n) == 0, "flattening failed");
	EXPECT(n == 4, "%zu blocks kept (the emptied one left out)", n);
	for (size_t i = 1; i < n; i++)
		EXPECT(b[i - 1].copy < b[i].copy, "not sorted by copy at %zu", i);
	static const struct {
		uint64_t ip, want;
	} cases[] = {
		{ 0x8000, 0x5000 }, { 0x801f, 0x501f }, /* install B, first and last byte */
		{ 0x9000, 0x1000 }, { 0x900f, 0x100f }, /* block 0 */
		{ 0x9010, 0x1018 }, { 0x901b, 0x1023 }, /* block 2, copied second */
		{ 0x9020, 0x1010 }, { 0x9027, 0x1017 }, /* block 1's body */
		{ 0x9028, 0x1017 }, { 0x902b, 0x1017 }, /* block 1's added bytes: its last byte */
		{ 0x902c, 0 },      { 0x8020, 0 },      /* past the copies */
		{ 0x7fff, 0 },      { 0x1000, 0 },      /* before them; an original address itself */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t got = hp_moved_original(b, n, cases[i].ip);
		EXPECT(got == cases[i].want, "copy 0x%llx ran as 0x%llx, not 0x%llx", (unsigned long long)cases[i].ip,
		       (unsigned long long)got, (unsigned long long)cases[i].want);
	}
	free(b);
}

static void nothing_installed_maps_nothing(void)
{
	struct hp_moved_block *b = (void *)1;
	size_t n = 7;
	REQUIRE(hp_moved_copies(NULL, 0, &b, &n) == 0, "flattening nothing failed");
	EXPECT(!b && !n, "%p, %zu blocks", (void *)b, n);
	EXPECT(hp_moved_original(NULL, 0, 0x9000) == 0, "an address mapped with no copies");
}

int main(void)
{
	RUN(copies_map_back_to_their_originals);
	RUN(nothing_installed_maps_nothing);
	TEST_EXIT();
}
