// SPDX-License-Identifier: Apache-2.0
/*
 * Plans: chain formation on small worked examples of the FDPR rules
 * (perfect partner, isolated small predecessor, ShouldFollow), and whole
 * plans on programs compiled here: emitted code verified, stale profiles
 * refused naming the function, a root without counts or not run reported
 * as such.
 */
#include <errno.h>
#include <inttypes.h>

#include "harness.h"
#include "model/model.h"
#include "plan/chains.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "target/target.h"
#include "test_util.h"

static int chain_pos(const uint32_t *order, int n, uint32_t b)
{
	for (int i = 0; i < n; i++)
		if (order[i] == b)
			return i;
	return -1;
}

/* A -> B (90) and A -> C (10); B -> D (90), C -> D (10): B is A's perfect
 * partner and D is B's; C is nobody's, so it starts its own chain. */
static void t_chain_perfect_partner(void)
{
	struct hp_chain_block b[4] = {
		{ 100, 10, true, -1 }, { 90, 10, true, -1 }, { 10, 10, true, -1 }, { 100, 10, true, -1 }
	};
	struct hp_chain_edge e[4] = { { 0, 1, 90 }, { 0, 2, 10 }, { 1, 3, 90 }, { 2, 3, 10 } };
	uint32_t order[4], nch;
	int32_t chain_of[4];
	int n = hp_chains_build(b, 4, e, 4, 0, 8, order, chain_of, &nch);

	REQUIRE(n == 4, "placed %d hot blocks", n);
	EXPECT(order[0] == 0 && order[1] == 1 && order[2] == 3 && order[3] == 2, "order %u %u %u %u", order[0],
	       order[1], order[2], order[3]);
	EXPECT(nch == 2 && chain_of[0] == chain_of[1] && chain_of[1] == chain_of[3] && chain_of[2] != chain_of[0],
	       "chains wrong (%u chains)", nch);
}

/* X -> Y (60) is a perfect partner, but P, a 4-byte block whose only
 * successor is Y (40), would need a jump of its own: P starts a chain with Y. */
static void t_chain_isolated_small_predecessor(void)
{
	/* 0 entry -> X(1) 60, entry -> P(2) 40; X -> Y(3) 60; P -> Y 40 */
	struct hp_chain_block b[4] = {
		{ 100, 10, true, -1 }, { 60, 20, true, -1 }, { 40, 4, true, -1 }, { 100, 20, true, -1 }
	};
	struct hp_chain_edge e[4] = { { 0, 1, 60 }, { 0, 2, 40 }, { 1, 3, 60 }, { 2, 3, 40 } };
	uint32_t order[4], nch;
	int32_t chain_of[4];
	int n = hp_chains_build(b, 4, e, 4, 0, 8, order, chain_of, &nch);

	REQUIRE(n == 4, "placed %d hot blocks", n);
	EXPECT(chain_of[2] == chain_of[3] && chain_pos(order, n, 3) == chain_pos(order, n, 2) + 1,
	       "Y does not follow the isolated predecessor P");
	EXPECT(chain_of[1] != chain_of[3], "Y was appended to X despite the isolated predecessor");
}

/* A ends without a branch and runs into B (10); C -> B (90) is heavier, but
 * moving B away from A would add a jump after A: B stays after A. */
static void t_chain_should_follow(void)
{
	/* 0 entry -> C(2) 90, entry -> A(1) 10; A falls into B(3); C -> B 90 */
	struct hp_chain_block b[4] = {
		{ 100, 10, true, -1 }, { 10, 10, true, 3 }, { 90, 10, true, -1 }, { 100, 10, true, -1 }
	};
	struct hp_chain_edge e[4] = { { 0, 2, 90 }, { 0, 1, 10 }, { 2, 3, 90 }, { 1, 3, 10 } };
	uint32_t order[4], nch;
	int32_t chain_of[4];
	int n = hp_chains_build(b, 4, e, 4, 0, 8, order, chain_of, &nch);

	REQUIRE(n == 4, "placed %d hot blocks", n);
	EXPECT(chain_pos(order, n, 3) == chain_pos(order, n, 1) + 1, "B does not follow A (ShouldFollow)");
	EXPECT(order[0] == 0 && order[1] == 2, "entry's perfect partner C is not next");
}

/* Every block of the functions named counts n (a hand-written profile). */
static void profile_all(struct hp_model *m, const char *const *names, double n, struct hp_profile *p)
{
	memset(p, 0, sizeof(*p));
	p->weight = 1;
	for (; *names; names++) {
		const struct hp_module *mod;
		const struct hp_function *f = hp_model_find(m, *names, &mod, NULL);
		for (uint32_t b = 0; f && b < f->nblocks; b++)
			hp_profile_add(p, mod, f, mod->blocks[f->block_start + b].offset, n * (1 + b % 3));
	}
}

static struct hp_model *open_fixture(const char *src, const char *out, const char *flags)
{
	struct hp_open_opts o = { .quiet = true };
	struct hp_model *m = NULL;
	char err[256];
	const char *p = tu_compile(src, out, flags);

	if (!p || hp_model_open_elf(p, &o, &m, err, sizeof(err)) < 0)
		return NULL;
	return m;
}

static void t_plan_elf_is_verified(void)
{
	struct hp_model *m = open_fixture("switchy.c", "plan_sw", "-O2 -fno-jump-tables");
	static const char *const names[] = { "sw_loop", "sw_dense", NULL };
	struct hp_plan_opts o;
	struct hp_profile prof;
	struct hp_plan plan;
	const struct hp_module *mod;
	char err[256];

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *root = hp_model_find(m, "sw_loop", &mod, NULL);
	REQUIRE(root, "sw_loop not found");
	profile_all(m, names, 10, &prof);
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	REQUIRE(hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.status == HP_PLAN_OK && plan.verified, "plan %d: %s", plan.status, plan.message);
	EXPECT(plan.nmembers == 2, "group has %zu functions, want sw_loop and sw_dense", plan.nmembers);
	EXPECT(plan.verified_blocks >= 20 && plan.verified_insns >= 50, "verified only %zu blocks, %zu instructions",
	       plan.verified_blocks, plan.verified_insns);
	EXPECT(plan.after.hot_lines <= plan.before.hot_lines, "hot lines grew from %u to %u", plan.before.hot_lines,
	       plan.after.hot_lines);
	/* Corrupt one emitted byte of a body: the verifier must refuse it. */
	if (plan.code_len > 8) {
		plan.code[plan.members[0].blocks[0].new_addr - plan.base] ^= 0x08;
		EXPECT(!hp_plan_verify(m, &plan), "a corrupted copy passed verification");
	}
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_model_free(m);
}

static void t_plan_refuses_stale_profile(void)
{
	struct hp_model *m = open_fixture("switchy.c", "plan_stale", "-O2 -fno-jump-tables");
	struct hp_profile prof;
	char err[256], text[512];
	const struct hp_function *f;

	REQUIRE(m, "gcc or open failed");
	f = hp_model_find(m, "sw_dense", NULL, NULL);
	REQUIRE(f, "sw_dense not found");
	snprintf(text, sizeof(text),
		 "{\"format\":\"hotpath-profile/1\",\"functions\":[{\"name\":\"sw_dense\",\"address\":\"0x%" PRIx64
		 "\",\"signature\":\"0123456789abcdef\",\"blocks\":[{\"offset\":0,\"count\":5}]}]}",
		 f->addr);
	int r = hp_profile_parse(text, strlen(text), m, &prof, err, sizeof(err));
	EXPECT(r == -ESTALE && strstr(err, "sw_dense"), "stale profile not refused by name (%d: %s)", r, err);
	/* A measure record at an address that starts no block is stale too. */
	snprintf(text, sizeof(text),
		 "{\"resources\":[{\"function\":\"sw_dense\",\"block\":%" PRIu64 ",\"metrics\":{\"count\":3}}]}",
		 f->addr + 1);
	r = hp_profile_parse(text, strlen(text), m, &prof, err, sizeof(err));
	EXPECT(r == -ESTALE && strstr(err, "sw_dense"), "mid-block count not refused (%d: %s)", r, err);
	hp_model_free(m);
}

static void t_plan_without_counts_or_heat(void)
{
	struct hp_model *m = open_fixture("switchy.c", "plan_none", "-O2 -fno-jump-tables");
	static const char *const names[] = { "sw_dense", NULL };
	struct hp_plan_opts o;
	struct hp_profile prof;
	struct hp_plan plan;
	const struct hp_module *mod;
	char err[256];

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *root = hp_model_find(m, "sw_loop", &mod, NULL);
	REQUIRE(root, "sw_loop not found");
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	REQUIRE(hp_plan_make(m, root, mod, NULL, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.status == HP_PLAN_NO_COUNTS && strstr(plan.message, "measure"), "no counts: %s", plan.message);
	hp_plan_free(&plan);
	profile_all(m, names, 0, &prof);
	hp_profile_add(&prof, mod, root, 0, 0);
	REQUIRE(hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.status == HP_PLAN_NOT_HOT && strstr(plan.message, "did not run"), "not hot: %s", plan.message);
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_model_free(m);
}

int main(void)
{
	RUN(t_chain_perfect_partner);
	RUN(t_chain_isolated_small_predecessor);
	RUN(t_chain_should_follow);
	RUN(t_plan_elf_is_verified);
	RUN(t_plan_refuses_stale_profile);
	RUN(t_plan_without_counts_or_heat);
	tu_cleanup();
	TEST_EXIT();
}
