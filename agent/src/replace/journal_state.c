// SPDX-License-Identifier: Apache-2.0
/*
 * The install journals read back and written as records (see
 * journal_state.h).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "base/hex.h"
#include "base/json_get.h"
#include "replace/journal.h"
#include "replace/journal_state.h"

/* s as exactly len bytes of hex at out. */
static bool unhex_exact(const char *s, uint8_t *out, size_t len)
{
	return s && strlen(s) == 2 * len && hp_unhex(s, len, out) == 0;
}

json_t *hp_jrec_hex(uint64_t v)
{
	char b[24];
	snprintf(b, sizeof(b), "0x%" PRIx64, v);
	return json_string(b);
}

uint64_t hp_jrec_u64(const json_t *rec, const char *key)
{
	uint64_t v;
	return hp_json_u64(json_object_get(rec, key), &v) ? v : 0;
}

json_t *hp_undo_record(const struct hp_undo *u)
{
	static const char *const kinds[] = { "scratch", "entry", "call" };
	size_t len = u->big_len ? u->big_len : u->len;
	char *o = malloc(2 * len + 1), *n = malloc(2 * len + 1);
	json_t *r = NULL;

	if (o && n) {
		hp_hex(u->big_len ? u->big_orig : u->orig, len, o);
		hp_hex(u->big_len ? u->big_now : u->now, len, n);
		r = json_pack("{s:s, s:s, s:o, s:i, s:s, s:s}", "op", "undo", "kind", kinds[u->kind], "addr",
			      hp_jrec_hex(u->addr), "len", (int)len, "orig", o, "now", n);
	}
	free(o);
	free(n);
	return r;
}

int hp_undo_from_record(const json_t *r, struct hp_undo *u)
{
	const char *kind = json_string_value(json_object_get(r, "kind"));
	size_t len = (size_t)hp_jrec_u64(r, "len");

	memset(u, 0, sizeof(*u));
	u->addr = hp_jrec_u64(r, "addr");
	if (!kind)
		return -EINVAL;
	if (!strcmp(kind, "scratch")) {
		u->kind = HP_UNDO_SCRATCH;
		u->big_len = len;
		u->big_orig = malloc(len + 1);
		u->big_now = malloc(len + 1);
		if (!u->big_orig || !u->big_now ||
		    !unhex_exact(json_string_value(json_object_get(r, "orig")), u->big_orig, len)) {
			hp_undo_free(u);
			return -EINVAL;
		}
		if (!unhex_exact(json_string_value(json_object_get(r, "now")), u->big_now, len))
			memset(u->big_now, 0, len);
		return 0;
	}
	u->kind = !strcmp(kind, "entry") ? HP_UNDO_ENTRY : HP_UNDO_CALL;
	u->len = (uint8_t)len;
	if (len > HP_UNDO_MAX || !unhex_exact(json_string_value(json_object_get(r, "orig")), u->orig, len) ||
	    !unhex_exact(json_string_value(json_object_get(r, "now")), u->now, len))
		return -EINVAL;
	return 0;
}

void hp_journal_plan_path(const char *journal, char *out, size_t len)
{
	snprintf(out, len, "%.*s.plan.json", (int)(strlen(journal) - strlen(".journal")), journal);
}

int hp_jstate_read(const char *path, struct hp_jstate *s, char *err, size_t errlen)
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
			s->heap.addr = hp_jrec_u64(r, "addr");
			s->heap.len = (size_t)hp_jrec_u64(r, "len");
			s->heap.unwind = hp_jrec_u64(r, "unwind");
			/* Its name, when not the install's id (a kept heap of the same id was mapped). */
			snprintf(s->heap.name, sizeof(s->heap.name), "%s",
				 json_string_value(json_object_get(r, "name")) ?: "");
			s->heap_mapped = true;
		} else if (!strcmp(op, "heap_mapped")) {
			s->heap.data = hp_jrec_u64(r, "data");
			s->heap.data_len = (size_t)hp_jrec_u64(r, "data_len");
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

void hp_jstate_free(struct hp_jstate *s)
{
	json_decref(s->recs);
	free(s->undo);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int hp_journals_list(const char *dir, char ***out, size_t *n)
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
		if (HP_GROW(*out, cap, *n + 1))
			break;
		char *p = malloc(strlen(dir) + l + 2);
		if (!p)
			break;
		sprintf(p, "%s/%s", dir, e->d_name);
		(*out)[(*n)++] = p;
	}
	closedir(d);
	if (*n > 1) /* in name order, not the directory's: reverts of several go in one order every time */
		qsort(*out, *n, sizeof(**out), by_name);
	return 0;
}

/* The first journal in dir whose state match accepts: 0 with its path and
 * process, -ENOENT, or list_err when dir cannot be read. */
static int first_journal(const char *dir, bool (*match)(const struct hp_jstate *s, const void *ctx), const void *ctx,
			 int list_err, char *path, size_t plen, int *pid)
{
	char **js, e[256];
	size_t n;
	int r = -ENOENT;

	if (hp_journals_list(dir, &js, &n) < 0)
		return list_err;
	for (size_t i = 0; i < n; i++) {
		struct hp_jstate s;
		if (r == -ENOENT && hp_jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			if (match(&s, ctx)) {
				snprintf(path, plen, "%s", js[i]);
				if (pid)
					*pid = (int)hp_jrec_u64(s.begin, "pid");
				r = 0;
			}
			hp_jstate_free(&s);
		}
		free(js[i]);
	}
	free(js);
	return r;
}

struct installed_at {
	int pid;
	uint64_t start;
	const char *root;
};

static bool is_root_at(const struct hp_jstate *s, const struct installed_at *w)
{
	return (int)hp_jrec_u64(s->begin, "pid") == w->pid && hp_jrec_u64(s->begin, "start_time") == w->start &&
	       !strcmp(json_string_value(json_object_get(s->begin, "root")) ?: "", w->root) && !s->reverted;
}

/* The heap_kept record is written only once a revert has undone every write. */
static bool is_installed_at(const struct hp_jstate *s, const void *ctx)
{
	return is_root_at(s, ctx) && !(s->revert && s->heap_kept);
}

int hp_journal_find(const char *dir, int pid, uint64_t start, const char *root, char *path, size_t plen)
{
	struct installed_at w = { pid, start, root };
	return first_journal(dir, is_installed_at, &w, -ENOENT, path, plen, NULL);
}

static bool has_id(const struct hp_jstate *s, const void *id)
{
	return !strcmp(json_string_value(json_object_get(s->begin, "id")) ?: "", id);
}

static bool has_id_installed(const struct hp_jstate *s, const void *id)
{
	return has_id(s, id) && !(s->revert && s->heap_kept);
}

int hp_journal_of_id(const char *dir, const char *id, char *path, size_t plen, int *pid)
{
	/* The install itself before a revert of it that kept its heap. */
	int r = first_journal(dir, has_id_installed, id, -EIO, path, plen, pid);
	return r == -ENOENT ? first_journal(dir, has_id, id, -EIO, path, plen, pid) : r;
}

int hp_journal_writes(const char *dir, int pid, uint64_t start, const char *except, struct hp_jwrite **out, size_t *n,
		      size_t *cap)
{
	char **js;
	size_t nj;
	int r = 0;

	if (hp_journals_list(dir, &js, &nj) < 0)
		return -EIO; /* (no folder: none, and 0) */
	for (size_t i = 0; i < nj; i++) {
		struct hp_jstate s;
		char e[256];
		if (r == 0 && (!except || strcmp(js[i], except)) && hp_jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			if ((int)hp_jrec_u64(s.begin, "pid") == pid &&
			    (!start || hp_jrec_u64(s.begin, "start_time") == start))
				for (size_t k = 0; k < s.nundo && r == 0; k++) {
					struct hp_undo u;
					if (hp_undo_from_record(s.undo[k], &u) < 0)
						continue;
					if (u.kind != HP_UNDO_SCRATCH && HP_GROW(*out, *cap, *n + 1)) {
						r = -ENOMEM;
					} else if (u.kind != HP_UNDO_SCRATCH) {
						struct hp_jwrite *w = &(*out)[(*n)++];
						w->addr = u.addr;
						w->len = u.len;
						memcpy(w->orig, u.orig, u.len);
						memcpy(w->now, u.now, u.len);
						w->seq = hp_jrec_u64(s.begin, "seq");
						w->active = !s.revert;
					}
					hp_undo_free(&u);
				}
			hp_jstate_free(&s);
		}
		free(js[i]);
	}
	free(js);
	return r;
}
