// SPDX-License-Identifier: Apache-2.0
/*
 * Install/revert cycles in one process (install.h, hp_install_cycles): what
 * `hotpathd install PLAN --cycles N` runs, so N cycles cost N installs and
 * reverts, not N openings of the target's model (for the kernel, tens of
 * seconds each under emulation). Nothing here writes: every change is
 * hp_install's and hp_revert_id's, with their journal and checks; this file
 * only checks, after each revert, that every byte the install wrote reads as
 * it was before it (its journal's records give each write's original bytes)
 * and that every member hashes as planned.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/processes.h"
#include "replace/install.h"
#include "replace/install_op.h"
#include "replace/journal_state.h"
#include "replace/patch_target.h"

/* The entry and call-site writes the journal at path records (scratch bytes
 * excluded: the target restores those itself before the install ends). */
static int journal_writes(const char *path, struct hp_undo **out, size_t *n, char *err, size_t errlen)
{
	struct hp_jstate s;
	int r;

	*out = NULL;
	*n = 0;
	if ((r = hp_jstate_read(path, &s, err, errlen)) < 0)
		return r;
	*out = calloc(s.nundo + 1, sizeof(**out));
	if (!*out) {
		hp_jstate_free(&s);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t k = 0; k < s.nundo; k++) {
		struct hp_undo u;
		if (hp_undo_from_record(s.undo[k], &u) < 0) {
			snprintf(err, errlen, "record %zu of the journal is malformed", k);
			r = -EINVAL;
			break;
		}
		if (u.kind == HP_UNDO_SCRATCH) {
			hp_undo_free(&u);
			continue;
		}
		(*out)[(*n)++] = u;
	}
	hp_jstate_free(&s);
	return r;
}

/* After the revert: the bytes under each write, read as they are, are its
 * original ones. Counts into c; the first difference goes to c->why. */
static void check_restored(const struct hp_iplan *p, const struct hp_install_opts *o, const struct hp_undo *w,
			   size_t nw, struct hp_cycle *c)
{
	struct hp_op x = { .p = p, .o = o };
	bool kernel = !strcmp(p->kind, "kernel");
	int pid = kernel ? getpid() : o->pid ? o->pid : p->pid;
	uint64_t start = 0;
	char err[200];

	x.j.fd = -1;
	if (kernel)
		hp_process_start_time(pid, &start);
	if (hp_op_open_target(&x, p->kind, pid, start, err, sizeof(err)) < 0) {
		c->bytes_wrong += nw ? nw : 1;
		if (!c->why[0])
			snprintf(c->why, sizeof(c->why), "after the revert: %s", err);
		return;
	}
	for (size_t i = 0; i < nw; i++) {
		uint8_t b[HP_UNDO_MAX];
		int (*rd)(struct hp_patch_target *, uint64_t, void *, size_t) =
			x.t.ops->read_raw ? x.t.ops->read_raw : x.t.ops->read;
		c->bytes_checked += w[i].len;
		if (rd(&x.t, w[i].addr, b, w[i].len) < 0) {
			c->bytes_wrong += w[i].len;
			if (!c->why[0])
				snprintf(c->why, sizeof(c->why), "after the revert: 0x%" PRIx64 " cannot be read",
					 w[i].addr);
			continue;
		}
		for (uint8_t k = 0; k < w[i].len; k++)
			if (b[k] != w[i].orig[k]) {
				c->bytes_wrong++;
				if (!c->why[0])
					snprintf(c->why, sizeof(c->why),
						 "after the revert: the %s at 0x%" PRIx64
						 " holds 0x%02x at +%u, not its "
						 "original 0x%02x",
						 w[i].kind == HP_UNDO_ENTRY ? "entry" : "call site", w[i].addr, b[k], k,
						 w[i].orig[k]);
			}
	}
	hp_op_free(&x);
}

int hp_install_cycles(const struct hp_iplan *p, const struct hp_install_opts *o, const struct hp_cycles_opts *co,
		      struct hp_cycles_result *res, char *err, size_t errlen)
{
	double t0 = hp_now(), per_entry = 0;
	int r = 0;

	memset(res, 0, sizeof(*res));
	if (o->replace) {
		snprintf(err, errlen, "cycles install and revert the plan each time: --replace does not apply");
		return -EINVAL;
	}
	for (unsigned n = 1; n <= co->cycles; n++) {
		struct hp_cycle c = { .n = n, .check_installed = -1, .check_reverted = -1 };
		struct hp_install_result ir, rr;
		struct hp_undo *w = NULL;
		size_t nw = 0;
		int pid = 0;

		if (co->stop && co->stop(co->ctx)) {
			res->stopped = true;
			break;
		}
		double ti = hp_now();
		if ((r = hp_install(p, o, &ir, err, errlen)) < 0)
			break;
		c.install_ms = (hp_now() - ti) * 1e3;
		c.check_ms = ir.check_ms;
		c.entry_us = ir.entry_us;
		c.calls_ms = ir.calls_ms;
		c.entries = ir.entries;
		c.call_sites = ir.call_sites;
		c.heap = ir.heap;
		c.heap_len = ir.heap_len;
		/* The journal says what was written, with the original bytes: read
		 * now, while it exists (the revert removes it). */
		char jerr[200];
		if (journal_writes(ir.journal, &w, &nw, jerr, sizeof(jerr)) < 0)
			snprintf(c.why, sizeof(c.why), "the install's journal: %s", jerr);
		if (co->check) {
			char cw[200] = "";
			c.check_installed = co->check(co->ctx, &c, true, &ir, cw, sizeof(cw)) != 0;
			if (c.check_installed && !c.why[0])
				snprintf(c.why, sizeof(c.why), "while installed: %s", cw);
		}
		double tr = hp_now();
		if ((r = hp_revert_id(o->state_dir, ir.id, &pid, &rr, o->progress, o->progress_ctx, err, errlen)) < 0) {
			for (size_t i = 0; i < nw; i++)
				hp_undo_free(&w[i]);
			free(w);
			break;
		}
		c.revert_ms = (hp_now() - tr) * 1e3;
		c.revert_entry_us = rr.revert_entry_us;
		c.revert_calls_ms = rr.revert_calls_ms;
		c.heap_kept = rr.heap_kept;
		check_restored(p, o, w, nw, &c);
		for (size_t i = 0; i < nw; i++)
			hp_undo_free(&w[i]);
		free(w);
		char merr[200];
		c.members_original = hp_install_members_original(p, o, merr, sizeof(merr)) == 0;
		if (!c.members_original && !c.why[0])
			snprintf(c.why, sizeof(c.why), "after the revert: %s", merr);
		if (co->check) {
			char cw[200] = "";
			c.check_reverted = co->check(co->ctx, &c, false, &rr, cw, sizeof(cw)) != 0;
			if (c.check_reverted && !c.why[0])
				snprintf(c.why, sizeof(c.why), "%s", cw);
		}
		if (!nw && !c.why[0])
			snprintf(c.why, sizeof(c.why), "the install's journal records no write");
		bool bad =
			c.check_installed == 1 || c.check_reverted == 1 || c.bytes_wrong || !c.members_original || !nw;
		res->done++;
		res->wrong += bad;
		res->install_ms += c.install_ms;
		res->revert_ms += c.revert_ms;
		res->entry_us += c.entry_us;
		res->calls_ms += c.calls_ms;
		res->revert_entry_us += c.revert_entry_us;
		res->revert_calls_ms += c.revert_calls_ms;
		res->entries += c.entries;
		res->call_sites += c.call_sites;
		res->heaps_kept += c.heap_kept;
		if (c.entries)
			per_entry += c.install_ms * 1e3 / (double)c.entries;
		if (co->done)
			co->done(co->ctx, &c);
	}
	res->install_us_per_entry = res->done ? per_entry / res->done : 0;
	res->wall_s = hp_now() - t0;
	return r < 0 ? r : 0;
}
