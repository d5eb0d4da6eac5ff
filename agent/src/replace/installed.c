// SPDX-License-Identifier: Apache-2.0
/*
 * What is installed (install.h), read from the journals: the listing with
 * each install's state, the moved code of a process's installs as
 * measurable code, and the original bytes under their patches.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/processes.h"
#include "replace/install.h"
#include "replace/journal_state.h"

int hp_installed_list(const char *state_dir, struct hp_installed **out, size_t *n, char *err, size_t errlen)
{
	char dir[4096], **js;
	size_t nj;

	*out = NULL;
	*n = 0;
	snprintf(dir, sizeof(dir), "%s/replace", state_dir);
	if (hp_journals_list(dir, &js, &nj) < 0) {
		snprintf(err, errlen, "cannot read %s: %s", dir, strerror(errno));
		return -EIO;
	}
	*out = calloc(nj + 1, sizeof(**out));
	for (size_t i = 0; i < nj; i++) {
		struct hp_jstate s;
		char e[256];
		if (*out && hp_jstate_read(js[i], &s, e, sizeof(e)) == 0) {
			struct hp_installed *h = &(*out)[(*n)++];
			snprintf(h->id, sizeof(h->id), "%s", json_string_value(json_object_get(s.begin, "id")) ?: "");
			snprintf(h->journal, sizeof(h->journal), "%s", js[i]);
			hp_journal_plan_path(js[i], h->plan_path, sizeof(h->plan_path));
			h->pid = (int)hp_jrec_u64(s.begin, "pid");
			h->start_time = hp_jrec_u64(s.begin, "start_time");
			snprintf(h->target, sizeof(h->target), "%s",
				 json_string_value(json_object_get(s.begin, "target")) ?: "process");
			bool kernel = !strcmp(h->target, "kernel");
			snprintf(h->root, sizeof(h->root), "%s",
				 json_string_value(json_object_get(s.begin, "root")) ?: "");
			snprintf(h->module, sizeof(h->module), "%s",
				 json_string_value(json_object_get(s.begin, "module")) ?: "");
			snprintf(h->hash, sizeof(h->hash), "%s",
				 json_string_value(json_object_get(s.begin, "hash")) ?: "");
			h->entry = hp_jrec_u64(s.begin, "entry");
			h->base = hp_jrec_u64(s.begin, "base");
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
				if (!strcmp(json_string_value(json_object_get(r, "op")) ?: "", "installed")) {
					h->new_entry = hp_jrec_u64(r, "new_entry");
					h->calls = (size_t)json_integer_value(json_object_get(r, "calls"));
				}
			}
			uint64_t st = 0;
			bool alive = hp_process_start_time(h->pid, &st) == 0 && st == h->start_time;
			const char *state = !alive      ? "process_gone" :
					    s.heap_kept ? "heap_kept" :
					    s.revert    ? "reverting" :
					    s.installed ? "installed" :
							  "installing";
			snprintf(h->state, sizeof(h->state), "%s", state);
			char kept[sizeof(h->detail)];
			snprintf(kept, sizeof(kept),
				 "reverted; its code heap stays mapped, waiting for release (asked again at every "
				 "install and revert in the process, and by the daemon periodically): %s",
				 s.kept_why);
			snprintf(h->detail, sizeof(h->detail), "%s",
				 !alive && kernel ? "the process holding it exited, so hotpath.ko undid it; `hotpathd "
						    "revert kernel` removes the journal" :
				 !alive           ? "the process exited; `hotpathd revert` removes the journal" :
				 s.heap_kept      ? kept :
				 s.revert         ? "a revert was interrupted: `hotpathd revert` finishes it" :
				 !s.installed     ? "an install was interrupted: `hotpathd revert` undoes it" :
						    "");
			hp_jstate_free(&s);
		}
		free(js[i]);
	}
	free(js);
	return 0;
}

/* The installed copies of process pid's code (kernel: every kernel install's, whoever holds it). */
static int moved_code(const char *state_dir, int pid, bool kernel, struct hp_moved_code **out, size_t *n, char *err,
		      size_t errlen)
{
	struct hp_installed *ins;
	size_t ni;

	*out = NULL;
	*n = 0;
	if (hp_installed_list(state_dir, &ins, &ni, err, errlen) < 0)
		return -EIO;
	*out = calloc(ni + 1, sizeof(**out));
	for (size_t i = 0; *out && i < ni; i++) {
		if ((kernel ? strcmp(ins[i].target, "kernel") :
			      ins[i].pid != pid || strcmp(ins[i].target, "process")) ||
		    strcmp(ins[i].state, "installed") || !ins[i].heap)
			continue;
		struct hp_iplan p;
		char e[256];
		if (hp_iplan_read(ins[i].plan_path, &p, e, sizeof(e)) < 0)
			continue;
		struct hp_moved_code *mc = &(*out)[(*n)++];
		int64_t delta = (int64_t)(ins[i].entry - p.members[0].addr);
		mc->pid = pid;
		mc->heap = ins[i].heap;
		mc->heap_len = ins[i].heap_len;
		/* Copy addresses: the code starts base's offset in its page into the heap. */
		size_t nb = 0;
		for (size_t m = 0; m < p.nmembers; m++)
			nb += p.members[m].nblocks;
		mc->blocks = calloc(nb + 1, sizeof(*mc->blocks));
		mc->fns = calloc(p.nmembers + 1, sizeof(*mc->fns));
		for (size_t m = 0; mc->fns && m < p.nmembers; m++)
			mc->fns[mc->nfns++] =
				(struct hp_moved_fn){ p.members[m].addr + (uint64_t)delta,
						      p.members[m].new_addr - (p.base & ~0xfffull) + mc->heap,
						      p.members[m].size };
		for (size_t m = 0; mc->blocks && m < p.nmembers; m++)
			for (size_t b = 0; b < p.members[m].nblocks; b++) {
				const struct hp_iblock *bl = &p.members[m].blocks[b];
				mc->blocks[mc->nblocks++] = (struct hp_moved_block){
					.orig = p.members[m].addr + (uint64_t)delta + bl->offset,
					.copy = bl->new_size ? bl->new_addr - (p.base & ~0xfffull) + mc->heap : 0,
					.size = bl->new_size,
					.orig_size = bl->size,
					.offset = bl->offset,
					.member = (uint32_t)m,
				};
			}
		if (mc->blocks)
			hp_moved_sort(mc->blocks, mc->nblocks);
		hp_iplan_free(&p);
	}
	free(ins);
	return 0;
}

int hp_moved_code_of(const char *state_dir, int pid, struct hp_moved_code **out, size_t *n, char *err, size_t errlen)
{
	return moved_code(state_dir, pid, false, out, n, err, errlen);
}

int hp_moved_kernel_code(const char *state_dir, struct hp_moved_code **out, size_t *n, char *err, size_t errlen)
{
	return moved_code(state_dir, 0, true, out, n, err, errlen);
}

int hp_installed_patches(const char *state_dir, int pid, struct hp_byte_patch **out, size_t *n)
{
	char dir[4096];
	struct hp_jwrite *w = NULL;
	size_t nw = 0, cap = 0;

	*out = NULL;
	*n = 0;
	snprintf(dir, sizeof(dir), "%s/replace", state_dir);
	int r = hp_journal_writes(dir, pid, 0, NULL, &w, &nw, &cap);
	if (r == -EIO || (nw && !(*out = calloc(nw, sizeof(**out))))) {
		free(w);
		return r == -EIO ? r : -ENOMEM;
	}
	for (size_t i = 0; i < nw; i++) {
		(*out)[i].addr = w[i].addr;
		(*out)[i].len = w[i].len;
		memcpy((*out)[i].bytes, w[i].orig, w[i].len);
	}
	*n = nw;
	free(w);
	return 0;
}

int hp_model_open_pid_unpatched(const char *state_dir, int pid, const struct hp_open_opts *o, struct hp_model **out,
				char *err, size_t errlen)
{
	struct hp_byte_patch *bp = NULL;
	size_t nbp = 0;
	struct hp_open_opts oo = o ? *o : (struct hp_open_opts){ .quiet = true };

	if (state_dir && state_dir[0])
		hp_installed_patches(state_dir, pid, &bp, &nbp);
	oo.overlay = bp;
	oo.noverlay = nbp;
	int r = hp_model_open_pid(pid, &oo, out, err, errlen);
	free(bp);
	return r;
}
