// SPDX-License-Identifier: Apache-2.0
/*
 * Jump-label sites in copies (plan/static_keys.h), on this machine's live
 * kernel: functions with jump labels (and no static call) are planned and
 * moved unless a status flag is live after a site; the copy reads each
 * site's key ("cmp dword [rip + key], 0") and branches by the entry's
 * branch bit, as the verifier re-decodes; a copy whose key read names
 * another address, or whose branch after it is inverted, is refused.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "harness.h"
#include "isa/isa.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "plan/static_keys.h"
#include "target/target.h"

#include "plan_one.h"

/* The sites of f that end one of its blocks (each becomes a key read). */
static size_t block_end_sites(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f)
{
	const struct hp_static_branch *ks;
	size_t n = hp_key_sites_in(m, f->addr, f->addr + f->size, &ks), ends = 0;

	for (size_t k = 0; k < n; k++) {
		const struct hp_block *b = hp_function_block_at(mod, f, ks[k].code);
		uint8_t buf[8];
		struct hp_isa_insn in;
		if (b && m->read(m, ks[k].code, buf, sizeof(buf)) == 0 &&
		    hp_isa_decode(buf, sizeof(buf), ks[k].code, &in) == 0 &&
		    ks[k].code + in.len == f->addr + b->offset + b->size)
			ends++;
	}
	return ends;
}

static void t_kernel_functions_with_key_sites_move(void)
{
	struct hp_open_opts oo = { .quiet = true };
	struct hp_model *m = NULL;
	char err[256], detail[160];

	if (hp_model_open_kernel(&oo, &m, err, sizeof(err)) < 0)
		SKIP("kernel model unavailable: %s", err);
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	REQUIRE(kf && kf->njump_entries > 100, "jump table not read");
	const struct hp_module *mod = &m->mods[0];
	size_t with = 0, movable = 0, flags_live = 0, outside = 0, calls = 0, other = 0, sites = 0, sites_movable = 0;
	size_t planned = 0, verified = 0, reads = 0, want_reads = 0;
	bool tampered = false;

	for (size_t i = 0; i < mod->nfuncs; i++) {
		const struct hp_function *f = &mod->funcs[i];
		if (!(f->flags & HP_FN_STATIC_BRANCH))
			continue;
		const struct hp_static_branch *ks;
		size_t ns = hp_key_sites_in(m, f->addr, f->addr + f->size, &ks);
		with++;
		sites += ns;
		const char *rule = hp_plan_kept_rule(m, mod, f, detail, sizeof(detail));
		if (!rule) {
			movable++;
			sites_movable += ns;
		} else if (strstr(rule, "status flag is live")) {
			flags_live++;
		} else if (strstr(rule, "target is outside")) {
			outside++;
		} else if (f->flags & HP_FN_STATIC_CALL) {
			calls++;
		} else {
			other++;
		}
		/* Plan a spread of the movable ones (every 25th). */
		if (rule || movable % 25 != 1 || planned >= 40)
			continue;
		struct hp_plan p;
		planned++;
		if (plan_one(m, mod, f, &p, err, sizeof(err)) < 0) {
			EXPECT(false, "%s: plan failed: %s", f->name, err);
			continue;
		}
		size_t ends = block_end_sites(m, mod, f);
		bool ok = p.status == HP_PLAN_OK && p.verified;
		verified += ok;
		reads += p.key_reads;
		want_reads += ends;
		EXPECT(ok, "%s: plan %d: %s", f->name, p.status, p.message);
		EXPECT(p.key_reads == ends, "%s: %u key reads for %zu sites", f->name, p.key_reads, ends);
		if (ok && !tampered && p.key_reads) {
			/* The key read's displacement is the relocation whose target
			 * is a site's key; the jcc follows it. */
			for (size_t r = 0; r < p.nrelocs && !tampered; r++) {
				bool key = false;
				for (size_t k = 0; k < ns; k++)
					key |= p.relocs[r].target == ks[k].key;
				uint32_t at = p.relocs[r].offset;
				if (!key || at < 2 || p.code[at - 2] != 0x83 || p.code[at - 1] != 0x3d)
					continue;
				tampered = true;
				int32_t d;
				memcpy(&d, p.code + at, 4);
				d += 4; /* the next field of the key */
				memcpy(p.code + at, &d, 4);
				EXPECT(!hp_plan_verify(m, &p) && strstr(p.verify_error, "not a read of its key"),
				       "%s: a key read of another address was not refused: %s", f->name,
				       p.verify_error);
				d -= 4;
				memcpy(p.code + at, &d, 4);
				REQUIRE(hp_plan_verify(m, &p), "%s: restored copy refused: %s", f->name,
					p.verify_error);
				uint8_t *j = p.code + at + 5; /* after the imm8: jcc rel8 (7x) or rel32 (0f 8x) */
				uint8_t *c = (j[0] & 0xf0) == 0x70 ? j : (j[0] == 0x0f ? j + 1 : NULL);
				REQUIRE(c, "%s: no jcc after the key read (%02x)", f->name, j[0]);
				*c ^= 1;
				EXPECT(!hp_plan_verify(m, &p), "%s: the key read's branch inverted was not refused",
				       f->name);
				*c ^= 1;
			}
		}
		hp_plan_free(&p);
	}
	fprintf(stderr,
		"  vmlinux: %zu functions with %zu jump-label sites; movable %zu (%zu sites); kept: status flags live "
		"%zu, a target outside %zu, static calls %zu, other rules %zu; planned %zu, verified %zu, key reads "
		"%zu of %zu\n",
		with, sites, movable, sites_movable, flags_live, outside, calls, other, planned, verified, reads,
		want_reads);
	EXPECT(movable >= 50, "only %zu of %zu functions with jump labels can move", movable, with);
	EXPECT(planned >= 2 && verified == planned, "%zu of %zu plans verified", verified, planned);
	EXPECT(reads > 0 && reads == want_reads, "%zu key reads, %zu sites end blocks", reads, want_reads);
	EXPECT(tampered, "no key read was found to tamper with");
	hp_model_free(m);
}

int main(void)
{
	RUN(t_kernel_functions_with_key_sites_move);
	TEST_EXIT();
}
