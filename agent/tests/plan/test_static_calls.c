// SPDX-License-Identifier: Apache-2.0
/*
 * Static call sites in copies (plan/static_calls.h), on the live kernel:
 * every vmlinux function with a static call site whose trampoline is not
 * known keeps its place with that rule (this machine's kernel lists no data
 * symbols in /proc/kallsyms, so no key names its trampoline); where kallsyms
 * names them (CONFIG_KALLSYMS_ALL, as the kernel lane's Debian 6.1 guest,
 * where this program is run too), such functions are planned and moved: the
 * copy calls (tail: jumps to) each site's trampoline, as the verifier
 * re-decodes, and a copy whose call names another address is refused.
 * Prints the counts of what moves and what stays, with why.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "harness.h"
#include "isa/isa.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "plan/static_calls.h"
#include "target/target.h"

#include "plan_one.h"

/* Counts over vmlinux's functions with static call sites. */
struct tally {
	size_t with, sites, sites_known, movable, sites_movable, also_keys, unknown, form, other, trampolines;
	size_t planned, verified, calls, want_calls;
	bool tampered;
};

/* Change the first trampoline call's displacement of p (whose sites are
 * those of cs[0, ncs)) and check the verifier refuses it, then restore it. */
static void tamper(struct hp_model *m, const struct hp_function *f, struct hp_plan *p, const struct hp_static_call *cs,
		   size_t ncs, struct tally *t)
{
	for (size_t r = 0; r < p->nrelocs && !t->tampered; r++) {
		uint32_t at = p->relocs[r].offset;
		bool tramp = false;
		for (size_t k = 0; k < ncs; k++)
			tramp |= p->relocs[r].target == cs[k].tramp;
		if (!tramp || at < 1 || (p->code[at - 1] != 0xe8 && p->code[at - 1] != 0xe9))
			continue;
		t->tampered = true;
		int32_t d;
		memcpy(&d, p->code + at, 4);
		d += 16; /* another address, 16 bytes on */
		memcpy(p->code + at, &d, 4);
		EXPECT(!hp_plan_verify(m, p) && strstr(p->verify_error, "of its trampoline"),
		       "%s: a trampoline call of another address was not refused: %s", f->name, p->verify_error);
		d -= 16;
		memcpy(p->code + at, &d, 4);
		EXPECT(hp_plan_verify(m, p), "%s: restored copy refused: %s", f->name, p->verify_error);
	}
}

static void count(struct hp_model *m, const struct hp_module *mod, struct tally *t, bool plan)
{
	char err[256], detail[200];

	for (size_t i = 0; i < mod->nfuncs; i++) {
		const struct hp_function *f = &mod->funcs[i];
		const struct hp_static_call *cs;
		size_t ncs = hp_call_sites_in(m, f->addr, f->addr + f->size, &cs), known = 0;
		if (!ncs)
			continue;
		if (cs[0].trampoline) {
			t->trampolines++;
			continue;
		}
		for (size_t k = 0; k < ncs; k++)
			known += cs[k].tramp != 0;
		t->with++;
		t->sites += ncs;
		t->sites_known += known;
		const char *rule = hp_plan_kept_rule(m, mod, f, detail, sizeof(detail));
		if (!rule) {
			t->movable++;
			t->sites_movable += ncs;
			t->also_keys += (f->flags & HP_FN_STATIC_BRANCH) != 0;
		} else if (strstr(rule, "trampoline is not known")) {
			t->unknown++;
			EXPECT(known < ncs, "%s: kept for an unknown trampoline, all %zu known", f->name, ncs);
		} else if (strstr(rule, "form the agent does not rewrite")) {
			t->form++;
		} else {
			t->other++;
		}
		/* Every site's trampoline unknown: the function stays, whatever else holds. */
		EXPECT(known || rule, "%s: moves with no trampoline known", f->name);
		if (!plan || rule || t->movable % 25 != 1 || t->planned >= 40)
			continue;
		struct hp_plan p;
		t->planned++;
		if (plan_one(m, mod, f, &p, err, sizeof(err)) < 0) {
			EXPECT(false, "%s: plan failed: %s", f->name, err);
			continue;
		}
		bool ok = p.status == HP_PLAN_OK && p.verified;
		t->verified += ok;
		t->calls += p.trampoline_calls;
		t->want_calls += ncs;
		EXPECT(ok, "%s: plan %d: %s", f->name, p.status, p.message);
		EXPECT(p.trampoline_calls == ncs, "%s: %u trampoline calls for %zu sites", f->name, p.trampoline_calls,
		       ncs);
		if (ok && !t->tampered)
			tamper(m, f, &p, cs, ncs, t);
		hp_plan_free(&p);
	}
}

static void print(const char *what, const struct tally *t)
{
	fprintf(stderr,
		"  %s: %zu functions with %zu static call sites (%zu with a known trampoline), %zu trampolines; "
		"movable %zu (%zu sites; %zu of them with jump labels too); kept: trampoline not known %zu, site "
		"form %zu, other rules %zu; planned %zu, verified %zu, trampoline calls %zu of %zu\n",
		what, t->with, t->sites, t->sites_known, t->trampolines, t->movable, t->sites_movable, t->also_keys,
		t->unknown, t->form, t->other, t->planned, t->verified, t->calls, t->want_calls);
}

static struct hp_model *open_kernel(char *err, size_t errlen)
{
	struct hp_open_opts oo = { .quiet = true };
	struct hp_model *m = NULL;

	return hp_model_open_kernel(&oo, &m, err, errlen) < 0 ? NULL : m;
}

/* Whatever kallsyms lists: a function moves only where each of its sites'
 * trampolines is known, and one kept for its sites says which. */
static void t_kernel_static_call_sites_kept_with_their_rule(void)
{
	char err[256];
	struct hp_model *m = open_kernel(err, sizeof(err));
	struct tally t = { 0 };

	if (!m)
		SKIP("kernel model unavailable: %s", err);
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	REQUIRE(kf && kf->ncall_entries > 100, "static call site table not read");
	count(m, &m->mods[0], &t, false);
	print("vmlinux", &t);
	EXPECT(t.with > 100 && t.trampolines > 10, "%zu functions with sites, %zu trampolines", t.with, t.trampolines);
	EXPECT(t.unknown + t.form + t.other + t.movable == t.with, "tally does not add up");
	if (!t.sites_known)
		EXPECT(t.movable == 0 && t.unknown > 0, "no trampoline known, yet %zu functions move", t.movable);
	hp_model_free(m);
}

/* Where kallsyms names the keys: functions with static call sites move,
 * their copies call the trampolines, as verified; tampering is refused. */
static void t_kernel_functions_with_static_calls_move(void)
{
	char err[256];
	struct hp_model *m = open_kernel(err, sizeof(err));
	struct tally t = { 0 };

	if (!m)
		SKIP("kernel model unavailable: %s", err);
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	size_t known = 0;
	for (size_t i = 0; kf && i < kf->ncall_entries; i++)
		known += kf->call_entries[i].tramp != 0;
	if (!known) {
		hp_model_free(m);
		SKIP("this kernel's /proc/kallsyms names no static call key (__SCK__: data symbols, listed only with "
		     "CONFIG_KALLSYMS_ALL), so no site's trampoline is known; the kernel lane's guest runs this");
	}
	count(m, &m->mods[0], &t, true);
	print("vmlinux, planned", &t);
	EXPECT(t.movable >= 50, "only %zu of %zu functions with static call sites can move", t.movable, t.with);
	EXPECT(t.planned >= 2 && t.verified == t.planned, "%zu of %zu plans verified", t.verified, t.planned);
	EXPECT(t.calls > 0 && t.calls == t.want_calls, "%zu trampoline calls for %zu sites", t.calls, t.want_calls);
	EXPECT(t.tampered, "no trampoline call was found to tamper with");
	hp_model_free(m);
}

int main(void)
{
	RUN(t_kernel_static_call_sites_kept_with_their_rule);
	RUN(t_kernel_functions_with_static_calls_move);
	TEST_EXIT();
}
