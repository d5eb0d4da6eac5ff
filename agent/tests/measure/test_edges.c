// SPDX-License-Identifier: Apache-2.0
/*
 * Edge derivation (KernInst §4) on hand-built CFGs, where every edge's true
 * count is known: the paper's example (blocks A 1001, B 1000, C 2001,
 * D 1001), whose CFG we take to be the loop gcc emits for a counted loop
 * called 1001 times (A: entry, jumps to the test C; B: the body, falls into
 * C; C: the test, back to B or on to D; D: returns) — the paper's text
 * gives the counts, not the figure; a diamond; exits of every kind; a
 * block only an indirect jump reaches; counts that violate conservation; and
 * a CFG that conservation cannot solve (two edges between the same blocks),
 * which must get bounds and an estimate inside them.
 */
#include "harness.h"
#include "measure/edges.h"

/* A function built by hand: blocks at offsets 0x10 apart with the given successors. */
struct cfg {
	struct hp_module mod;
	struct hp_function fn;
	struct hp_block blocks[16];
	struct hp_succ succs[32];
};

static void cfg_init(struct cfg *c, uint32_t nblocks)
{
	memset(c, 0, sizeof(*c));
	c->mod.blocks = c->blocks;
	c->mod.succs = c->succs;
	c->mod.nblocks = nblocks;
	c->fn.name = "f";
	c->fn.addr = 0x1000;
	c->fn.size = nblocks * 0x10;
	c->fn.nblocks = nblocks;
	for (uint32_t i = 0; i < nblocks; i++)
		c->blocks[i] = (struct hp_block){ .offset = i * 0x10, .size = 0x10, .ninsn = 1 };
}

/* Give block b the successor (kind, target block or absolute address). */
static void succ(struct cfg *c, uint32_t b, enum hp_succ_kind kind, uint64_t target)
{
	struct hp_block *bl = &c->blocks[b];
	if (!bl->nsucc)
		bl->succ_start = (uint32_t)c->mod.nsuccs;
	/* successors of one block are contiguous: add blocks in order */
	c->succs[c->mod.nsuccs++] =
		(struct hp_succ){ (uint8_t)kind,
				  kind == HP_SUCC_FALLTHROUGH || kind == HP_SUCC_TAKEN ? target * 0x10 : target };
	bl->nsucc++;
}

static const struct hp_edge *find(const struct hp_edge_result *r, uint32_t from, uint32_t to, int kind)
{
	for (size_t i = 0; i < r->nedges; i++)
		if (r->edges[i].from == from && r->edges[i].to == to && r->edges[i].kind == kind)
			return &r->edges[i];
	return NULL;
}

#define NB HP_EDGE_NO_BLOCK

static void expect_edge(const struct hp_edge_result *r, uint32_t from, uint32_t to, int kind, uint64_t count,
			const char *what)
{
	const struct hp_edge *e = find(r, from, to, kind);
	EXPECT(e, "%s: no %s edge %u -> %u", what, hp_edge_kind_name(kind), from, to);
	if (e) {
		EXPECT(e->count == count, "%s: %s edge %u -> %u counts %llu, expected %llu", what,
		       hp_edge_kind_name(kind), from, to, (unsigned long long)e->count, (unsigned long long)count);
		EXPECT(e->how == HP_EDGE_EXACT && e->low == count && e->high == count, "%s: edge %u -> %u not exact",
		       what, from, to);
	}
}

/* A 0: jmp C; B 1: body, falls into C; C 2: jcc B, falls into D; D 3: ret. */
static void build_paper_loop(struct cfg *c)
{
	cfg_init(c, 4);
	succ(c, 0, HP_SUCC_TAKEN, 2);
	succ(c, 1, HP_SUCC_FALLTHROUGH, 2);
	succ(c, 2, HP_SUCC_TAKEN, 1);
	succ(c, 2, HP_SUCC_FALLTHROUGH, 3);
	succ(c, 3, HP_SUCC_RETURN, 0);
}

static void paper_example_with_entry_count(void)
{
	struct cfg c;
	build_paper_loop(&c);
	const uint64_t counts[4] = { 1001, 1000, 2001, 1001 }, entries = 1001;
	struct hp_edge_result r;
	REQUIRE(hp_edges_derive(&c.mod, &c.fn, counts, NULL, &entries, &r) == 0, "derive failed");
	EXPECT(r.nedges == 6, "%zu edges (entry, A->C, B->C, C->B, C->D, D->out)", r.nedges);
	expect_edge(&r, NB, 0, HP_EDGE_ENTRY, 1001, "paper");
	expect_edge(&r, 0, 2, HP_EDGE_TAKEN, 1001, "paper");
	expect_edge(&r, 1, 2, HP_EDGE_FALLTHROUGH, 1000, "paper");
	expect_edge(&r, 2, 1, HP_EDGE_TAKEN, 1000, "paper");
	expect_edge(&r, 2, 3, HP_EDGE_FALLTHROUGH, 1001, "paper");
	expect_edge(&r, 3, NB, HP_EDGE_RETURN, 1001, "paper");
	EXPECT(r.nexact == r.nedges, "%zu of %zu exact", r.nexact, r.nedges);
	EXPECT(r.violations == 0, "%zu violations", r.violations);
	hp_edge_result_free(&r);
}

/* Without the entry count, conservation at A still derives it. */
static void paper_example_without_entry_count(void)
{
	struct cfg c;
	build_paper_loop(&c);
	const uint64_t counts[4] = { 1001, 1000, 2001, 1001 };
	struct hp_edge_result r;
	REQUIRE(hp_edges_derive(&c.mod, &c.fn, counts, NULL, NULL, &r) == 0, "derive failed");
	expect_edge(&r, NB, 0, HP_EDGE_ENTRY, 1001, "paper, entry derived");
	expect_edge(&r, 2, 1, HP_EDGE_TAKEN, 1000, "paper, entry derived");
	EXPECT(r.nexact == r.nedges && r.violations == 0, "%zu of %zu exact, %zu violations", r.nexact, r.nedges,
	       r.violations);
	hp_edge_result_free(&r);
}

/* A branch to B or C, both joining D; D returns; one exit through a tail call from C. */
static void diamond_with_every_exit_kind(void)
{
	struct cfg c;
	cfg_init(&c, 6);
	succ(&c, 0, HP_SUCC_TAKEN, 2);          /* A: jcc C */
	succ(&c, 0, HP_SUCC_FALLTHROUGH, 1);    /*    else B */
	succ(&c, 1, HP_SUCC_TAKEN, 3);          /* B: jmp D */
	succ(&c, 2, HP_SUCC_TAIL_CALL, 0x9000); /* C: jcc out (tail call) */
	succ(&c, 2, HP_SUCC_FALLTHROUGH, 3);    /*    else D */
	succ(&c, 3, HP_SUCC_RETURN, 0);         /* D: ret */
	succ(&c, 4, HP_SUCC_INDIRECT, 0);       /* E: jmp *%rax (reached by nothing known) */
	/* F 5: no successors (ud2 after a call that does not return) */
	const uint64_t counts[6] = { 100, 30, 70, 90, 5, 0 }, entries = 100;
	struct hp_edge_result r;
	REQUIRE(hp_edges_derive(&c.mod, &c.fn, counts, NULL, &entries, &r) == 0, "derive failed");
	expect_edge(&r, 0, 1, HP_EDGE_FALLTHROUGH, 30, "diamond");
	expect_edge(&r, 0, 2, HP_EDGE_TAKEN, 70, "diamond");
	expect_edge(&r, 1, 3, HP_EDGE_TAKEN, 30, "diamond");
	expect_edge(&r, 2, 3, HP_EDGE_FALLTHROUGH, 60, "diamond");
	expect_edge(&r, 2, NB, HP_EDGE_TAIL_CALL, 10, "diamond");
	expect_edge(&r, 3, NB, HP_EDGE_RETURN, 90, "diamond");
	expect_edge(&r, NB, 4, HP_EDGE_INDIRECT_IN, 5, "diamond");
	expect_edge(&r, 4, NB, HP_EDGE_INDIRECT, 5, "diamond");
	expect_edge(&r, NB, 5, HP_EDGE_INDIRECT_IN, 0, "diamond");
	expect_edge(&r, 5, NB, HP_EDGE_NO_SUCCESSOR, 0, "diamond");
	const struct hp_edge *t = find(&r, 2, NB, HP_EDGE_TAIL_CALL);
	EXPECT(t && t->target == 0x9000, "tail call target");
	EXPECT(r.nexact == r.nedges && r.violations == 0, "%zu of %zu exact, %zu violations", r.nexact, r.nedges,
	       r.violations);
	hp_edge_result_free(&r);
}

/* Counts that cannot come from this CFG: D ran more often than B and C together. */
static void inconsistent_counts_are_violations(void)
{
	struct cfg c;
	cfg_init(&c, 4);
	succ(&c, 0, HP_SUCC_TAKEN, 2);
	succ(&c, 0, HP_SUCC_FALLTHROUGH, 1);
	succ(&c, 1, HP_SUCC_TAKEN, 3);
	succ(&c, 2, HP_SUCC_FALLTHROUGH, 3);
	succ(&c, 3, HP_SUCC_RETURN, 0);
	const uint64_t counts[4] = { 100, 30, 70, 120 }, entries = 100;
	struct hp_edge_result r;
	REQUIRE(hp_edges_derive(&c.mod, &c.fn, counts, NULL, &entries, &r) == 0, "derive failed");
	EXPECT(r.violations > 0 && r.violation_flow >= 20, "%zu violations, flow %llu", r.violations,
	       (unsigned long long)r.violation_flow);
	hp_edge_result_free(&r);
}

/*
 * A jcc whose taken target is also its fallthrough block (two edges A -> B):
 * no equation separates them, so they are approximated: bounds [0, 50] each,
 * estimates inside them that keep the flow conserved.
 */
static void unsolvable_edges_get_bounds(void)
{
	struct cfg c;
	cfg_init(&c, 3);
	succ(&c, 0, HP_SUCC_TAKEN, 1);
	succ(&c, 0, HP_SUCC_FALLTHROUGH, 1);
	succ(&c, 1, HP_SUCC_FALLTHROUGH, 2);
	succ(&c, 2, HP_SUCC_RETURN, 0);
	const uint64_t counts[3] = { 50, 50, 50 }, entries = 50;
	struct hp_edge_result r;
	REQUIRE(hp_edges_derive(&c.mod, &c.fn, counts, NULL, &entries, &r) == 0, "derive failed");
	const struct hp_edge *t = find(&r, 0, 1, HP_EDGE_TAKEN), *f = find(&r, 0, 1, HP_EDGE_FALLTHROUGH);
	REQUIRE(t && f, "the two A -> B edges");
	EXPECT(t->how == HP_EDGE_ESTIMATE && f->how == HP_EDGE_ESTIMATE, "not labelled estimates");
	EXPECT(t->low == 0 && t->high == 50 && f->low == 0 && f->high == 50, "bounds [%llu, %llu] and [%llu, %llu]",
	       (unsigned long long)t->low, (unsigned long long)t->high, (unsigned long long)f->low,
	       (unsigned long long)f->high);
	EXPECT(t->count + f->count == 50, "estimates %llu + %llu do not conserve 50", (unsigned long long)t->count,
	       (unsigned long long)f->count);
	EXPECT(r.nexact == r.nedges - 2, "%zu exact of %zu: only the two parallel edges are estimates", r.nexact,
	       r.nedges);
	expect_edge(&r, 1, 2, HP_EDGE_FALLTHROUGH, 50, "parallel");
	hp_edge_result_free(&r);
}

/*
 * A block the kernel will not let be probed (a WARN site: ud2 with a bug-table
 * entry): its count is unknown, and the edges around it still follow from its
 * neighbours. A: jcc W, else B; B: ret; W: ud2 (count unknown).
 */
static void unmeasured_block_is_derived_around(void)
{
	struct cfg c;
	cfg_init(&c, 3);
	succ(&c, 0, HP_SUCC_TAKEN, 2);
	succ(&c, 0, HP_SUCC_FALLTHROUGH, 1);
	succ(&c, 1, HP_SUCC_RETURN, 0);
	const uint64_t counts[3] = { 100, 100, 0 }, entries = 100;
	const bool measured[3] = { true, true, false };
	struct hp_edge_result r;
	REQUIRE(hp_edges_derive(&c.mod, &c.fn, counts, measured, &entries, &r) == 0, "derive failed");
	expect_edge(&r, 0, 1, HP_EDGE_FALLTHROUGH, 100, "around W");
	expect_edge(&r, 0, 2, HP_EDGE_TAKEN, 0, "around W");
	expect_edge(&r, 1, NB, HP_EDGE_RETURN, 100, "around W");
	const struct hp_edge *w = find(&r, 2, NB, HP_EDGE_NO_SUCCESSOR);
	EXPECT(w && w->how == HP_EDGE_ESTIMATE, "W's own way out is not an estimate");
	EXPECT(r.violations == 0, "%zu violations", r.violations);
	hp_edge_result_free(&r);
}

static void empty_function_has_no_edges(void)
{
	struct cfg c;
	cfg_init(&c, 0);
	struct hp_edge_result r;
	REQUIRE(hp_edges_derive(&c.mod, &c.fn, NULL, NULL, NULL, &r) == 0, "derive failed");
	EXPECT(r.nedges == 0, "%zu edges", r.nedges);
	hp_edge_result_free(&r);
}

int main(void)
{
	RUN(paper_example_with_entry_count);
	RUN(paper_example_without_entry_count);
	RUN(diamond_with_every_exit_kind);
	RUN(inconsistent_counts_are_violations);
	RUN(unsolvable_edges_get_bounds);
	RUN(unmeasured_block_is_derived_around);
	RUN(empty_function_has_no_edges);
	TEST_EXIT();
}
