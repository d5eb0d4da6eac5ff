// SPDX-License-Identifier: Apache-2.0
/*
 * Reverting installs (install.h): one by its journal, by process and root,
 * by install id, and recovery at start-up of the journals a dead agent left
 * unfinished. The journal says what was changed; the live bytes say whether
 * each change is still there (install_op.c undoes them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replace/install.h"
#include "replace/install_op.h"
#include "replace/journal.h"
#include "replace/journal_state.h"
#include "replace/patch_target.h"

/* Revert one journal's install. */
static int revert_journal(const char *path, const struct hp_install_opts *o, struct hp_install_result *res, char *err,
			  size_t errlen)
{
	struct hp_jstate s;
	struct hp_op x = { .res = res, .progress = o->progress, .pctx = o->progress_ctx };
	char plan[4200];
	int r;

	x.j.fd = -1;
	if ((r = hp_jstate_read(path, &s, err, errlen)) < 0)
		return r;
	hp_journal_plan_path(path, plan, sizeof(plan));
	int pid = (int)hp_jrec_u64(s.begin, "pid");
	snprintf(res->id, sizeof(res->id), "%s", json_string_value(json_object_get(s.begin, "id")) ?: "");
	snprintf(res->journal, sizeof(res->journal), "%s", path);
	r = hp_op_open_target(&x, json_string_value(json_object_get(s.begin, "target")), pid,
			      hp_jrec_u64(s.begin, "start_time"), err, errlen);
	if (r == -ESRCH) {
		/* The process is gone, and everything it had with it (a kernel
		 * install's holder: hotpath.ko undid it when its fd closed). */
		hp_jstate_free(&s);
		unlink(plan);
		unlink(path);
		return 1;
	}
	if (r < 0) {
		hp_jstate_free(&s);
		return r;
	}
	if ((r = hp_journal_open(path, &x.j, err, errlen)) < 0)
		goto out;
	for (size_t k = 0; k < s.nundo; k++) {
		struct hp_undo u;
		if (hp_undo_from_record(s.undo[k], &u) < 0) {
			snprintf(err, errlen, "record %zu of %s is malformed", k, path);
			r = -EINVAL;
			goto out;
		}
		if (u.kind == HP_UNDO_SCRATCH) {
			/* Scratch left by an interrupted operation: restored below. */
			hp_undo_free(&x.scratch);
			x.scratch = u;
			x.scratch_applied = true;
		} else if ((r = hp_op_add_write(&x, &u)) < 0)
			goto out;
	}
	x.heap = s.heap;
	if (!x.heap.name[0])
		snprintf(x.heap.name, sizeof(x.heap.name), "%s", res->id);
	x.retry = s.revert && s.heap_kept;
	/* Bytes this install wrote may be another's now (written over), or go back to another's. */
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/replace", o->state_dir);
	if ((r = hp_op_load_others(&x, dir, pid, hp_jrec_u64(s.begin, "start_time"), path)) < 0) {
		snprintf(err, errlen, "cannot read the journals in %s: %s", dir, strerror(-r));
		goto out;
	}
	x.heap.unwind_registered = s.unwind_registered;
	x.unwind_unknown = s.unwind_intent && !s.unwind_done;
	x.heap_mapped = s.heap_mapped && !s.heap_released;
	if ((r = x.t.ops->quiesce(&x.t, err, errlen)) < 0)
		goto out;
	if (x.heap_mapped) {
		/* Is it really there? (An interrupted install may not have mapped it.) */
		struct hp_heap found = { 0 };
		if (!x.t.ops->heap_find(&x.t, x.heap.name, &found) || !found.addr) {
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
		if (hp_op_live_state(&x, &x.scratch) != 0 &&
		    (r = x.t.ops->restore(&x.t, &x.scratch, err, errlen)) < 0) {
			x.t.ops->resume(&x.t);
			goto out;
		}
		x.scratch_applied = false;
	}
	if (!s.revert)
		hp_op_record(&x, json_pack("{s:s}", "op", "revert"), err, errlen);
	r = hp_op_undo_all(&x, err, errlen);
	x.t.ops->resume(&x.t);
	if (r == 0 && !res->heap_kept) {
		char e2[200];
		hp_op_record(&x, json_pack("{s:s}", "op", "reverted"), e2, sizeof(e2));
		hp_journal_retire(&x.j);
		unlink(plan);
	}
	hp_op_step(&x, HP_STEP_REVERTED, res->heap_kept ? res->heap_note : "");
out:
	hp_jstate_free(&s);
	hp_op_free(&x);
	return r;
}

/* Revert one journal's install, into res, which may sum several journals'
 * (hp_revert): whether this journal's heap is kept is its own, so a heap an
 * earlier journal kept does not leave this journal unretired; res says
 * whether any was. */
static int revert_one(const char *path, const struct hp_install_opts *o, struct hp_install_result *res, char *err,
		      size_t errlen)
{
	bool kept_before = res->heap_kept;

	res->heap_kept = false;
	int r = revert_journal(path, o, res, err, errlen);
	res->heap_kept = res->heap_kept || kept_before;
	return r;
}

int hp_release_kept(const char *state_dir, int pid, const char *except, size_t *released, size_t *waiting)
{
	struct hp_install_opts o = { .state_dir = state_dir };
	char dir[4096], **js;
	size_t n;

	*released = *waiting = 0;
	snprintf(dir, sizeof(dir), "%s/replace", state_dir);
	if (hp_journals_list(dir, &js, &n) < 0)
		return -EIO;
	for (size_t i = 0; i < n; i++) {
		struct hp_jstate s;
		char e[512];
		bool kept = false;
		if ((!except || strcmp(js[i], except)) && hp_jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			kept = s.revert && s.heap_kept && (!pid || (int)hp_jrec_u64(s.begin, "pid") == pid);
			hp_jstate_free(&s);
		}
		if (kept) {
			struct hp_install_result res;
			memset(&res, 0, sizeof(res));
			int r = revert_one(js[i], &o, &res, e, sizeof(e));
			if (r == 1 || (r == 0 && !res.heap_kept))
				(*released)++;
			else
				(*waiting)++;
		}
		free(js[i]);
	}
	free(js);
	return 0;
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
	if (hp_journals_list(dir, &js, &n) < 0) {
		snprintf(err, errlen, "cannot read %s", dir);
		return -EIO;
	}
	for (size_t i = 0; i < n; i++) {
		struct hp_jstate s;
		char e[256];
		if (r == 0 && hp_jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			bool match =
				(int)hp_jrec_u64(s.begin, "pid") == pid &&
				(!root || !strcmp(json_string_value(json_object_get(s.begin, "root")) ?: "", root));
			hp_jstate_free(&s);
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
	/* Heaps reverts kept, of other roots too, asked again (one look each). */
	hp_release_kept(state_dir, pid, NULL, &res->kept_released, &res->kept_waiting);
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
	if ((r = hp_journal_of_id(dir, id, path, sizeof(path), pid)) < 0) {
		snprintf(err, errlen, r == -ENOENT ? "nothing is installed under the id %s" : "cannot read %s",
			 r == -ENOENT ? id : dir);
		return r;
	}
	r = revert_one(path, &o, res, err, errlen);
	if (*pid > 0) {
		/* Heaps other reverts kept asked again (one look each); this one's counts as waiting. */
		hp_release_kept(state_dir, *pid, path, &res->kept_released, &res->kept_waiting);
		res->kept_waiting += r >= 0 && res->heap_kept;
	}
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
