// SPDX-License-Identifier: Apache-2.0
/*
 * An install or revert in progress, and undoing it (see install_op.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/grow.h"
#include "host/processes.h"
#include "model/model.h"
#include "replace/install_op.h"
#include "replace/journal_state.h"

int hp_op_open_target(struct hp_op *x, const char *kind, int pid, uint64_t start, char *err, size_t errlen)
{
	int r;

	if (kind && !strcmp(kind, "kernel")) {
		if (pid != getpid()) {
			if (!hp_process_running(pid, start)) {
				snprintf(err, errlen,
					 "process %d, which held the kernel install, exited: hotpath.ko undid it", pid);
				return -ESRCH;
			}
			snprintf(err, errlen,
				 "the kernel install is held by process %d (its /dev/hotpath): it reverts on SIGTERM, "
				 "which `hotpathd revert kernel` sends",
				 pid);
			return -EBUSY;
		}
		r = hp_patch_target_kernel(&x->t, err, errlen);
	} else {
		r = hp_patch_target_process(pid, start, &x->t, err, errlen);
	}
	x->have_target = r == 0;
	return r;
}

void hp_op_step(struct hp_op *x, enum hp_install_step s, const char *detail)
{
	if (x->progress)
		x->progress(x->pctx, s, detail ? detail : "");
}

int hp_op_record(struct hp_op *x, json_t *rec, char *err, size_t errlen)
{
	return hp_journal_add(&x->j, rec, err, errlen);
}

int hp_op_live_state(struct hp_op *x, const struct hp_undo *u)
{
	uint8_t live[HP_UNDO_MAX], raw[HP_UNDO_MAX];
	size_t len = u->big_len ? u->big_len : u->len;
	if (u->big_len) {
		uint8_t *b = malloc(len);
		int s = -1;
		if (b && x->t.ops->read(&x->t, u->addr, b, len) == 0)
			s = !memcmp(b, u->big_orig, len) ? 0 : 1;
		free(b);
		return s;
	}
	/* Our own bytes first, as they are: the written ones may hold 0xcc,
	 * which the target's read would take for a breakpoint and hide. */
	bool have_raw = x->t.ops->read_raw && x->t.ops->read_raw(&x->t, u->addr, raw, len) == 0;
	if (have_raw && !memcmp(raw, u->now, len))
		return 1; /* changed by us */
	if (x->t.ops->read(&x->t, u->addr, live, len) < 0)
		return -1;
	if (!memcmp(live, u->orig, len))
		return 0; /* original (a breakpoint placed on it since is not ours to judge) */
	if (!memcmp(live, u->now, len))
		return 1; /* changed by us (a target whose read is raw) */
	for (size_t i = 0; i < x->nothers; i++) {
		const struct hp_jwrite *o = &x->others[i];
		if (o->addr == u->addr && o->len == len &&
		    (!memcmp(live, o->now, len) || (have_raw && !memcmp(raw, o->now, len))))
			return 3; /* another install wrote over ours: its revert puts the bytes back */
	}
	return 2; /* neither */
}

/* The install whose bytes a revert of u puts back: the latest other install
 * still in place that wrote the same bytes (u was written over it), or NULL
 * (the original bytes). */
static const struct hp_jwrite *under(const struct hp_op *x, const struct hp_undo *u)
{
	const struct hp_jwrite *best = NULL;
	for (size_t i = 0; i < x->nothers; i++) {
		const struct hp_jwrite *o = &x->others[i];
		if (o->active && o->addr == u->addr && o->len == u->len && (!best || o->seq > best->seq))
			best = o;
	}
	return best;
}

int hp_op_under_others(const struct hp_op *x, struct hp_undo *u)
{
	for (size_t i = 0; i < x->nothers; i++) {
		const struct hp_jwrite *o = &x->others[i];
		if (o->addr == u->addr && o->len == u->len) {
			if (!memcmp(u->orig, o->now, u->len))
				memcpy(u->orig, o->orig, u->len);
		} else if (o->active && o->addr < u->addr + u->len && u->addr < o->addr + o->len) {
			return -EBUSY;
		}
	}
	return 0;
}

int hp_op_load_others(struct hp_op *x, const char *dir, int pid, uint64_t start, const char *self)
{
	return hp_journal_writes(dir, pid, start, self, &x->others, &x->nothers, &x->cap_others);
}

static int undo_all_inner(struct hp_op *x, char *err, size_t errlen);

int hp_op_undo_all(struct hp_op *x, char *err, size_t errlen)
{
	int r = undo_all_inner(x, err, errlen);
	if (r < 0 && x->scratch_applied) {
		char e2[256];
		if (x->t.ops->restore(&x->t, &x->scratch, e2, sizeof(e2)) == 0)
			x->scratch_applied = false;
	}
	return r;
}

static int undo_all_inner(struct hp_op *x, char *err, size_t errlen)
{
	char why[300];
	int r, bad = 0;
	double t0 = hp_now();

	bool entries = false; /* a hot set's several entries: one step */
	hp_op_step(x, HP_STEP_REVERT_CALLS, NULL);
	for (size_t k = x->nwrites; k-- > 0;) {
		struct hp_undo *u = &x->writes[k];
		if (u->kind == HP_UNDO_ENTRY && !entries) {
			entries = true;
			if (x->res)
				x->res->revert_calls_ms = (hp_now() - t0) * 1e3;
			hp_op_step(x, HP_STEP_REVERT_ENTRY, NULL);
		}
		double t1 = hp_now();
		int s = hp_op_live_state(x, u);
		if (s == 1) {
			/* Back to what was there: the original, or the bytes of an
			 * install still in place that u was written over. */
			struct hp_undo back = *u;
			const struct hp_jwrite *o = under(x, u);
			if (o)
				memcpy(back.orig, o->now, u->len);
			if ((r = x->t.ops->restore(&x->t, &back, err, errlen)) < 0)
				return r;
			hp_op_record(x, json_pack("{s:s, s:o}", "op", "restored", "addr", hp_jrec_hex(u->addr)), why,
				     sizeof(why));
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
	hp_op_step(x, HP_STEP_REVERT_HEAP, NULL);
	if (x->heap_mapped) {
		uint64_t hi = x->heap.addr + x->heap.len;
		int busy = x->t.ops->in_use(&x->t, x->heap.addr, hi, why, sizeof(why));
		/* Threads in the copy leave it as their calls return: wait a
		 * little (a kept heap asked again looks once). */
		for (int k = 0; busy == 1 && k < (x->retry ? 0 : 40); k++) {
			x->t.ops->resume(&x->t);
			usleep(k < 10 ? 200 : 2000);
			if ((r = x->t.ops->quiesce(&x->t, err, errlen)) < 0)
				return r;
			x->scratch_applied = false;
			busy = x->t.ops->in_use(&x->t, x->heap.addr, hi, why, sizeof(why));
		}
		if (!busy && getenv("HOTPATH_TEST_HEAP_BUSY")) {
			busy = 1; /* a test hook: a revert that must keep the heap, at will */
			snprintf(why, sizeof(why), "the test hook HOTPATH_TEST_HEAP_BUSY holds it");
		}
		if (!busy && bad) {
			/* Bytes we could not put back may still reach the copy. */
			busy = 1;
			snprintf(why, sizeof(why),
				 "bytes it had patched were changed by something else and left alone, and may still "
				 "reach it");
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
					if ((r = hp_op_record(x, hp_undo_record(&x->scratch), err, errlen)) < 0 ||
					    (r = x->t.ops->apply(&x->t, &x->scratch, NULL, NULL, err, errlen)) < 0)
						return r;
				}
				x->scratch_applied = true;
			}
			if (x->heap.unwind_registered) {
				/* Armed, then journaled, then called: a revert that finds the
				 * record without its result asks unwind_settle. */
				if ((r = x->t.ops->unwind_arm(&x->t, &x->heap, err, errlen)) < 0 ||
				    (r = hp_op_record(x, json_pack("{s:s}", "op", "unwind_deregister"), err, errlen)) <
					    0 ||
				    (r = x->t.ops->unwind_deregister(&x->t, &x->heap, err, errlen)) < 0)
					return r;
				hp_op_record(x, json_pack("{s:s}", "op", "unwind_deregistered"), why, sizeof(why));
			}
			if ((r = x->t.ops->heap_release(&x->t, &x->heap, err, errlen)) < 0)
				return r;
			x->heap_mapped = false;
			hp_op_record(x, json_pack("{s:s}", "op", "heap_released"), why, sizeof(why));
		} else {
			if (x->res) {
				x->res->heap_kept = true;
				snprintf(x->res->heap_note, sizeof(x->res->heap_note),
					 "the code heap at 0x%" PRIx64 " stays mapped: %s", x->heap.addr, why);
			}
			if (!x->retry) /* journaled once: a retry that keeps it again adds nothing */
				hp_op_record(x, json_pack("{s:s, s:s}", "op", "heap_kept", "why", why), why,
					     sizeof(why));
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

void hp_op_free(struct hp_op *x)
{
	for (size_t k = 0; k < x->nwrites; k++)
		hp_undo_free(&x->writes[k]);
	free(x->writes);
	free(x->others);
	hp_undo_free(&x->scratch);
	free(x->image);
	if (x->have_target)
		x->t.ops->close(&x->t);
	hp_journal_close(&x->j);
}

int hp_op_add_write(struct hp_op *x, const struct hp_undo *u)
{
	if (HP_GROW(x->writes, x->cap_writes, x->nwrites + 1))
		return -ENOMEM;
	x->writes[x->nwrites++] = *u;
	return 0;
}