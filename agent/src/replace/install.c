// SPDX-License-Identifier: Apache-2.0
/*
 * The install and revert engine (install.h), written against the target
 * interface only. One journal per install, in STATE_DIR/replace/:
 *   ID.plan.json   the plan as installed (for listing, measuring and the
 *                  second pass)
 *   ID.journal     records, each durable before its change is made:
 *     begin      who and what: pid, start time, root, module, build id,
 *                code hash, address shift
 *     undo       a change to existing bytes with the original bytes
 *                (scratch bytes, the entry, a call site)
 *     heap       the code heap about to be mapped (address, length);
 *     heap_mapped, unwind_register (intent), unwind_registered, installed,
 *     revert, restored, unwind_deregister (intent), unwind_deregistered,
 *     heap_released, heap_kept,
 *     reverted (the journal is then removed).
 * Recovery never trusts a record alone: a change counts as made when the
 * live bytes are its new bytes, as undone when they are the original ones.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/hex.h"
#include "isa/isa.h"
#include "host/processes.h"
#include "replace/install.h"
#include "replace/journal.h"
#include "replace/patch_target.h"

#define REACH      ((int64_t)1 << 31)
#define HEAP_ALIGN 4096

const char *hp_install_step_name(enum hp_install_step s)
{
	static const char *const n[] = {
		"",      "checked", "journaled", "stopped",      "scratch",      "heap",        "unwind",
		"entry", "calls",   "installed", "revert_calls", "revert_entry", "revert_heap", "reverted"
	};
	return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

static void hexs(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
	out[2 * n] = 0;
}

static int unhexs(const char *s, uint8_t *out, size_t max)
{
	size_t n = s ? strlen(s) / 2 : 0;
	if (!s || n > max)
		return -1;
	return hp_unhex(s, n, out) < 0 ? -1 : (int)n;
}

static json_t *hexval(uint64_t v)
{
	char b[24];
	snprintf(b, sizeof(b), "0x%" PRIx64, v);
	return json_string(b);
}

static uint64_t jx(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);
	if (json_is_integer(v))
		return (uint64_t)json_integer_value(v);
	const char *s = json_string_value(v);
	return s ? strtoull(s, NULL, 0) : 0;
}

static json_t *undo_record(const struct hp_undo *u)
{
	static const char *const kinds[] = { "scratch", "entry", "call" };
	size_t len = u->big_len ? u->big_len : u->len;
	char *o = malloc(2 * len + 1), *n = malloc(2 * len + 1);
	json_t *r = NULL;

	if (o && n) {
		hexs(u->big_len ? u->big_orig : u->orig, len, o);
		hexs(u->big_len ? u->big_now : u->now, len, n);
		r = json_pack("{s:s, s:s, s:o, s:i, s:s, s:s}", "op", "undo", "kind", kinds[u->kind], "addr",
			      hexval(u->addr), "len", (int)len, "orig", o, "now", n);
	}
	free(o);
	free(n);
	return r;
}

static int undo_from_record(const json_t *r, struct hp_undo *u)
{
	const char *kind = json_string_value(json_object_get(r, "kind"));
	size_t len = (size_t)jx(r, "len");

	memset(u, 0, sizeof(*u));
	u->addr = jx(r, "addr");
	if (!kind)
		return -EINVAL;
	if (!strcmp(kind, "scratch")) {
		u->kind = HP_UNDO_SCRATCH;
		u->big_len = len;
		u->big_orig = malloc(len + 1);
		u->big_now = malloc(len + 1);
		if (!u->big_orig || !u->big_now ||
		    unhexs(json_string_value(json_object_get(r, "orig")), u->big_orig, len) != (int)len) {
			hp_undo_free(u);
			return -EINVAL;
		}
		unhexs(json_string_value(json_object_get(r, "now")), u->big_now, len);
		return 0;
	}
	u->kind = !strcmp(kind, "entry") ? HP_UNDO_ENTRY : HP_UNDO_CALL;
	u->len = (uint8_t)len;
	if (len > HP_UNDO_MAX || unhexs(json_string_value(json_object_get(r, "orig")), u->orig, len) != (int)len ||
	    unhexs(json_string_value(json_object_get(r, "now")), u->now, len) != (int)len)
		return -EINVAL;
	return 0;
}

/* An install or revert in progress. */
struct op {
	const struct hp_iplan *p;
	const struct hp_install_opts *o;
	struct hp_patch_target t;
	bool have_target;
	struct hp_journal j;
	int64_t delta; /* running address - planned address */
	struct hp_heap heap;
	bool heap_mapped, unwind_intent, unwind_unknown;
	uint8_t *image;
	size_t image_len;
	struct hp_undo scratch;
	bool scratch_applied;
	struct hp_undo *writes; /* entry first, then call sites */
	size_t nwrites;
	uint8_t entry_block[256]; /* the root's entry block as it was, for moving PCs */
	uint32_t entry_block_len;
	struct hp_install_result *res;
	void (*progress)(void *ctx, enum hp_install_step s, const char *detail);
	void *pctx;
};

static void step(struct op *x, enum hp_install_step s, const char *detail)
{
	if (x->progress)
		x->progress(x->pctx, s, detail ? detail : "");
}

static int jadd(struct op *x, json_t *rec, char *err, size_t errlen)
{
	return hp_journal_add(&x->j, rec, err, errlen);
}

/* The copy's address of an instruction boundary inside the root's entry
 * block (decoding the original and the copy side by side), or 0. */
static uint64_t map_pc(void *ctx, uint64_t pc)
{
	struct op *x = ctx;
	const struct hp_imember *root = &x->p->members[0];
	uint64_t entry = root->addr + (uint64_t)x->delta;
	const struct hp_iblock *b0 = NULL;

	for (size_t i = 0; i < root->nblocks; i++)
		if (root->blocks[i].offset == 0)
			b0 = &root->blocks[i];
	if (!b0 || !b0->new_size || pc <= entry || pc >= entry + x->entry_block_len)
		return 0;
	uint64_t copy = b0->new_addr - x->p->base;
	const uint8_t *c = x->image + copy;
	uint32_t oo = 0, co = 0;
	while (oo < x->entry_block_len && co < b0->new_size) {
		struct hp_isa_insn a, b;
		if (hp_isa_decode(x->entry_block + oo, x->entry_block_len - oo, entry + oo, &a) < 0 ||
		    hp_isa_decode(c + co, b0->new_size - co, x->heap.addr + copy + co, &b) < 0)
			return 0;
		if (a.cls != HP_IC_OTHER || b.cls != HP_IC_OTHER)
			return 0; /* the block's branch may be laid out otherwise: wait instead */
		oo += a.len;
		co += b.len;
		if (entry + oo == pc)
			return x->heap.addr + copy + co;
	}
	return 0;
}

/* ---- Revert ---------------------------------------------------------- */

static int live_state(struct op *x, const struct hp_undo *u)
{
	uint8_t live[HP_UNDO_MAX];
	size_t len = u->big_len ? u->big_len : u->len;
	if (u->big_len) {
		uint8_t *b = malloc(len);
		int s = -1;
		if (b && x->t.ops->read(&x->t, u->addr, b, len) == 0)
			s = !memcmp(b, u->big_orig, len) ? 0 : 1;
		free(b);
		return s;
	}
	if (x->t.ops->read(&x->t, u->addr, live, len) < 0)
		return -1;
	if (!memcmp(live, u->orig, len))
		return 0; /* original */
	if (!memcmp(live, u->now, len))
		return 1; /* changed by us */
	return 2;         /* neither */
}

static int undo_all_inner(struct op *x, char *err, size_t errlen);

/* Undo what x made, calls first, then the entry, then the heap. The target
 * is quiesced. Scratch bytes go back whatever happens. */
static int undo_all(struct op *x, char *err, size_t errlen)
{
	int r = undo_all_inner(x, err, errlen);
	if (r < 0 && x->scratch_applied) {
		char e2[256];
		if (x->t.ops->restore(&x->t, &x->scratch, e2, sizeof(e2)) == 0)
			x->scratch_applied = false;
	}
	return r;
}

static int undo_all_inner(struct op *x, char *err, size_t errlen)
{
	char why[300];
	int r, bad = 0;
	double t0 = hp_now();

	step(x, HP_STEP_REVERT_CALLS, NULL);
	for (size_t k = x->nwrites; k-- > 0;) {
		struct hp_undo *u = &x->writes[k];
		if (u->kind == HP_UNDO_ENTRY) {
			if (x->res)
				x->res->revert_calls_ms = (hp_now() - t0) * 1e3;
			step(x, HP_STEP_REVERT_ENTRY, NULL);
		}
		double t1 = hp_now();
		int s = live_state(x, u);
		if (s == 1) {
			if ((r = x->t.ops->restore(&x->t, u, err, errlen)) < 0)
				return r;
			jadd(x, json_pack("{s:s, s:o}", "op", "restored", "addr", hexval(u->addr)), why, sizeof(why));
		} else if (s == 2 && !bad++) {
			snprintf(err, errlen,
				 "the bytes at 0x%" PRIx64
				 " are neither the original nor the installed ones: "
				 "something else changed them; they were left alone",
				 u->addr);
		}
		if (u->kind == HP_UNDO_ENTRY && x->res)
			x->res->revert_entry_us = (hp_now() - t1) * 1e6;
	}
	step(x, HP_STEP_REVERT_HEAP, NULL);
	if (x->heap_mapped) {
		uint64_t hi = x->heap.addr + x->heap.len;
		int busy = 0;
		for (int k = 0; k < 40 && (busy = x->t.ops->in_use(&x->t, x->heap.addr, hi, why, sizeof(why))) == 1;
		     k++) {
			/* Threads in the copy leave it as their calls return. */
			x->t.ops->resume(&x->t);
			usleep(k < 10 ? 200 : 2000);
			if ((r = x->t.ops->quiesce(&x->t, err, errlen)) < 0)
				return r;
			x->scratch_applied = false;
		}
		if (!busy && x->unwind_unknown) {
			busy = 1;
			snprintf(
				why, sizeof(why),
				"the registration of its unwind data was interrupted, so whether the unwinder holds it "
				"is unknown");
		}
		if (!busy) {
			if (!x->scratch_applied) {
				/* The injection trampolines, for the unmap and the deregistration. */
				hp_undo_free(&x->scratch);
				if ((r = x->t.ops->prepare_scratch(&x->t, &x->scratch, err, errlen)) < 0)
					return r;
				if (x->scratch.big_len || x->scratch.len) {
					if ((r = jadd(x, undo_record(&x->scratch), err, errlen)) < 0 ||
					    (r = x->t.ops->apply(&x->t, &x->scratch, NULL, NULL, err, errlen)) < 0)
						return r;
				}
				x->scratch_applied = true;
			}
			if (x->heap.unwind_registered) {
				/* Armed, then journaled, then called: a revert that finds the
				 * record without its result asks unwind_settle. */
				if ((r = x->t.ops->unwind_arm(&x->t, &x->heap, err, errlen)) < 0 ||
				    (r = jadd(x, json_pack("{s:s}", "op", "unwind_deregister"), err, errlen)) < 0 ||
				    (r = x->t.ops->unwind_deregister(&x->t, &x->heap, err, errlen)) < 0)
					return r;
				jadd(x, json_pack("{s:s}", "op", "unwind_deregistered"), why, sizeof(why));
			}
			if ((r = x->t.ops->heap_release(&x->t, &x->heap, err, errlen)) < 0)
				return r;
			x->heap_mapped = false;
			jadd(x, json_pack("{s:s}", "op", "heap_released"), why, sizeof(why));
		} else {
			if (x->res) {
				x->res->heap_kept = true;
				snprintf(x->res->heap_note, sizeof(x->res->heap_note),
					 "the code heap at 0x%" PRIx64 " stays mapped: %s", x->heap.addr, why);
			}
			jadd(x, json_pack("{s:s, s:s}", "op", "heap_kept", "why", why), why, sizeof(why));
		}
	}
	if (x->scratch_applied) {
		if ((r = x->t.ops->restore(&x->t, &x->scratch, err, errlen)) < 0)
			return r;
		x->scratch_applied = false;
	}
	if (x->res)
		x->res->revert_total_ms = (hp_now() - t0) * 1e3;
	return bad ? -EIO : 0;
}

static void op_free(struct op *x)
{
	for (size_t k = 0; k < x->nwrites; k++)
		hp_undo_free(&x->writes[k]);
	free(x->writes);
	hp_undo_free(&x->scratch);
	free(x->image);
	if (x->have_target)
		x->t.ops->close(&x->t);
	hp_journal_close(&x->j);
}

static void plan_path_of(const char *journal, char *out, size_t len)
{
	snprintf(out, len, "%.*s.plan.json", (int)(strlen(journal) - strlen(".journal")), journal);
}

/* ---- Install ---------------------------------------------------------- */

static int add_write(struct op *x, const struct hp_undo *u)
{
	struct hp_undo *v = realloc(x->writes, (x->nwrites + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	x->writes = v;
	v[x->nwrites++] = *u;
	return 0;
}

static int find_journal(const char *dir, int pid, uint64_t start, const char *root, char *path, size_t plen);

static int check_plan(struct op *x, char *err, size_t errlen)
{
	const struct hp_iplan *p = x->p;
	const struct hp_install_opts *o = x->o;
	int r;

	if (!p->hash[0] || strcmp(p->hash, p->computed)) {
		snprintf(err, errlen,
			 "the plan was altered: its code hashes to %s, the plan states %s; only the code as planned "
			 "(and approved) is installed",
			 p->computed, p->hash[0] ? p->hash : "no hash");
		return -EBADMSG;
	}
	if (o->approved_hash && strcmp(o->approved_hash, p->computed)) {
		snprintf(err, errlen, "the plan's code hash %s is not the approved hash %s", p->computed,
			 o->approved_hash);
		return -EACCES;
	}
	if (o->approve && (r = o->approve(o->approve_ctx, p, err, errlen)) < 0)
		return r;
	/* The root's entry takes a 5-byte jump: no other block may start in it. */
	const struct hp_imember *root = &p->members[0];
	if (root->size < 5) {
		snprintf(err, errlen, "%s is %u bytes long: too short for the jump to its copy", root->name,
			 root->size);
		return -EINVAL;
	}
	for (size_t i = 0; i < root->nblocks; i++)
		if (root->blocks[i].offset > 0 && root->blocks[i].offset < 5) {
			snprintf(err, errlen,
				 "%s has a block at +%u, inside the 5 bytes its entry jump would cover: a thread "
				 "running the original could branch into the jump",
				 root->name, root->blocks[i].offset);
			return -EINVAL;
		}
	return 0;
}

static int check_target(struct op *x, char *err, size_t errlen)
{
	const struct hp_iplan *p = x->p;
	uint64_t bias;
	int r;

	if ((r = x->t.ops->module_base(&x->t, p->module, p->build_id, &bias, err, errlen)) < 0)
		return r == -ENOENT ? -ESTALE : r;
	x->delta = (int64_t)(bias - p->module_base);
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct hp_imember *mb = &p->members[i];
		uint8_t *b = malloc(mb->size + 1);
		char dg[65] = "";
		if (!b)
			return -ENOMEM;
		r = x->t.ops->read(&x->t, mb->addr + (uint64_t)x->delta, b, mb->size);
		if (r == 0)
			hp_bytes_digest(b, mb->size, dg);
		if (i == 0)
			memcpy(x->entry_block, b,
			       x->entry_block_len =
				       mb->size < sizeof(x->entry_block) ? mb->size : sizeof(x->entry_block));
		free(b);
		if (r < 0) {
			snprintf(err, errlen, "cannot read %s in %s: %s", mb->name, x->t.desc, strerror(-r));
			return r == -EIO ? -ESRCH : r;
		}
		if (strcmp(dg, mb->digest)) {
			snprintf(err, errlen,
				 "%s in %s is not the code the plan was made from (its bytes hash to %.16s..., the "
				 "plan's to %.16s...): the target changed since planning%s",
				 mb->name, x->t.desc, dg, mb->digest,
				 i == 0 ? " (or a copy is installed already)" : "");
			return -ESTALE;
		}
	}
	/* The entry block, for moving threads stopped inside the jump's bytes. */
	for (size_t i = 0; i < p->members[0].nblocks; i++)
		if (p->members[0].blocks[i].offset == 0 && p->members[0].blocks[i].size < x->entry_block_len)
			x->entry_block_len = p->members[0].blocks[i].size;
	return 0;
}

/* Direct call sites of the root in the model (running addresses). */
static size_t call_sites(const struct hp_model *m, uint64_t entry, uint64_t **out)
{
	size_t n = 0, cap = 0;
	*out = NULL;
	for (size_t mi = 0; m && mi < m->nmods; mi++) {
		const struct hp_module *mod = &m->mods[mi];
		for (size_t c = 0; c < mod->ncalls; c++) {
			if (mod->calls[c].target != entry)
				continue;
			/* The function owning the call: find by index ranges. */
			const struct hp_function *f = NULL;
			size_t lo = 0, hi = mod->nfuncs;
			while (lo < hi) {
				size_t mid = (lo + hi) / 2;
				const struct hp_function *g = &mod->funcs[mid];
				if (c < g->call_start)
					hi = mid;
				else if (c >= g->call_start + g->ncalls)
					lo = mid + 1;
				else {
					f = g;
					break;
				}
			}
			if (!f)
				continue;
			uint64_t site = f->addr + mod->calls[c].site;
			if (n == cap) {
				uint64_t *v = realloc(*out, (cap = cap ? cap * 2 : 64) * sizeof(*v));
				if (!v)
					return n;
				*out = v;
			}
			(*out)[n++] = site;
		}
	}
	return n;
}

static int install_inner(struct op *x, char *err, size_t errlen)
{
	const struct hp_iplan *p = x->p;
	const struct hp_install_opts *o = x->o;
	struct hp_install_result *res = x->res;
	uint64_t entry = p->members[0].addr + (uint64_t)x->delta, *sites = NULL;
	size_t nsites = 0;
	double t0 = hp_now();
	int r;

	if ((r = x->t.ops->quiesce(&x->t, err, errlen)) < 0)
		return r;
	res->stopped_ms = x->t.quiesce_seconds * 1e3;
	step(x, HP_STEP_STOPPED, x->t.desc);
	/* Scratch bytes the target needs to work. */
	if ((r = x->t.ops->prepare_scratch(&x->t, &x->scratch, err, errlen)) < 0)
		return r;
	if (x->scratch.big_len || x->scratch.len) {
		if ((r = jadd(x, undo_record(&x->scratch), err, errlen)) < 0)
			return r;
		x->scratch_applied = true; /* from here on it may be written */
		if ((r = x->t.ops->apply(&x->t, &x->scratch, NULL, NULL, err, errlen)) < 0)
			return r;
	}
	step(x, HP_STEP_SCRATCH, NULL);
	/* The heap: within rel32 reach of every reference out of the copy and
	 * of the entry's jump; call sites join where they fit. */
	x->image_len = p->unwind_len ? p->unwind_off + p->unwind_len : p->code_len;
	x->heap.len = (x->image_len + HEAP_ALIGN - 1) & ~(size_t)(HEAP_ALIGN - 1);
	int64_t lo = INT64_MIN, hi = INT64_MAX;
	int64_t span = (int64_t)x->heap.len + (1 << 20);
#define NEED(a)                                 \
	do {                                    \
		int64_t a_ = (int64_t)(a);      \
		if (a_ - REACH + span > lo)     \
			lo = a_ - REACH + span; \
		if (a_ + REACH - span < hi)     \
			hi = a_ + REACH - span; \
	} while (0)
	NEED(entry);
	for (size_t i = 0; i < p->nrelocs; i++)
		NEED(p->relocs[i].target + (uint64_t)x->delta);
	if (lo < 0)
		lo = 0;
	if (o->patch_calls && o->m) {
		uint64_t *all = NULL;
		size_t nall = call_sites(o->m, entry, &all);
		sites = malloc((nall + 1) * sizeof(*sites));
		for (size_t i = 0; sites && i < nall; i++) {
			/* Inside the entry's jump, or out of reach: left calling the entry. */
			if ((all[i] + 5 > entry && all[i] < entry + 5) || (int64_t)all[i] - REACH + span > hi ||
			    (int64_t)all[i] + REACH - span < lo) {
				res->call_sites_skipped++;
				continue;
			}
			sites[nsites++] = all[i];
		}
		free(all);
		for (size_t i = 0; i < nsites; i++)
			NEED(sites[i]);
	}
#undef NEED
	if (lo >= hi) {
		snprintf(err, errlen, "the copy's references span more than 2 GiB: no place reaches them all");
		free(sites);
		return -ERANGE;
	}
	if ((r = x->t.ops->heap_place(&x->t, (uint64_t)lo, (uint64_t)hi, entry, x->heap.len, &x->heap.addr, err,
				      errlen)) < 0) {
		free(sites);
		return r;
	}
	x->image = calloc(1, x->heap.len);
	struct hp_plan tmp = {
		.base = p->base, .code = p->code, .code_len = p->code_len, .relocs = p->relocs, .nrelocs = p->nrelocs
	};
	if (!x->image || hp_plan_relocate(&tmp, x->heap.addr, x->delta, x->image, err, errlen) < 0) {
		free(sites);
		return x->image ? -ERANGE : -ENOMEM;
	}
	if (p->unwind_len)
		memcpy(x->image + p->unwind_off, p->unwind, p->unwind_len);
	x->heap.data_len = p->unwind_len ? 1 : 0; /* asks for a data area; the target sizes it */
	x->heap.unwind = p->unwind_len ? x->heap.addr + p->unwind_off : 0;
	if ((r = jadd(x,
		      json_pack("{s:s, s:o, s:i, s:o}", "op", "heap", "addr", hexval(x->heap.addr), "len",
				(int)x->heap.len, "unwind", hexval(x->heap.unwind)),
		      err, errlen)) < 0) {
		free(sites);
		return r;
	}
	x->heap_mapped = true; /* may be, from here on */
	if ((r = x->t.ops->heap_map(&x->t, &x->heap, x->image, err, errlen)) < 0) {
		free(sites);
		return r;
	}
	jadd(x,
	     json_pack("{s:s, s:o, s:i}", "op", "heap_mapped", "data", hexval(x->heap.data), "data_len",
		       (int)x->heap.data_len),
	     err, errlen);
	res->heap = x->heap.addr;
	res->heap_len = x->heap.len;
	step(x, HP_STEP_HEAP, NULL);
	/* Unwind data, registered where the process has an unwinder. */
	if (x->heap.unwind) {
		if ((r = jadd(x, json_pack("{s:s}", "op", "unwind_register"), err, errlen)) < 0) {
			free(sites);
			return r;
		}
		x->unwind_unknown = true;
		if ((r = x->t.ops->unwind_register(&x->t, &x->heap, err, errlen)) < 0) {
			/* Refused before the call was made (-EBUSY): nothing registered. */
			if (r == -EBUSY)
				x->unwind_unknown = false;
			free(sites);
			return r;
		}
		x->unwind_unknown = false;
		jadd(x, json_pack("{s:s, s:b}", "op", "unwind_registered", "registered", x->heap.unwind_registered),
		     err, errlen);
		res->unwind_registered = x->heap.unwind_registered;
		snprintf(res->unwind_note, sizeof(res->unwind_note), "%s",
			 x->heap.unwind_registered ? "registered with the process's unwinder (__register_frame_info)" :
						     "the process has no unwinder loaded (libgcc_s): nothing to "
						     "register");
	} else {
		snprintf(res->unwind_note, sizeof(res->unwind_note), "the plan has no unwind data");
	}
	step(x, HP_STEP_UNWIND, NULL);
	/* The entry. */
	struct hp_undo u;
	uint64_t new_entry = x->heap.addr + (p->members[0].new_addr - p->base);
	double te = hp_now();
	if ((r = x->t.ops->prepare_entry(&x->t, entry, new_entry, &u, err, errlen)) < 0 || (r = add_write(x, &u)) < 0 ||
	    (r = jadd(x, undo_record(&u), err, errlen)) < 0) {
		free(sites);
		return r;
	}
	if ((r = x->t.ops->apply(&x->t, &x->writes[x->nwrites - 1], map_pc, x, err, errlen)) < 0) {
		free(sites);
		return r;
	}
	res->entry_us = (hp_now() - te) * 1e6;
	res->entry = entry;
	res->new_entry = new_entry;
	step(x, HP_STEP_ENTRY, NULL);
	/* Call sites: journaled together, then written. */
	double tc = hp_now();
	size_t first = x->nwrites;
	json_t **recs = calloc(nsites + 1, sizeof(*recs));
	for (size_t i = 0; recs && i < nsites; i++) {
		if (x->t.ops->prepare_call(&x->t, sites[i], new_entry, &u, err, errlen) < 0) {
			res->call_sites_skipped++;
			continue;
		}
		if ((r = add_write(x, &u)) < 0)
			break;
		recs[x->nwrites - 1 - first] = undo_record(&u);
	}
	free(sites);
	if (!recs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (x->nwrites > first) {
		r = hp_journal_append(&x->j, recs, x->nwrites - first, err, errlen);
		for (size_t i = 0; i < x->nwrites - first; i++)
			json_decref(recs[i]);
		if (r < 0) {
			/* Not journaled: not written. */
			for (size_t k = first; k < x->nwrites; k++)
				hp_undo_free(&x->writes[k]);
			x->nwrites = first;
			free(recs);
			return r;
		}
		for (size_t k = first; k < x->nwrites; k++)
			if ((r = x->t.ops->apply(&x->t, &x->writes[k], NULL, NULL, err, errlen)) < 0) {
				free(recs);
				return r;
			}
	}
	free(recs);
	res->call_sites = x->nwrites - first;
	res->calls_ms = (hp_now() - tc) * 1e3;
	step(x, HP_STEP_CALLS, NULL);
	/* The scratch bytes go back; then the install is complete. */
	if (x->scratch_applied) {
		if ((r = x->t.ops->restore(&x->t, &x->scratch, err, errlen)) < 0)
			return r;
		x->scratch_applied = false;
	}
	if ((r = jadd(x,
		      json_pack("{s:s, s:o, s:i}", "op", "installed", "new_entry", hexval(new_entry), "calls",
				(int)res->call_sites),
		      err, errlen)) < 0)
		return r;
	x->t.ops->resume(&x->t);
	res->pcs_moved = x->t.pcs_moved;
	res->waits = x->t.waits;
	res->total_ms = (hp_now() - t0) * 1e3;
	step(x, HP_STEP_INSTALLED, NULL);
	return 0;
}

static void sanitize(const char *in, char *out, size_t len)
{
	size_t k = 0;
	for (; *in && k + 1 < len; in++)
		out[k++] = (*in >= 'a' && *in <= 'z') || (*in >= 'A' && *in <= 'Z') || (*in >= '0' && *in <= '9') ||
					   *in == '_' ?
				   *in :
				   '_';
	out[k] = 0;
}

bool hp_install_id_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (!n || n > HP_INSTALL_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '-' || s[i] == '_'))
			return false;
	return true;
}

int hp_install(const struct hp_iplan *p, const struct hp_install_opts *o, struct hp_install_result *res, char *err,
	       size_t errlen)
{
	struct op x = { .p = p, .o = o, .res = res, .progress = o->progress, .pctx = o->progress_ctx };
	char dir[4096], name[128], rootname[24], path[4200];
	uint32_t rnd = 0;
	int pid = o->pid ? o->pid : p->pid, r;
	double t0 = hp_now();

	memset(res, 0, sizeof(*res));
	x.j.fd = -1;
	if (pid <= 0) {
		snprintf(err, errlen, "the plan names no process: give --pid");
		return -EINVAL;
	}
	if (o->id && !hp_install_id_valid(o->id)) {
		snprintf(err, errlen, "an install id is 1 to %d letters, digits, '-' or '_'", HP_INSTALL_ID_MAX);
		return -EINVAL;
	}
	if ((r = check_plan(&x, err, errlen)) < 0)
		return r;
	if ((r = hp_patch_target_process(pid, o->pid && o->pid != p->pid ? 0 : p->start_time, &x.t, err, errlen)) < 0)
		return r;
	x.have_target = true;
	snprintf(dir, sizeof(dir), "%s/replace", o->state_dir);
	/* One install per root and process. */
	uint64_t start = x.t.instance;
	if (find_journal(dir, pid, start, p->root, path, sizeof(path)) == 0) {
		if (!o->replace) {
			snprintf(err, errlen,
				 "%s is installed in %s already (%s): revert it first, or install a second pass with "
				 "--replace",
				 p->root, x.t.desc, path);
			op_free(&x);
			return -EEXIST;
		}
		struct hp_install_result rr;
		x.t.ops->close(&x.t);
		x.have_target = false;
		if ((r = hp_revert(o->state_dir, pid, p->root, &rr, o->progress, o->progress_ctx, err, errlen)) < 0)
			return r;
		if ((r = hp_patch_target_process(pid, start, &x.t, err, errlen)) < 0)
			return r;
		x.have_target = true;
	}
	if ((r = check_target(&x, err, errlen)) < 0) {
		op_free(&x);
		return r;
	}
	res->check_ms = (hp_now() - t0) * 1e3;
	step(&x, HP_STEP_CHECKED, x.t.desc);
	/* The journal and the plan, durable before anything changes. */
	if (o->id) {
		snprintf(res->id, sizeof(res->id), "%s", o->id);
	} else {
		getrandom(&rnd, sizeof(rnd), 0);
		sanitize(p->root, rootname, sizeof(rootname));
		snprintf(res->id, sizeof(res->id), "hotpath-%d-%s-%08x", pid, rootname, rnd);
	}
	snprintf(x.heap.name, sizeof(x.heap.name), "%s", res->id);
	snprintf(name, sizeof(name), "%s.journal", res->id);
	if ((r = hp_journal_create(dir, name, &x.j, err, errlen)) < 0) {
		op_free(&x);
		return r;
	}
	snprintf(res->journal, sizeof(res->journal), "%s", x.j.path);
	plan_path_of(x.j.path, path, sizeof(path));
	json_t *begin = json_pack("{s:s, s:i, s:s, s:i, s:I, s:s, s:s, s:s, s:s, s:I, s:o, s:o, s:s}", "op", "begin",
				  "version", 1, "id", res->id, "pid", pid, "start_time", (json_int_t)start, "root",
				  p->root, "module", p->module, "build_id", p->build_id, "hash", p->computed, "delta",
				  (json_int_t)x.delta, "entry", hexval(p->members[0].addr + (uint64_t)x.delta), "base",
				  hexval(p->base), "target", x.t.ops->kind);
	if ((r = hp_write_file_durably(path, p->text, p->text_len, err, errlen)) < 0 ||
	    (r = jadd(&x, begin, err, errlen)) < 0) {
		unlink(path);
		hp_journal_retire(&x.j);
		op_free(&x);
		return r;
	}
	step(&x, HP_STEP_JOURNALED, x.j.path);
	r = install_inner(&x, err, errlen);
	if (r < 0) {
		/* Undo what was done, then say why it failed. */
		char e2[512];
		int alive = x.t.ops->alive(&x.t);
		int u = !alive ? 0 : x.t.ops->quiesce(&x.t, e2, sizeof(e2));
		if (alive && u == 0)
			u = undo_all(&x, e2, sizeof(e2));
		x.t.ops->resume(&x.t);
		if (u == 0 && !(res->heap_kept)) {
			jadd(&x, json_pack("{s:s}", "op", "reverted"), e2, sizeof(e2));
			hp_journal_retire(&x.j);
			unlink(path);
		} else if (u < 0) {
			size_t n = strlen(err);
			snprintf(err + n, errlen - n, "; undoing it failed too (%s): the journal %s keeps what to undo",
				 e2, x.j.path);
		}
		op_free(&x);
		return r;
	}
	op_free(&x);
	return 0;
}

/* ---- Journals read back ------------------------------------------------ */

struct jstate {
	json_t *recs;
	const json_t *begin;
	bool installed, revert, reverted, heap_mapped, heap_released, heap_kept, unwind_intent, unwind_done,
		dereg_intent, unwind_registered;
	struct hp_heap heap;
	const json_t **undo;
	size_t nundo;
	char kept_why[256];
};

static int jstate_read(const char *path, struct jstate *s, char *err, size_t errlen)
{
	bool torn;
	size_t i;
	const json_t *r;

	memset(s, 0, sizeof(*s));
	if (hp_journal_read(path, &s->recs, &torn, err, errlen) < 0)
		return -EIO;
	s->undo = calloc(json_array_size(s->recs) + 1, sizeof(*s->undo));
	json_array_foreach(s->recs, i, r)
	{
		const char *op = json_string_value(json_object_get(r, "op"));
		if (!op)
			continue;
		if (!strcmp(op, "begin"))
			s->begin = r;
		else if (!strcmp(op, "undo") && s->undo)
			s->undo[s->nundo++] = r;
		else if (!strcmp(op, "heap")) {
			s->heap.addr = jx(r, "addr");
			s->heap.len = (size_t)jx(r, "len");
			s->heap.unwind = jx(r, "unwind");
			s->heap_mapped = true;
		} else if (!strcmp(op, "heap_mapped")) {
			s->heap.data = jx(r, "data");
			s->heap.data_len = (size_t)jx(r, "data_len");
		} else if (!strcmp(op, "unwind_register"))
			s->unwind_intent = true;
		else if (!strcmp(op, "unwind_registered")) {
			s->unwind_done = true;
			s->unwind_registered = json_is_true(json_object_get(r, "registered"));
		} else if (!strcmp(op, "unwind_deregister"))
			s->dereg_intent = true;
		else if (!strcmp(op, "unwind_deregistered")) {
			s->unwind_registered = false;
			s->dereg_intent = false;
		} else if (!strcmp(op, "installed"))
			s->installed = true;
		else if (!strcmp(op, "revert"))
			s->revert = true;
		else if (!strcmp(op, "heap_released"))
			s->heap_released = true;
		else if (!strcmp(op, "heap_kept")) {
			s->heap_kept = true;
			snprintf(s->kept_why, sizeof(s->kept_why), "%s",
				 json_string_value(json_object_get(r, "why")) ?: "");
		} else if (!strcmp(op, "reverted"))
			s->reverted = true;
	}
	if (!s->begin) {
		snprintf(err, errlen, "%s has no beginning record", path);
		return -EINVAL;
	}
	return 0;
}

static void jstate_free(struct jstate *s)
{
	json_decref(s->recs);
	free(s->undo);
}

static int list_journals(const char *dir, char ***out, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t cap = 0;

	*out = NULL;
	*n = 0;
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 9 || strcmp(e->d_name + l - 8, ".journal"))
			continue;
		if (*n == cap) {
			char **v = realloc(*out, (cap = cap ? cap * 2 : 16) * sizeof(*v));
			if (!v)
				break;
			*out = v;
		}
		char *p = malloc(strlen(dir) + l + 2);
		if (!p)
			break;
		sprintf(p, "%s/%s", dir, e->d_name);
		(*out)[(*n)++] = p;
	}
	closedir(d);
	return 0;
}

static int find_journal(const char *dir, int pid, uint64_t start, const char *root, char *path, size_t plen)
{
	char **js, e[256];
	size_t n;
	int found = -ENOENT;

	if (list_journals(dir, &js, &n) < 0)
		return -ENOENT;
	for (size_t i = 0; i < n; i++) {
		struct jstate s;
		if (found < 0 && jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			if ((int)jx(s.begin, "pid") == pid && jx(s.begin, "start_time") == start &&
			    !strcmp(json_string_value(json_object_get(s.begin, "root")) ?: "", root) && !s.reverted) {
				snprintf(path, plen, "%s", js[i]);
				found = 0;
			}
			jstate_free(&s);
		}
		free(js[i]);
	}
	free(js);
	return found;
}

int hp_installed_list(const char *state_dir, struct hp_installed **out, size_t *n, char *err, size_t errlen)
{
	char dir[4096], **js;
	size_t nj;

	*out = NULL;
	*n = 0;
	snprintf(dir, sizeof(dir), "%s/replace", state_dir);
	if (list_journals(dir, &js, &nj) < 0) {
		snprintf(err, errlen, "cannot read %s: %s", dir, strerror(errno));
		return -EIO;
	}
	*out = calloc(nj + 1, sizeof(**out));
	for (size_t i = 0; i < nj; i++) {
		struct jstate s;
		char e[256];
		if (*out && jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			struct hp_installed *h = &(*out)[(*n)++];
			snprintf(h->id, sizeof(h->id), "%s", json_string_value(json_object_get(s.begin, "id")) ?: "");
			snprintf(h->journal, sizeof(h->journal), "%s", js[i]);
			plan_path_of(js[i], h->plan_path, sizeof(h->plan_path));
			h->pid = (int)jx(s.begin, "pid");
			h->start_time = jx(s.begin, "start_time");
			snprintf(h->root, sizeof(h->root), "%s",
				 json_string_value(json_object_get(s.begin, "root")) ?: "");
			snprintf(h->module, sizeof(h->module), "%s",
				 json_string_value(json_object_get(s.begin, "module")) ?: "");
			snprintf(h->hash, sizeof(h->hash), "%s",
				 json_string_value(json_object_get(s.begin, "hash")) ?: "");
			h->entry = jx(s.begin, "entry");
			h->base = jx(s.begin, "base");
			h->heap = s.heap.addr;
			h->heap_len = s.heap.len;
			h->writes = 0;
			for (size_t k = 0; k < s.nundo; k++) {
				const char *kind = json_string_value(json_object_get(s.undo[k], "kind")) ?: "";
				if (strcmp(kind, "scratch"))
					h->writes++;
				if (!strcmp(kind, "entry"))
					h->new_entry = 0;
			}
			json_t *r;
			size_t k;
			json_array_foreach(s.recs, k, r)
			{
				if (!strcmp(json_string_value(json_object_get(r, "op")) ?: "", "installed"))
					h->new_entry = jx(r, "new_entry");
			}
			uint64_t st = 0;
			bool alive = hp_process_start_time(h->pid, &st) == 0 && st == h->start_time;
			const char *state = !alive      ? "process_gone" :
					    s.heap_kept ? "heap_kept" :
					    s.revert    ? "reverting" :
					    s.installed ? "installed" :
							  "installing";
			snprintf(h->state, sizeof(h->state), "%s", state);
			snprintf(h->detail, sizeof(h->detail), "%s",
				 !alive       ? "the process exited; `hotpathd revert` removes the journal" :
				 s.heap_kept  ? s.kept_why :
				 s.revert     ? "a revert was interrupted: `hotpathd revert` finishes it" :
				 !s.installed ? "an install was interrupted: `hotpathd revert` undoes it" :
						"");
			jstate_free(&s);
		}
		free(js[i]);
	}
	free(js);
	return 0;
}

/* Revert one journal's install. */
static int revert_one(const char *path, const struct hp_install_opts *o, struct hp_install_result *res, char *err,
		      size_t errlen)
{
	struct jstate s;
	struct op x = { .res = res, .progress = o->progress, .pctx = o->progress_ctx };
	char plan[4200];
	int r;

	x.j.fd = -1;
	if ((r = jstate_read(path, &s, err, errlen)) < 0)
		return r;
	plan_path_of(path, plan, sizeof(plan));
	int pid = (int)jx(s.begin, "pid");
	snprintf(res->id, sizeof(res->id), "%s", json_string_value(json_object_get(s.begin, "id")) ?: "");
	snprintf(res->journal, sizeof(res->journal), "%s", path);
	r = hp_patch_target_process(pid, jx(s.begin, "start_time"), &x.t, err, errlen);
	if (r == -ESRCH) {
		/* The process is gone, and everything it had with it. */
		jstate_free(&s);
		unlink(plan);
		unlink(path);
		return 1;
	}
	if (r < 0) {
		jstate_free(&s);
		return r;
	}
	x.have_target = true;
	if ((r = hp_journal_open(path, &x.j, err, errlen)) < 0)
		goto out;
	for (size_t k = 0; k < s.nundo; k++) {
		struct hp_undo u;
		if (undo_from_record(s.undo[k], &u) < 0) {
			snprintf(err, errlen, "record %zu of %s is malformed", k, path);
			r = -EINVAL;
			goto out;
		}
		if (u.kind == HP_UNDO_SCRATCH) {
			/* Scratch left by an interrupted operation: restored below. */
			hp_undo_free(&x.scratch);
			x.scratch = u;
			x.scratch_applied = true;
		} else if ((r = add_write(&x, &u)) < 0)
			goto out;
	}
	x.heap = s.heap;
	snprintf(x.heap.name, sizeof(x.heap.name), "%s", res->id);
	x.heap.unwind_registered = s.unwind_registered;
	x.unwind_unknown = s.unwind_intent && !s.unwind_done;
	x.heap_mapped = s.heap_mapped && !s.heap_released;
	if ((r = x.t.ops->quiesce(&x.t, err, errlen)) < 0)
		goto out;
	if (x.heap_mapped) {
		/* Is it really there? (An interrupted install may not have mapped it.) */
		struct hp_heap found = { 0 };
		if (!x.t.ops->heap_find(&x.t, res->id, &found) || !found.addr) {
			x.heap_mapped = false;
			x.unwind_unknown = false;
		} else if (!x.heap.data && found.data) {
			x.heap.data = found.data;
			x.heap.data_len = found.data_len;
		}
	}
	if (x.heap_mapped && (x.unwind_unknown || s.dereg_intent)) {
		/* A (de)registration the agent died in: did it finish? */
		bool dereg = !x.unwind_unknown;
		int k = x.t.ops->unwind_settle(&x.t, &x.heap, dereg, err, errlen);
		if (k >= 0)
			x.unwind_unknown = false; /* 1: finished, as settle set it; 0: not run */
		else if (dereg)
			x.unwind_unknown = true; /* a thread may be in it: the heap stays, a later revert asks again */
	}
	if (x.scratch_applied && x.scratch.big_len) {
		/* Scratch bytes an interrupted operation left: put them back now
		 * (fresh ones are prepared when injection is needed). */
		if (live_state(&x, &x.scratch) != 0 && (r = x.t.ops->restore(&x.t, &x.scratch, err, errlen)) < 0) {
			x.t.ops->resume(&x.t);
			goto out;
		}
		x.scratch_applied = false;
	}
	if (!s.revert)
		jadd(&x, json_pack("{s:s}", "op", "revert"), err, errlen);
	r = undo_all(&x, err, errlen);
	x.t.ops->resume(&x.t);
	if (r == 0 && !res->heap_kept) {
		char e2[200];
		jadd(&x, json_pack("{s:s}", "op", "reverted"), e2, sizeof(e2));
		hp_journal_retire(&x.j);
		unlink(plan);
	}
	step(&x, HP_STEP_REVERTED, res->heap_kept ? res->heap_note : "");
out:
	jstate_free(&s);
	op_free(&x);
	return r;
}

int hp_revert(const char *state_dir, int pid, const char *root, struct hp_install_result *res,
	      void (*progress)(void *ctx, enum hp_install_step s, const char *detail), void *ctx, char *err,
	      size_t errlen)
{
	struct hp_install_opts o = { .state_dir = state_dir, .progress = progress, .progress_ctx = ctx };
	char dir[4096], **js;
	size_t n;
	int done = 0, r = 0;

	memset(res, 0, sizeof(*res));
	snprintf(dir, sizeof(dir), "%s/replace", state_dir);
	if (list_journals(dir, &js, &n) < 0) {
		snprintf(err, errlen, "cannot read %s", dir);
		return -EIO;
	}
	for (size_t i = 0; i < n; i++) {
		struct jstate s;
		char e[256];
		if (r == 0 && jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			bool match =
				(int)jx(s.begin, "pid") == pid &&
				(!root || !strcmp(json_string_value(json_object_get(s.begin, "root")) ?: "", root));
			jstate_free(&s);
			if (match) {
				int k = revert_one(js[i], &o, res, err, errlen);
				if (k < 0)
					r = k;
				else
					done++;
			}
		}
		free(js[i]);
	}
	free(js);
	if (r == 0 && !done) {
		snprintf(err, errlen, "nothing of process %d%s%s is installed", pid, root ? " named " : "",
			 root ? root : "");
		return -ENOENT;
	}
	return r;
}

/* The journal of install id: 0 with its path, or -ENOENT. */
static int journal_of_id(const char *dir, const char *id, char *path, size_t plen, int *pid)
{
	char **js;
	size_t n;
	int r = -ENOENT;

	if (list_journals(dir, &js, &n) < 0)
		return -EIO;
	for (size_t i = 0; i < n; i++) {
		struct jstate s;
		char e[256];
		if (r == -ENOENT && jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			if (!strcmp(json_string_value(json_object_get(s.begin, "id")) ?: "", id)) {
				snprintf(path, plen, "%s", js[i]);
				*pid = (int)jx(s.begin, "pid");
				r = 0;
			}
			jstate_free(&s);
		}
		free(js[i]);
	}
	free(js);
	return r;
}

int hp_revert_id(const char *state_dir, const char *id, int *pid, struct hp_install_result *res,
		 void (*progress)(void *ctx, enum hp_install_step s, const char *detail), void *ctx, char *err,
		 size_t errlen)
{
	struct hp_install_opts o = { .state_dir = state_dir, .progress = progress, .progress_ctx = ctx };
	char dir[4096], path[4200];
	int r;

	memset(res, 0, sizeof(*res));
	*pid = 0;
	snprintf(dir, sizeof(dir), "%s/replace", state_dir);
	if ((r = journal_of_id(dir, id, path, sizeof(path), pid)) < 0) {
		snprintf(err, errlen, r == -ENOENT ? "nothing is installed under the id %s" : "cannot read %s",
			 r == -ENOENT ? id : dir);
		return r;
	}
	r = revert_one(path, &o, res, err, errlen);
	return r < 0 ? r : 0;
}

int hp_replace_recover(const char *state_dir,
		       void (*report)(void *ctx, const struct hp_installed *h, int r, const char *err), void *ctx)
{
	struct hp_install_opts o = { .state_dir = state_dir };
	struct hp_installed *ins;
	size_t n;
	int acted = 0;
	char err[1024];

	if (hp_installed_list(state_dir, &ins, &n, err, sizeof(err)) < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		struct hp_install_result res;
		if (!strcmp(ins[i].state, "installed"))
			continue;
		err[0] = 0;
		memset(&res, 0, sizeof(res));
		int r = revert_one(ins[i].journal, &o, &res, err, sizeof(err));
		acted++;
		if (report)
			report(ctx, &ins[i], r < 0 ? r : 0, r < 0 ? err : res.heap_kept ? res.heap_note : "");
	}
	free(ins);
	return acted;
}

/* ---- Installed code as measurable code -------------------------------- */

static int cmp_moved(const void *a, const void *b)
{
	const struct hp_moved_block *x = a, *y = b;
	return x->copy < y->copy ? -1 : x->copy > y->copy;
}

int hp_moved_code_of(const char *state_dir, int pid, struct hp_moved_code **out, size_t *n, char *err, size_t errlen)
{
	struct hp_installed *ins;
	size_t ni;

	*out = NULL;
	*n = 0;
	if (hp_installed_list(state_dir, &ins, &ni, err, errlen) < 0)
		return -EIO;
	*out = calloc(ni + 1, sizeof(**out));
	for (size_t i = 0; *out && i < ni; i++) {
		if (ins[i].pid != pid || strcmp(ins[i].state, "installed") || !ins[i].heap)
			continue;
		FILE *fp = fopen(ins[i].plan_path, "r");
		char *text = NULL;
		size_t len = 0;
		if (fp) {
			fseek(fp, 0, SEEK_END);
			len = (size_t)ftell(fp);
			rewind(fp);
			text = malloc(len + 1);
			if (text && fread(text, 1, len, fp) != len)
				len = 0;
			fclose(fp);
		}
		struct hp_iplan p;
		char e[256];
		if (!text || hp_iplan_parse(text, len, &p, e, sizeof(e)) < 0) {
			free(text);
			continue;
		}
		free(text);
		struct hp_moved_code *mc = &(*out)[(*n)++];
		int64_t delta = (int64_t)(ins[i].entry - p.members[0].addr);
		mc->pid = pid;
		mc->heap = ins[i].heap;
		mc->heap_len = ins[i].heap_len;
		size_t nb = 0;
		for (size_t m = 0; m < p.nmembers; m++)
			nb += p.members[m].nblocks;
		mc->blocks = calloc(nb + 1, sizeof(*mc->blocks));
		mc->fns = calloc(p.nmembers + 1, sizeof(*mc->fns));
		for (size_t m = 0; mc->fns && m < p.nmembers; m++)
			mc->fns[mc->nfns++] =
				(struct hp_moved_fn){ p.members[m].addr + (uint64_t)delta,
						      p.members[m].new_addr - p.base + mc->heap, p.members[m].size };
		for (size_t m = 0; mc->blocks && m < p.nmembers; m++)
			for (size_t b = 0; b < p.members[m].nblocks; b++) {
				const struct hp_iblock *bl = &p.members[m].blocks[b];
				mc->blocks[mc->nblocks++] = (struct hp_moved_block){
					.orig = p.members[m].addr + (uint64_t)delta + bl->offset,
					.copy = bl->new_size ? bl->new_addr - p.base + mc->heap : 0,
					.size = bl->new_size,
					.offset = bl->offset,
					.member = (uint32_t)m,
				};
			}
		if (mc->blocks)
			qsort(mc->blocks, mc->nblocks, sizeof(*mc->blocks), cmp_moved);
		hp_iplan_free(&p);
	}
	free(ins);
	return 0;
}

int hp_installed_patches(const char *state_dir, int pid, struct hp_byte_patch **out, size_t *n)
{
	char dir[4096], **js;
	size_t nj, cap = 0;

	*out = NULL;
	*n = 0;
	snprintf(dir, sizeof(dir), "%s/replace", state_dir);
	if (list_journals(dir, &js, &nj) < 0)
		return -EIO;
	for (size_t i = 0; i < nj; i++) {
		struct jstate s;
		char e[256];
		if (jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			if ((int)jx(s.begin, "pid") == pid)
				for (size_t k = 0; k < s.nundo; k++) {
					struct hp_undo u;
					if (undo_from_record(s.undo[k], &u) < 0)
						continue;
					if (u.kind != HP_UNDO_SCRATCH) {
						if (*n == cap) {
							struct hp_byte_patch *v =
								realloc(*out, (cap = cap ? cap * 2 : 16) * sizeof(*v));
							if (!v)
								break;
							*out = v;
						}
						struct hp_byte_patch *bp = &(*out)[(*n)++];
						bp->addr = u.addr;
						bp->len = u.len;
						memcpy(bp->bytes, u.orig, u.len);
					}
					hp_undo_free(&u);
				}
			jstate_free(&s);
		}
		free(js[i]);
	}
	free(js);
	return 0;
}
