// SPDX-License-Identifier: Apache-2.0
/*
 * Plans: chain formation on small worked examples of the FDPR rules
 * (perfect partner, isolated small predecessor, ShouldFollow), and whole
 * plans on programs compiled here: emitted code verified, stale profiles
 * refused naming the function, a root without counts or not run reported
 * as such, code the program finds by address kept in place with its rule,
 * and the copy's unwind data checked; a switch table re-emitted for the
 * copy, and a wrong entry in it refused; tail calls through a loaded
 * pointer moved with their function; indirect calls promoted from a value
 * profile, and a promotion that is not that call's refused.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>

#include "harness.h"
#include "model/model.h"
#include "plan/c3.h"
#include "plan/chains.h"
#include "plan/icall_values.h"
#include "isa/isa.h"
#include "plan/plan.h"
#include "plan/plan_json.h"
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
	hp_plan_free(&plan);
	/* The code goes where --base says, and never over the target's code. */
	o.base = 0x7000000;
	REQUIRE(hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.base == 0x7000000 && plan.verified, "laid out at 0x%" PRIx64 ", not at --base", plan.base);
	hp_plan_free(&plan);
	o.base = root->addr & ~0xfffull;
	EXPECT(hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err)) == -ERANGE && strstr(err, "cover"),
	       "a base on the program's code was not refused: %s", err);
	hp_plan_free(&plan);
	o.base = 0;
	REQUIRE(hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	/* Corrupt one emitted byte of a body: the verifier must refuse it. */
	if (plan.code_len > 8) {
		plan.code[plan.members[0].blocks[0].new_addr - plan.base] ^= 0x08;
		EXPECT(!hp_plan_verify(m, &plan), "a corrupted copy passed verification");
	}
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_model_free(m);
}

/* Where the copy in plan (one member, f) has the original's byte at offset off of f. */
static uint64_t copy_at(const struct hp_plan *plan, const struct hp_module *mod, const struct hp_function *f,
			uint32_t off)
{
	for (uint32_t j = 0; j < plan->members[0].nblocks; j++) {
		const struct hp_block *bl = &mod->blocks[f->block_start + plan->members[0].blocks[j].index];
		if (off >= bl->offset && off < bl->offset + bl->size)
			return plan->members[0].blocks[j].new_addr + (off - bl->offset);
	}
	return 0;
}

/* f, whose one table is f's first, planned from every block counted: not
 * kept, verified, its code the instructions then the copy's table, each
 * entry reaching the copy of its original target. The table's offset in
 * the code, or 0 when the plan failed. */
static size_t plan_table(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			 const char *const *names, struct hp_profile *prof, struct hp_plan *plan)
{
	const struct hp_jump_table *jt = &mod->jtables[f->jt_start];
	struct hp_plan_opts o;
	char err[256], detail[160];
	const char *rule = hp_plan_kept_rule(m, mod, f, detail, sizeof(detail));

	EXPECT(!rule, "%s is kept: %s (%s)", f->name, rule, detail);
	profile_all(m, names, 10, prof);
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	if (hp_plan_make(m, f, mod, prof, &o, plan, err, sizeof(err)) < 0 || plan->status != HP_PLAN_OK ||
	    !plan->verified) {
		EXPECT(0, "no verified plan for %s: %s %s", f->name, err, plan->message);
		return 0;
	}
	size_t tab = (plan->text_len + 7) & ~(size_t)7;
	EXPECT(plan->code_len == tab + 4 * jt->nentries, "code %zu bytes, instructions %zu, want a table of %u after",
	       plan->code_len, plan->text_len, jt->nentries);
	EXPECT(plan->verified_edges >= jt->nentries, "verified %zu edges", plan->verified_edges);
	for (uint32_t k = 0; k < jt->nentries; k++) {
		int32_t e;
		uint64_t want = copy_at(plan, mod, f, (uint32_t)(mod->jt_targets[jt->target_start + k] - f->addr));
		memcpy(&e, plan->code + tab + 4 * k, 4);
		EXPECT(plan->base + tab + (uint64_t)(int64_t)e == want,
		       "entry %u reaches 0x%" PRIx64 ", want 0x%" PRIx64, k, plan->base + tab + (uint64_t)(int64_t)e,
		       want);
	}
	return tab;
}

/* A dense switch compiled -fPIE dispatches through a table of 4-byte
 * offsets: the model resolves it exactly, the function moves, the copy gets
 * its own table after the code, and a wrong entry is refused by verify. */
static void t_plan_rewrites_switch_table(void)
{
	struct hp_model *m = open_fixture("dispatch.c", "plan_jt", "-O2 -fPIE -pie");
	static const char *const names[] = { "dp_op", NULL };
	struct hp_profile prof;
	struct hp_plan plan;
	const struct hp_module *mod;
	char detail[160];

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *f = hp_model_find(m, "dp_op", &mod, NULL);
	REQUIRE(f && f->njt == 1, "dp_op has %u resolved tables, want 1", f ? f->njt : 0);
	const struct hp_jump_table *jt = &mod->jtables[f->jt_start];
	EXPECT(jt->relative && jt->entry_size == 4 && jt->exact && jt->nentries == 20 && jt->base_site < jt->site,
	       "table: relative %d, entry %u, exact %d, %u entries, lea +0x%x, jump +0x%x", jt->relative,
	       jt->entry_size, jt->exact, jt->nentries, jt->base_site, jt->site);
	size_t tab = plan_table(m, mod, f, names, &prof, &plan);
	REQUIRE(tab, "dp_op was not planned");
	/* Entry 0 (case 0) made to reach case 1's copy: refused. */
	int32_t e1;
	memcpy(&e1, plan.code + tab + 4, 4);
	memcpy(plan.code + tab, &e1, 4);
	EXPECT(!hp_plan_verify(m, &plan) && strstr(plan.verify_error, "does not reach the copy of its original target"),
	       "a wrong table entry passed verification: %s", plan.verify_error);
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_model_free(m);
	/* Position-dependent code jumps through absolute addresses: kept, with the rule. */
	REQUIRE((m = open_fixture("dispatch.c", "plan_jt_abs", "-O2 -fno-pie -no-pie")), "gcc or open failed");
	f = hp_model_find(m, "dp_op", &mod, NULL);
	REQUIRE(f && f->njt == 1 && !mod->jtables[f->jt_start].relative, "no absolute table resolved in dp_op");
	const char *rule = hp_plan_kept_rule(m, mod, f, detail, sizeof(detail));
	EXPECT(rule && strstr(rule, "absolute"), "dp_op with an absolute table: %s", rule ? rule : "moves");
	hp_model_free(m);
}

/* A switch whose table's lea gcc hoisted before its loop (hoisted.c,
 * -fPIE): the function moves, the lea before the loop names the copy's
 * table, every entry reaches the copy of its target; a copy whose lea still
 * names the original's table is refused. */
static void t_plan_rewrites_hoisted_table(void)
{
	struct hp_model *m = open_fixture("hoisted.c", "plan_hoisted", "-O2 -fPIE -pie");
	static const char *const names[] = { "hs_run", NULL };
	struct hp_profile prof;
	struct hp_plan plan;
	const struct hp_module *mod;

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *f = hp_model_find(m, "hs_run", &mod, NULL);
	REQUIRE(f && f->njt == 1 && mod->jtables[f->jt_start].hoisted, "hs_run has %u resolved tables, want 1 hoisted",
		f ? f->njt : 0);
	const struct hp_jump_table *jt = &mod->jtables[f->jt_start];
	size_t tab = plan_table(m, mod, f, names, &prof, &plan);
	REQUIRE(tab, "hs_run was not planned");
	/* The copy's lea (lea r64, [rip+disp32]: 7 bytes) names the copy's table; made to name the original's: refused. */
	uint64_t lea_at = copy_at(&plan, mod, f, jt->base_site);
	REQUIRE(lea_at, "the lea's block is not in the plan");
	uint8_t *lea = plan.code + (lea_at - plan.base);
	int32_t d;
	memcpy(&d, lea + 3, 4);
	EXPECT(lea_at + 7 + (uint64_t)(int64_t)d == plan.base + tab,
	       "the copy's lea names 0x%" PRIx64 ", want 0x%" PRIx64, lea_at + 7 + (uint64_t)(int64_t)d,
	       plan.base + tab);
	d = (int32_t)(int64_t)(jt->table_addr - (lea_at + 7));
	memcpy(lea + 3, &d, 4);
	EXPECT(!hp_plan_verify(m, &plan) &&
		       strstr(plan.verify_error, "reads a table that is not after the instructions"),
	       "a copy reading the original's table passed verification: %s", plan.verify_error);
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_model_free(m);
}

/* The listing: every emitted byte listed once, in order; each instruction
 * copied from an original is that original's operation (the same bytes
 * where nothing relative changed; a jcc may be inverted and a branch
 * relaxed); added jumps are as many as the plan counts. */
static void t_plan_listing_names_each_instructions_original(void)
{
	struct hp_model *m = open_fixture("switchy.c", "plan_list", "-O2 -fno-jump-tables");
	static const char *const names[] = { "sw_loop", "sw_dense", NULL };
	struct hp_plan_opts o;
	struct hp_profile prof;
	struct hp_plan plan;
	struct hp_listing l;
	const struct hp_module *mod;
	char err[256];

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *root = hp_model_find(m, "sw_loop", &mod, NULL);
	REQUIRE(root, "sw_loop not found");
	profile_all(m, names, 10, &prof);
	hp_plan_opts_default(&o);
	REQUIRE(hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err)) == 0 && plan.verified, "%s", err);
	REQUIRE(hp_plan_listing(m, &plan, &l, err, sizeof(err)) == 0, "%s", err);
	uint64_t at = plan.base;
	size_t added = 0, padding = 0, same = 0, branches = 0;
	for (size_t i = 0; i < l.n; i++) {
		const struct hp_listing_insn *in = &l.insns[i];
		EXPECT(in->addr == at, "instruction %zu at 0x%" PRIx64 ", want 0x%" PRIx64 " (a gap or overlap)", i,
		       in->addr, at);
		at = in->addr + in->len;
		if (in->origin == HP_LISTING_ADDED) {
			added++;
			continue;
		}
		if (in->origin == HP_LISTING_PADDING) {
			padding += in->len;
			continue;
		}
		const struct hp_function *f = plan.members[in->member].fn;
		uint8_t orig[16] = { 0 };
		struct hp_isa_insn a, b;
		uint64_t ta, tb;
		const uint8_t *c = plan.code + (in->addr - plan.base);
		size_t want = f->size - in->offset < sizeof(orig) ? f->size - in->offset : sizeof(orig);
		REQUIRE(m->read(m, f->addr + in->offset, orig, want) == 0, "cannot read %s", f->name);
		REQUIRE(hp_isa_decode(orig, sizeof(orig), f->addr + in->offset, &a) == 0 &&
				hp_isa_decode(c, in->len, in->addr, &b) == 0,
			"%s+0x%x does not decode", f->name, in->offset);
		if (a.cls == HP_IC_JCC || a.cls == HP_IC_JMP) {
			EXPECT(b.cls == HP_IC_JCC || b.cls == HP_IC_JMP, "%s+0x%x: a branch became class %d", f->name,
			       in->offset, b.cls);
			branches++;
		} else {
			EXPECT(hp_isa_same_operation(orig, a.len, f->addr + in->offset, c, in->len, in->addr, &ta, &tb),
			       "%s+0x%x is listed as the origin of a different instruction", f->name, in->offset);
			same += a.len == in->len && !memcmp(orig, c, in->len);
		}
	}
	EXPECT(at == plan.base + plan.code_len, "the listing ends at 0x%" PRIx64 ", the code at 0x%" PRIx64, at,
	       plan.base + plan.code_len);
	EXPECT(added == plan.added_jumps, "%zu added jumps listed, the plan added %u", added, plan.added_jumps);
	EXPECT(padding == plan.pad_bytes, "%zu padding bytes listed, the plan has %u", padding, plan.pad_bytes);
	EXPECT(same > 20 && branches > 0, "only %zu identical copies and %zu branches", same, branches);
	hp_listing_free(&l);
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

/* The report `hotpathd measure --blocks --json` prints (docs/agent-cli.md)
 * for f: a function row, a row per block counting 10 + its index (block 2
 * one a probe could not take), and edges from the entry, between blocks
 * (one exact, one not) and to an exit. size is the function size the
 * report claims; label the blocks' count label. */
static char *measure_report(const struct hp_module *mod, const struct hp_function *f, uint64_t size, const char *label)
{
	const struct hp_block *b = &mod->blocks[f->block_start];
	json_t *rows = json_array(), *edges = json_array();

	json_array_append_new(rows, json_pack("{s:s, s:s, s:I, s:I, s:{s:i}, s:{s:s}}", "function", f->name, "module",
					      "m", "function_address", (json_int_t)f->addr, "function_size",
					      (json_int_t)size, "metrics", "count", 40, "labels", "count", "exact"));
	for (uint32_t k = 0; k < f->nblocks; k++) {
		json_t *r = json_pack("{s:s, s:I, s:i, s:i, s:I, s:I}", "function", f->name, "block",
				      (json_int_t)(f->addr + b[k].offset), "block_offset", (int)b[k].offset,
				      "block_size", (int)b[k].size, "function_address", (json_int_t)f->addr,
				      "function_size", (json_int_t)size);
		if (k == 2) {
			json_object_set_new(r, "metrics", json_object());
			json_object_set_new(r, "unavailable", json_pack("{s:s}", "count", "the kernel refused it"));
		} else {
			json_object_set_new(r, "metrics", json_pack("{s:i}", "count", 10 + (int)k));
			json_object_set_new(r, "labels", json_pack("{s:s}", "count", label));
		}
		json_array_append_new(rows, r);
	}
	json_array_append_new(edges, json_pack("{s:s, s:n, s:I, s:s, s:i, s:b}", "function", f->name, "from", "to",
					       (json_int_t)f->addr, "kind", "entry", "count", 40, "exact", 1));
	json_array_append_new(edges,
			      json_pack("{s:s, s:I, s:I, s:s, s:i, s:b}", "function", f->name, "from",
					(json_int_t)(f->addr + b[0].offset), "to", (json_int_t)(f->addr + b[1].offset),
					"kind", "fallthrough", "count", 7, "exact", 1));
	json_array_append_new(edges,
			      json_pack("{s:s, s:I, s:I, s:s, s:i, s:b, s:n}", "function", f->name, "from",
					(json_int_t)(f->addr + b[1].offset), "to", (json_int_t)(f->addr + b[3].offset),
					"kind", "taken", "count", 5, "exact", 0, "high"));
	json_array_append_new(edges, json_pack("{s:s, s:I, s:n, s:s, s:i, s:b}", "function", f->name, "from",
					       (json_int_t)(f->addr + b[3].offset), "to", "kind", "return", "count", 3,
					       "exact", 1));
	json_t *root = json_pack("{s:{s:s}, s:s, s:[s], s:o, s:o, s:f}", "target", "kind", "pid", "state", "running",
				 "metrics", "count", "resources", rows, "edges", edges, "exact_edge_share", 0.75);
	char *text = json_dumps(root, 0);
	json_decref(root);
	return text;
}

static void t_profile_reads_measure_report(void)
{
	struct hp_model *m = open_fixture("switchy.c", "plan_measure", "-O2 -fno-jump-tables");
	const struct hp_module *mod;
	struct hp_profile prof;
	char err[256], *text;

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *f = hp_model_find(m, "sw_dense", &mod, NULL);
	REQUIRE(f && f->nblocks >= 4, "sw_dense not found");
	text = measure_report(mod, f, f->size, "exact");
	int r = hp_profile_parse(text, strlen(text), m, &prof, err, sizeof(err));
	free(text);
	REQUIRE(r == 0, "%s", err);
	const struct hp_prof_fn *pf = hp_profile_find(&prof, f->addr);
	REQUIRE(pf, "no counts for sw_dense");
	EXPECT(!prof.estimated, "exact counts read as estimates");
	EXPECT(pf->nblocks == f->nblocks - 1, "%zu blocks counted, want all but the unavailable one", pf->nblocks);
	for (size_t i = 0; i < pf->nblocks; i++) {
		uint32_t k = 0;
		while (mod->blocks[f->block_start + k].offset != pf->blocks[i].offset)
			k++;
		EXPECT(pf->blocks[i].count == 10 + k, "block +0x%x counts %.0f, want %u", pf->blocks[i].offset,
		       pf->blocks[i].count, 10 + k);
	}
	EXPECT(pf->nedges == 1 && pf->edges[0].count == 7, "%zu edges taken, want only the exact one between blocks",
	       pf->nedges);
	hp_profile_free(&prof);
	/* Sampled counts are estimates, in samples per instruction. */
	text = measure_report(mod, f, f->size, "sampled");
	r = hp_profile_parse(text, strlen(text), m, &prof, err, sizeof(err));
	free(text);
	REQUIRE(r == 0, "%s", err);
	pf = hp_profile_find(&prof, f->addr);
	EXPECT(prof.estimated && pf && pf->blocks[0].count == 10.0 / mod->blocks[f->block_start].ninsn,
	       "sampled counts not read as samples per instruction");
	hp_profile_free(&prof);
	/* A report of a function of another size is stale. */
	text = measure_report(mod, f, f->size + 16, "exact");
	r = hp_profile_parse(text, strlen(text), m, &prof, err, sizeof(err));
	free(text);
	EXPECT(r == -ESTALE && strstr(err, "sw_dense"), "a report of other code was not refused (%d: %s)", r, err);
	hp_model_free(m);
}

static const struct hp_plan_kept *kept(const struct hp_plan *p, const char *name)
{
	for (size_t i = 0; i < p->nkept; i++)
		if (!strcmp(p->kept[i].fn->name, name))
			return &p->kept[i];
	return NULL;
}

/* A plan of root from profile_all's counts of names (10 each), for a 32 KiB
 * 8-way L1i. */
static int plan_all(struct hp_model *m, const struct hp_function *root, const struct hp_module *mod,
		    const char *const *names, struct hp_profile *prof, struct hp_plan *plan, char *err, size_t errlen)
{
	struct hp_plan_opts o;

	profile_all(m, names, 10, prof);
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	return hp_plan_make(m, root, mod, prof, &o, plan, err, errlen);
}

/* Code the program finds by address stays in place, with its rule: a label
 * table in data read through an absolute address, exception landing pads,
 * unwind rules that are expressions. A label table read through a lea'd
 * register (PIE) is resolved and re-emitted for the copy. An address-taken
 * function still moves (its entry stays valid), and the copy's own
 * .eh_frame reads back as the originals' rows. */
static void found_case(const char *flags, const char *out)
{
	static const char *const names[] = { "fa_root", "fa_labels", "fa_cleanup", "fa_aligned", "fa_target", NULL };
	struct hp_model *m = open_fixture("found.c", out, flags);
	const struct hp_module *mod;
	struct hp_profile prof;
	struct hp_plan plan;
	char err[256];

	REQUIRE(m, "gcc %s or open failed", flags);
	const struct hp_function *root = hp_model_find(m, "fa_root", &mod, NULL);
	const struct hp_function *labels = hp_model_find(m, "fa_labels", NULL, NULL);
	const struct hp_function *cleanup = hp_model_find(m, "fa_cleanup", NULL, NULL);
	const struct hp_function *target = hp_model_find(m, "fa_target", NULL, NULL);
	REQUIRE(root && labels && cleanup && target, "fixture functions not found");
	/* Under PIE gcc reads the label table through a lea'd register: the
	 * model resolves it (its 4 entries, the words no inner reference);
	 * without PIE through an absolute address, which is not rewritten:
	 * the words are inner references and keep the function in place. */
	bool pie = strstr(flags, "-pie") && !strstr(flags, "no-pie");
	const struct hp_jump_table *lt = labels->njt ? &mod->jtables[labels->jt_start] : NULL;
	if (pie)
		EXPECT(labels->njt == 1 && lt->label && lt->nentries == 4 && !(labels->flags & HP_FN_INNER_REF),
		       "%s: fa_labels' label table not resolved (%u tables, flags 0x%x)", flags, labels->njt,
		       labels->flags);
	else
		EXPECT(labels->flags & HP_FN_INNER_REF, "%s: fa_labels' label table not seen (flags 0x%x)", flags,
		       labels->flags);
	EXPECT(cleanup->flags & HP_FN_LSDA, "%s: fa_cleanup's landing pad not seen (flags 0x%x)", flags,
	       cleanup->flags);
	EXPECT(target->flags & HP_FN_ADDR_TAKEN, "%s: fa_target's address in fa_hook not seen", flags);
	EXPECT(!(root->flags & (HP_FN_INNER_REF | HP_FN_LSDA | HP_FN_ADDR_TAKEN)), "%s: fa_root flagged 0x%x", flags,
	       root->flags);
	REQUIRE(plan_all(m, root, mod, names, &prof, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.status == HP_PLAN_OK && plan.verified, "%s: plan %d: %s", flags, plan.status, plan.message);
	const struct hp_plan_kept *k;
	const struct hp_plan_member *lm = NULL;
	for (size_t i = 0; i < plan.nmembers; i++)
		if (plan.members[i].fn == labels)
			lm = &plan.members[i];
	if (pie)
		EXPECT(lm && !kept(&plan, "fa_labels"), "%s: fa_labels (a label table) did not join the group", flags);
	else
		EXPECT((k = kept(&plan, "fa_labels")) && strstr(k->rule, "stored in data"),
		       "%s: fa_labels not kept by its rule", flags);
	EXPECT((k = kept(&plan, "fa_cleanup")) && strstr(k->rule, "landing pads"),
	       "%s: fa_cleanup not kept by its rule", flags);
	EXPECT((k = kept(&plan, "fa_aligned")) && strstr(k->rule, "unwind"), "%s: fa_aligned not kept by its rule",
	       flags);
	bool moved = false;
	for (size_t i = 0; i < plan.nmembers; i++)
		moved |= plan.members[i].fn == target;
	EXPECT(moved, "%s: the address-taken fa_target did not join the group", flags);
	EXPECT(plan.unwind && plan.unwind_fdes >= 2, "%s: no unwind data for the copy", flags);
	/* The copy's label table holds the copies' addresses, each relocated
	 * with the code: an entry pointing at another block, or one whose
	 * relocation is missing, is refused. */
	if (lm && plan.verified) {
		size_t at = plan.code_len, nlab = 0;
		for (size_t i = 0; i < plan.nrelocs; i++)
			if (plan.relocs[i].kind == HP_RELOC_CODE64) {
				nlab++;
				at = plan.relocs[i].offset < at ? plan.relocs[i].offset : at;
			}
		EXPECT(nlab == 4 && at + 32 <= plan.code_len, "%s: %zu label table relocations", flags, nlab);
		if (nlab == 4 && at + 32 <= plan.code_len) {
			uint64_t e0, e1;
			memcpy(&e0, plan.code + at, 8);
			memcpy(&e1, plan.code + at + 8, 8);
			memcpy(plan.code + at, &e1, 8);
			EXPECT(!hp_plan_verify(m, &plan), "%s: a label table entry swapped passed", flags);
			memcpy(plan.code + at, &e0, 8);
			EXPECT(hp_plan_verify(m, &plan), "%s: restored table refused: %s", flags, plan.verify_error);
			for (size_t i = 0; i < plan.nrelocs; i++)
				if (plan.relocs[i].offset == at)
					plan.relocs[i].kind = HP_RELOC_REL32;
			EXPECT(!hp_plan_verify(m, &plan), "%s: a label table entry without its relocation passed",
			       flags);
		}
	}
	/* The copy's unwind data is checked: a wrong data alignment factor in
	 * its CIE (byte 12) doubles every saved-register offset. */
	if (plan.unwind && plan.unwind_len > 13) {
		plan.unwind[12] = 2;
		EXPECT(!hp_plan_verify_unwind(m, &plan), "%s: corrupted unwind data passed", flags);
	}
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_model_free(m);
}

static void t_plan_keeps_code_found_by_address(void)
{
	found_case("-O2 -fexceptions -fPIE -pie", "found_pie");
	found_case("-O2 -fexceptions -fno-PIE -no-pie", "found_nopie");
}

/* C3 on a call graph whose clustering is known: f1 joins its caller f0, f3
 * its caller f1, f2 (cooler, big) f0's cluster while it fits a page; f5's
 * caller f4 is too big to share a page with it. Clusters densest first:
 * {f5} (40/300), {f0 f1 f3 f2} (245/3400), {f4} (50/3900). */
static void t_c3_order(void)
{
	static const struct hp_c3_fn f[] = { { 100, 100 }, { 80, 200 },  { 5, 3000 },
					     { 60, 100 },  { 50, 3900 }, { 40, 300 } };
	static const struct hp_c3_call calls[] = {
		{ 0, 1, 90 }, { 0, 2, 5 }, { 1, 3, 70 }, { 4, 5, 40 }, { 3, 3, 99 }
	};
	static const uint32_t want[] = { 5, 0, 1, 3, 2, 4 };
	uint32_t order[6];

	REQUIRE(hp_c3_order(f, 6, calls, 5, 4096, order) == 0, "out of memory");
	for (int i = 0; i < 6; i++)
		EXPECT(order[i] == want[i], "position %d holds f%u, want f%u", i, order[i], want[i]);
	/* With no page limit to speak of, f5 joins f4: one cluster less. */
	REQUIRE(hp_c3_order(f, 6, calls, 5, 1 << 20, order) == 0, "out of memory");
	EXPECT(order[4] == 4 && order[5] == 5, "f5 did not follow its caller f4: f%u f%u", order[4], order[5]);
}

/* Where a hot set's copy starts in its page (c3.c's place pass), on a
 * known conflict: a 32 KB 8-way L1i of 64-byte lines (64 sets), sets 0..15
 * full of hot code that stays in place. */
static void t_place_offset(void)
{
	uint32_t resident[64] = { 0 };

	EXPECT(hp_place_offset(resident, 64, 8, 64, 1024) == 0, "nothing in place: not at the page's start");
	for (int s = 0; s < 16; s++)
		resident[s] = 8;
	/* 16 hot lines at offset 0 would overfill sets 0..15: the first free set. */
	uint32_t o = hp_place_offset(resident, 64, 8, 64, 1024);
	EXPECT(o == 16 * 64, "16 hot lines start at +%u, want +1024 (set 16)", o);
	/* 48 lines fit sets 16..63 only. */
	o = hp_place_offset(resident, 64, 8, 64, 48 * 64);
	EXPECT(o == 16 * 64, "48 hot lines start at +%u, want +1024", o);
	/* More than a way: one line in every set, and the 10 left over off the busy sets. */
	for (int s = 0; s < 16; s++)
		resident[s] = 7;
	o = hp_place_offset(resident, 64, 8, 64, 74 * 64);
	EXPECT(o == 16 * 64, "74 hot lines start at +%u, want +1024", o);
	/* Nowhere free: the fewest lines over the ways, then the fewest shared. */
	for (int s = 0; s < 64; s++)
		resident[s] = s < 60 ? 8 : 4;
	o = hp_place_offset(resident, 64, 8, 64, 4 * 64);
	EXPECT(o == 60 * 64, "4 hot lines start at +%u, want +3840 (sets 60..63 have room)", o);
}

/* A hot-set plan: no root given; every function of the profile that can
 * move is a member (shared callees too), what cannot is kept with its rule,
 * the first laid out names the plan, and the code verifies. */
static void t_hot_set_plan(void)
{
	static const char *const names[] = { "pr_root", "pr_op", "pr_mix", "pr_hash", "pr_search", "pr_table", NULL };
	struct hp_model *m = open_fixture("group.c", "plan_hot", "-O2");
	struct hp_plan_opts o;
	struct hp_profile prof;
	struct hp_plan plan;
	char err[256];

	REQUIRE(m, "gcc or open failed");
	profile_all(m, names, 10, &prof);
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	o.hot_set = true;
	o.hot_share = 1;
	REQUIRE(hp_plan_make(m, NULL, NULL, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.status == HP_PLAN_OK && plan.verified, "plan %d: %s %s", plan.status, plan.message,
	       plan.verify_error);
	/* pr_table's switch table (4-byte offsets, -fPIE) is rewritten: it moves too. */
	EXPECT(plan.nmembers == 6 && plan.nkept == 0, "%zu members (%zu kept), want all 6", plan.nmembers, plan.nkept);
	for (const char *const *n = names; *n; n++) {
		bool in = false;
		for (size_t i = 0; i < plan.nmembers; i++)
			in |= !strcmp(plan.members[i].fn->name, *n);
		EXPECT(in, "%s is not a member", *n);
	}
	hp_plan_free(&plan);
	/* A share below 1 leaves the coolest out; --max-functions bounds the set. */
	o.max_functions = 2;
	REQUIRE(hp_plan_make(m, NULL, NULL, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.nmembers == 2 && plan.verified, "%zu members with --max-functions 2", plan.nmembers);
	EXPECT(kept(&plan, "pr_op") || kept(&plan, "pr_mix") || kept(&plan, "pr_hash") || kept(&plan, "pr_search"),
	       "nothing was kept for a full hot set");
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	/* No counts: no plan, and no crash without a root. */
	memset(&prof, 0, sizeof(prof));
	REQUIRE(hp_plan_make(m, NULL, NULL, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.status == HP_PLAN_NO_COUNTS, "status %d without counts", plan.status);
	hp_plan_free(&plan);
	hp_model_free(m);
}

/* A plan's saved profile keeps the hot code the plan leaves where it is
 * (neither a member nor kept: here main, pr_root's caller) as "resident":
 * a later plan given it as --resident places its copy against that code
 * (hp_profile_read_resident), while planning from it reads only the
 * members' and the kept functions' counts (hp_profile_read). */
static void t_plan_profile_keeps_resident_code(void)
{
	static const char *const names[] = { "pr_root", "pr_op", "main", NULL };
	struct hp_model *m = open_fixture("group.c", "plan_resident", "-O2");
	const struct hp_module *mod;
	struct hp_plan_opts o;
	struct hp_profile prof, back;
	struct hp_plan plan;
	char err[256], path[400], *text = NULL;
	size_t len = 0;

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *root = hp_model_find(m, "pr_root", &mod, NULL);
	const struct hp_function *mainf = hp_model_find(m, "main", NULL, NULL);
	REQUIRE(root && mainf, "pr_root or main not found");
	profile_all(m, names, 10, &prof);
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	REQUIRE(hp_plan_make(m, root, mod, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	REQUIRE(plan.status == HP_PLAN_OK, "plan %d: %s", plan.status, plan.message);
	REQUIRE(hp_plan_json(m, &plan, root, 0, &text, &len) == 0, "no JSON");
	snprintf(path, sizeof(path), "%s/plan_resident.json", tu_tmpdir());
	FILE *fp = fopen(path, "w");
	REQUIRE(fp && fwrite(text, 1, len, fp) == len && fclose(fp) == 0, "cannot write %s", path);
	free(text);
	REQUIRE(hp_profile_read(path, m, &back, err, sizeof(err)) == 0, "%s", err);
	EXPECT(hp_profile_find(&back, root->addr) && !hp_profile_find(&back, mainf->addr),
	       "planning from the saved profile reads main, which the plan left in place");
	hp_profile_free(&back);
	REQUIRE(hp_profile_read_resident(path, m, &back, err, sizeof(err)) == 0, "%s", err);
	const struct hp_prof_fn *pm = hp_profile_find(&back, mainf->addr), *orig = hp_profile_find(&prof, mainf->addr);
	EXPECT(pm && orig && pm->nblocks == orig->nblocks, "main read back as resident with %zu blocks, want %zu",
	       pm ? pm->nblocks : 0, orig ? orig->nblocks : 0);
	hp_profile_free(&back);
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_model_free(m);
}

/* The hot/cold split of a hot set by rate: a block (the entry aside) that
 * ran fewer than cold_rate times per billion instructions of the profile's
 * work is cold; cold_rate 0 keeps every block that ran hot. */
static const struct hp_plan_member *member(const struct hp_plan *p, const char *name)
{
	for (size_t i = 0; i < p->nmembers; i++)
		if (!strcmp(p->members[i].fn->name, name))
			return &p->members[i];
	return NULL;
}

static void t_hot_set_cold_rate(void)
{
	static const char *const others[] = { "pr_op", "pr_mix", "pr_hash", "pr_search", "pr_table", NULL };
	struct hp_model *m = open_fixture("group.c", "plan_hot_rate", "-O2");
	struct hp_plan_opts o;
	struct hp_profile prof;
	struct hp_plan plan;
	char err[256];

	REQUIRE(m, "gcc or open failed");
	profile_all(m, others, 10, &prof);
	/* pr_root: its entry and odd blocks ran once, its other blocks 1000 times. */
	const struct hp_module *mod;
	const struct hp_function *root = hp_model_find(m, "pr_root", &mod, NULL);
	REQUIRE(root && root->nblocks >= 3, "pr_root has %u blocks", root ? root->nblocks : 0);
	for (uint32_t b = 0; b < root->nblocks; b++)
		hp_profile_add(&prof, mod, root, mod->blocks[root->block_start + b].offset, b && b % 2 == 0 ? 1000 : 1);
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	o.hot_set = true;
	double work = 0;
	uint32_t hot[3] = { 0 };
	for (int k = 0; k < 3; k++) {
		/* 0: all that ran; 1e9: one a instruction, above any block's count, so
		 * only entries stay hot; then the rate that puts the bound at 100. */
		o.cold_rate = k == 0 ? 0 : k == 1 ? 1e9 : 100e9 / work;
		REQUIRE(hp_plan_make(m, NULL, NULL, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
		EXPECT(plan.status == HP_PLAN_OK && plan.verified, "cold_rate %g: plan %d: %s %s", o.cold_rate,
		       plan.status, plan.message, plan.verify_error);
		const struct hp_plan_member *mb = member(&plan, "pr_root");
		REQUIRE(mb, "pr_root is not a member");
		if (k == 1)
			work = plan.cold_below; /* the work itself, at one a instruction */
		for (uint32_t i = 0; i < mb->nblocks; i++) {
			const struct hp_plan_block *b = &mb->blocks[i];
			double want_count = b->index && b->index % 2 == 0 ? 1000 : 1;
			bool want_hot = b->index == 0 || (k == 0) || (k == 2 && want_count == 1000);
			EXPECT(b->hot == want_hot, "cold_rate %g: pr_root's block %u (count %g) %s", o.cold_rate,
			       b->index, b->count, b->hot ? "hot" : "cold");
			EXPECT(b->count == want_count, "block %u keeps count %g, want %g", b->index, b->count,
			       want_count);
			hot[k] += b->hot;
		}
		for (const char *const *n = others; *n && k; n++) {
			const struct hp_plan_member *x = member(&plan, *n);
			EXPECT(x && x->nhot == 1 && x->blocks[0].index == 0,
			       "cold_rate %g: %s has %u hot blocks, want its entry", o.cold_rate, *n, x ? x->nhot : 0);
		}
		hp_plan_free(&plan);
	}
	EXPECT(work > 1000, "the work at one a instruction is %g", work);
	EXPECT(hot[0] == root->nblocks && hot[1] == 1 && hot[2] == 1 + (root->nblocks - 1) / 2,
	       "pr_root's hot blocks %u, %u, %u of %u", hot[0], hot[1], hot[2], root->nblocks);
	hp_profile_free(&prof);
	hp_model_free(m);
}

/* A tail call through a loaded pointer (a struct's field, a global) moves
 * with its function: from the copy it goes where it went. One through a
 * table indexed by an argument, which a switch's dispatch looks like too,
 * keeps its function in place, as every unresolved indirect jump did. */
static void tail_pointer_case(const char *flags, const char *out)
{
	static const char *const names[] = { "tp_root", "tp_field", "tp_global", "tp_indexed", NULL };
	struct hp_model *m = open_fixture("tailptr.c", out, flags);
	const struct hp_module *mod;
	struct hp_profile prof;
	struct hp_plan plan;
	char err[256];

	REQUIRE(m, "gcc %s or open failed", flags);
	const struct hp_function *root = hp_model_find(m, "tp_root", &mod, NULL);
	REQUIRE(root, "tp_root not found");
	for (const char *const *n = names + 1; *n; n++) {
		const struct hp_function *f = hp_model_find(m, *n, NULL, NULL);
		REQUIRE(f, "%s not found", *n);
		EXPECT((f->flags & HP_FN_UNRESOLVED_JUMP) || f->njt, "%s: %s's indirect jump not seen (flags 0x%x)",
		       flags, *n, f->flags);
	}
	REQUIRE(plan_all(m, root, mod, names, &prof, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.status == HP_PLAN_OK && plan.verified, "%s: plan %d: %s", flags, plan.status, plan.message);
	const struct hp_plan_kept *k;
	EXPECT(!kept(&plan, "tp_field"), "%s: tp_field kept: %s", flags, kept(&plan, "tp_field")->rule);
	EXPECT(!kept(&plan, "tp_global"), "%s: tp_global kept: %s", flags, kept(&plan, "tp_global")->rule);
	EXPECT(member(&plan, "tp_field") && member(&plan, "tp_global"), "%s: tp_field or tp_global did not move",
	       flags);
	EXPECT((k = kept(&plan, "tp_indexed")) && strstr(k->rule, "not a resolved switch table"),
	       "%s: tp_indexed not kept by its rule", flags);
	hp_plan_free(&plan);
	hp_profile_free(&prof);
	hp_model_free(m);
}

static void t_plan_moves_pointer_tail_calls(void)
{
	tail_pointer_case("-O2 -fPIE -pie", "tailptr_pie");
	tail_pointer_case("-O2 -fno-PIE -no-pie", "tailptr_nopie");
}

/* The promoted call of p at fn's site off, or NULL. */
static const struct hp_plan_icall *icall_at(const struct hp_plan *p, const char *fn, uint32_t off)
{
	for (size_t k = 0; k < p->nicalls; k++)
		if (!strcmp(p->icalls[k].fn->name, fn) && p->icalls[k].site == off)
			return &p->icalls[k];
	return NULL;
}

/*
 * Indirect-call promotion (fixtures/icall.c, -fPIE): from a value profile,
 * a site whose one target is a member (ic_run's first, ic_via's through a
 * register) is promoted and one whose two targets take half each is not;
 * the code verifies, each compare slot is an absolute relocation holding
 * its member's original entry (moved by the load bias on relocation), the
 * listing names each sequence's instructions as from its call; and the
 * verifier refuses a slot naming another function, a direct call to
 * somewhere else, and a fallback that reads another operand.
 */
static void t_plan_promotes_indirect_calls(void)
{
	static const char *const names[] = { "ic_run", "ic_via", "ic_add", "ic_mul", NULL };
	struct hp_model *m = open_fixture("icall.c", "plan_icall", "-O2 -fPIE -pie");
	const struct hp_module *mod;
	struct hp_plan_opts o;
	struct hp_profile prof;
	struct hp_plan plan;
	struct hp_icall_values v;
	char err[256], json[1024];

	REQUIRE(m, "gcc or open failed");
	const struct hp_function *run = hp_model_find(m, "ic_run", &mod, NULL),
				 *via = hp_model_find(m, "ic_via", NULL, NULL),
				 *add = hp_model_find(m, "ic_add", NULL, NULL);
	REQUIRE(run && via && add && run->nicalls == 2 && via->nicalls == 1,
		"the fixture's indirect calls: %u in ic_run, %u in ic_via", run ? run->nicalls : 0,
		via ? via->nicalls : 0);
	uint32_t s0 = mod->icall_sites[run->icall_start], s1 = mod->icall_sites[run->icall_start + 1];
	uint32_t sv = mod->icall_sites[via->icall_start];
	snprintf(json, sizeof(json),
		 "{\"sites\": [{\"function\": \"ic_run\", \"site\": \"0x%x\", \"calls\": 1000, \"targets\": "
		 "[{\"function\": \"ic_add\", \"indirect\": 1000, \"direct\": 0}]}, {\"function\": \"ic_run\", "
		 "\"site\": \"0x%x\", \"calls\": 1000, \"targets\": [{\"function\": \"ic_add\", \"indirect\": 500}, "
		 "{\"function\": \"ic_mul\", \"indirect\": 500}]}, {\"function\": \"ic_via\", \"site\": %u, "
		 "\"calls\": 1000, \"targets\": [{\"function\": \"ic_mul\", \"count\": 10}, {\"function\": "
		 "\"ic_add\", \"count\": 990}]}]}",
		 s0, s1, sv);
	static const char bad[] = "{\"sites\": [{\"function\": \"ic_run\", \"site\": -1}]}";
	EXPECT(hp_icall_values_parse(bad, strlen(bad), &v, err, sizeof(err)) < 0,
	       "a negative site offset was accepted");
	REQUIRE(hp_icall_values_parse(json, strlen(json), &v, err, sizeof(err)) == 0, "%s", err);
	profile_all(m, names, 10, &prof);
	hp_plan_opts_default(&o);
	o.l1i = (struct hp_cache_geometry){ 32768, 64, 8 };
	o.hot_set = true;
	o.icall_values = &v;
	REQUIRE(hp_plan_make(m, NULL, NULL, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.status == HP_PLAN_OK && plan.verified, "plan %d: %s %s", plan.status, plan.message,
	       plan.verify_error);
	const struct hp_plan_icall *a = icall_at(&plan, "ic_run", s0), *b = icall_at(&plan, "ic_run", s1),
				   *c = icall_at(&plan, "ic_via", sv);
	REQUIRE(a && b && c, "the plan lists %zu indirect calls, not the fixture's 3", plan.nicalls);
	EXPECT(plan.npromoted == 2 && a->promoted == add && c->promoted == add,
	       "%u promoted (ic_run+0x%x: %s, ic_via: %s)", plan.npromoted, s0,
	       a->promoted ? a->promoted->name : a->why_not, c->promoted ? c->promoted->name : c->why_not);
	EXPECT(!b->promoted && b->why_not && b->ntargets == 2, "the 50/50 site is promoted (%s)", b->why_not);
	EXPECT(c->targets[0].count == 990 && !strcmp(c->targets[0].function, "ic_add"),
	       "ic_via's targets are not most first");
	/* Each slot: an absolute relocation to ic_add's entry, moved by the bias. */
	int abs = 0;
	for (size_t i = 0; i < plan.nrelocs; i++)
		abs += plan.relocs[i].kind == HP_RELOC_ABS64 && plan.relocs[i].target == add->addr &&
		       (plan.relocs[i].offset == a->slot - plan.base || plan.relocs[i].offset == c->slot - plan.base);
	EXPECT(abs == 2, "%d absolute relocations name the slots", abs);
	uint8_t *out = malloc(plan.code_len);
	uint64_t got = 0;
	REQUIRE(out, "out of memory");
	EXPECT(hp_plan_relocate(&plan, plan.base + 0x10000, 0x4000, out, err, sizeof(err)) == 0, "%s", err);
	memcpy(&got, out + (a->slot - plan.base), 8);
	EXPECT(got == add->addr + 0x4000, "the relocated slot holds 0x%" PRIx64 ", want ic_add + the bias", got);
	free(out);
	/* The listing: every instruction of a sequence is from its call. */
	struct hp_listing l;
	REQUIRE(hp_plan_listing(m, &plan, &l, err, sizeof(err)) == 0, "%s", err);
	size_t from_site = 0;
	for (size_t i = 0; i < l.n; i++)
		from_site += l.insns[i].addr >= a->new_addr && l.insns[i].addr < a->new_addr + a->new_len &&
			     l.insns[i].origin == HP_LISTING_ORIGINAL && l.insns[i].offset == s0;
	EXPECT(from_site >= 5, "%zu listed instructions of the promoted sequence are from ic_run+0x%x", from_site, s0);
	hp_listing_free(&l);
	/* The verifier refuses what is not the promotion of that call. */
	uint8_t *slot = plan.code + (a->slot - plan.base);
	slot[0] ^= 0x40;
	EXPECT(!hp_plan_verify(m, &plan) && strstr(plan.verify_error, "promoted"),
	       "a slot naming another address passed: %s", plan.verify_error);
	slot[0] ^= 0x40;
	struct hp_isa_promoted q = { 0 };
	uint8_t *seq = plan.code + (a->new_addr - plan.base);
	REQUIRE(hp_isa_match_promoted_call(seq, a->new_len, a->new_addr, NULL, 0, 0, &q) == (int)a->new_len,
		"the emitted sequence is not recognized");
	seq[q.direct_ret - 4] ^= 0x01;
	EXPECT(!hp_plan_verify(m, &plan), "a direct call to somewhere else passed");
	seq[q.direct_ret - 4] ^= 0x01;
	uint8_t *vseq = plan.code + (c->new_addr - plan.base);
	vseq[2] ^= 0x01; /* mov r11, <another register> */
	EXPECT(!hp_plan_verify(m, &plan), "a fallback reading another operand passed");
	vseq[2] ^= 0x01;
	EXPECT(hp_plan_verify(m, &plan), "the restored code fails: %s", plan.verify_error);
	hp_plan_free(&plan);
	/* Without a value profile nothing is promoted and the code is as before promotion existed. */
	o.icall_values = NULL;
	REQUIRE(hp_plan_make(m, NULL, NULL, &prof, &o, &plan, err, sizeof(err)) == 0, "%s", err);
	EXPECT(plan.verified && plan.npromoted == 0, "promoted %u without a value profile", plan.npromoted);
	for (size_t i = 0; i < plan.nrelocs; i++)
		EXPECT(plan.relocs[i].kind == HP_RELOC_REL32, "an absolute relocation without promotion");
	hp_plan_free(&plan);
	hp_icall_values_free(&v);
	hp_profile_free(&prof);
	hp_model_free(m);
}

int main(void)
{
	RUN(t_chain_perfect_partner);
	RUN(t_chain_isolated_small_predecessor);
	RUN(t_chain_should_follow);
	RUN(t_plan_elf_is_verified);
	RUN(t_plan_rewrites_switch_table);
	RUN(t_plan_rewrites_hoisted_table);
	RUN(t_plan_listing_names_each_instructions_original);
	RUN(t_plan_refuses_stale_profile);
	RUN(t_profile_reads_measure_report);
	RUN(t_plan_without_counts_or_heat);
	RUN(t_plan_keeps_code_found_by_address);
	RUN(t_c3_order);
	RUN(t_place_offset);
	RUN(t_hot_set_plan);
	RUN(t_hot_set_cold_rate);
	RUN(t_plan_profile_keeps_resident_code);
	RUN(t_plan_moves_pointer_tail_calls);
	RUN(t_plan_promotes_indirect_calls);
	tu_cleanup();
	TEST_EXIT();
}
