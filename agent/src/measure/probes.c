// SPDX-License-Identifier: Apache-2.0
/*
 * Loads and attaches a measurement's BPF programs (see probes.h). Probes are
 * queued first and attached together: uprobe_multi probes of one file, one
 * process and one direction become one link (one system call for thousands
 * of offsets); perf-event uprobes and kprobes get a link each; each kernel
 * function timed by trampolines gets its own small object whose maps are the
 * main object's. Any failure detaches everything, so a measurement is either
 * fully armed or not at all. Probes count nothing until the last one is
 * attached (the `armed` map): the blocks of a function then count the same
 * executions, and an interval's block counts conserve flow.
 *
 * Return probes are attached before entry probes (uretprobes, kretprobes and
 * fexit take hold of a call at its entry): a call that enters after its entry
 * probe is attached then always meets its return probe. In the other order a
 * thread that enters in between opens a timer whose exit never comes; every
 * later call of that thread only deepens it, so the thread's calls go untimed
 * and its wall runs on to the window's end (per-call wall then rises with
 * whichever windows happen to catch a thread there). A call already inside
 * when the entry probe arms is not timed; its exit is `exits_unmatched`.
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/grow.h"
#include "host/caps.h"
#include "measure/probes.h"
#include "measure_fentry.skel.h"
#include "measure_probes.skel.h"

struct user_req {
	uint32_t idx;
	enum hp_mech mech;
	char *path;
	uint64_t offset;
	int pid;
};

struct kern_req {
	uint32_t idx;
	enum hp_mech mech;
	char *func;
	uint64_t offset, addr;
};

struct fentry_obj {
	struct measure_fentry_bpf *skel;
	struct bpf_link *entry, *exit;
};

struct hp_probe_set {
	struct measure_probes_bpf *skel;
	struct hp_probe_config cfg;
	struct hp_mp_probe *table; /* user-space copy of the probe table */
	struct user_req *ureq;
	size_t nureq, capureq;
	struct kern_req *kreq;
	size_t nkreq, capkreq;
	struct bpf_link **links;
	size_t nlinks, caplinks;
	int *fds; /* uprobe_multi links (raw fds) */
	size_t nfds, capfds;
	struct fentry_obj *fobjs;
	size_t nfobjs, capfobjs;
	struct hp_probe_failure *skipped; /* probes the kernel refused at their location */
	size_t nskipped, capskipped;
	int ncpus;
	/* The counting half of `counts` (0 or 1, see measure.bpf.h's armed),
	 * whether counting started, each half's sums when last read, and the
	 * totals of every half as of the last cut (per slot). */
	uint32_t half;
	bool counting;
	struct hp_mp_counts *seen[2], *total;
};

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

/* The kernel's own "operation not supported" (not in the C library's errno list). */
#define HP_ENOTSUPP 524

static const char *errname(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : e == HP_ENOTSUPP ? "ENOTSUPP" : "error";
}

static void set_filters_main(struct measure_probes_bpf *k, const struct hp_probe_config *c)
{
	k->rodata->filter_tgid_on = c->tgid_on;
	k->rodata->filter_tgid = c->tgid;
	k->rodata->filter_comm_on = c->comm_on;
	memcpy((char *)k->rodata->filter_comm, c->comm, HP_MP_COMM_LEN);
	k->rodata->filter_cgroup_on = c->cgroup_on;
	k->rodata->filter_cgroup = c->cgroup_id;
	k->rodata->target_tgids_on = c->target_tgids != NULL;
}

static void set_filters_fentry(struct measure_fentry_bpf *k, const struct hp_probe_config *c)
{
	k->rodata->filter_tgid_on = c->tgid_on;
	k->rodata->filter_tgid = c->tgid;
	k->rodata->filter_comm_on = c->comm_on;
	memcpy((char *)k->rodata->filter_comm, c->comm, HP_MP_COMM_LEN);
	k->rodata->filter_cgroup_on = c->cgroup_on;
	k->rodata->filter_cgroup = c->cgroup_id;
	k->rodata->target_tgids_on = c->target_tgids != NULL;
}

struct hp_probe_set *hp_probes_open(const struct hp_probe_config *c, char *err, size_t errlen)
{
	struct hp_probe_set *s = calloc(1, sizeof(*s));
	libbpf_print_fn_t old = libbpf_set_print(quiet_print);
	int r;
	if (!s) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	s->cfg = *c;
	s->cfg.target_tgids = NULL;
	s->ncpus = libbpf_num_possible_cpus();
	s->table = calloc(c->nprobes ? c->nprobes : 1, sizeof(*s->table));
	for (int h = 0; h < 2; h++)
		s->seen[h] = calloc(c->nslots ? c->nslots : 1, sizeof(*s->seen[h]));
	s->total = calloc(c->nslots ? c->nslots : 1, sizeof(*s->total));
	if (!s->table || !s->seen[0] || !s->seen[1] || !s->total || s->ncpus <= 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < c->nprobes; i++)
		s->table[i] = (struct hp_mp_probe){ { HP_MP_NO_SLOT, HP_MP_NO_SLOT }, HP_MP_NO_SLOT, 0 };
	if (!(s->skel = measure_probes_bpf__open())) {
		snprintf(err, errlen, "cannot open the measurement's BPF object: %s", strerror(errno));
		goto fail;
	}
	struct measure_probes_bpf *k = s->skel;
	uint32_t frames = c->max_frames ? c->max_frames : 65536;
	bpf_map__set_max_entries(k->maps.counts, c->nslots ? 2 * c->nslots : 1);
	bpf_map__set_max_entries(k->maps.probes, c->nprobes ? c->nprobes : 1);
	bpf_map__set_max_entries(k->maps.frames, frames);
	bpf_map__set_max_entries(k->maps.vthreads, frames);
	set_filters_main(k, c);
	bpf_program__set_autoload(k->progs.hit_multi, c->use_multi);
	if (c->use_multi)
		bpf_program__set_expected_attach_type(k->progs.hit_multi, HP_ATTACH_UPROBE_MULTI);
	bpf_program__set_autoload(k->progs.switch_btf, c->switch_hook == HP_MECH_TP_BTF);
	bpf_program__set_autoload(k->progs.switch_raw, c->switch_hook == HP_MECH_RAW_TP);
	bpf_program__set_autoload(k->progs.switch_tp, c->switch_hook == HP_MECH_TRACEPOINT);
	bpf_program__set_autoload(k->progs.sample_filter, c->sample_filter);
	if ((r = measure_probes_bpf__load(k))) {
		snprintf(err, errlen, "loading the measurement's BPF programs failed: %s (%s)", errname(-r),
			 strerror(-r));
		goto fail;
	}
	for (size_t i = 0; i < c->ntarget_tgids; i++) {
		uint32_t t = (uint32_t)c->target_tgids[i];
		uint8_t one = 1;
		if (bpf_map_update_elem(bpf_map__fd(k->maps.target_tgids), &t, &one, BPF_ANY) < 0) {
			snprintf(err, errlen, "cannot record target process %d: %s", c->target_tgids[i],
				 strerror(errno));
			goto fail;
		}
	}
	libbpf_set_print(old);
	return s;
fail:
	libbpf_set_print(old);
	hp_probes_close(s);
	return NULL;
}

int hp_probes_set(struct hp_probe_set *s, uint32_t idx, const struct hp_mp_probe *p)
{
	if (idx >= s->cfg.nprobes)
		return -EINVAL;
	s->table[idx] = *p;
	if (bpf_map_update_elem(bpf_map__fd(s->skel->maps.probes), &idx, p, BPF_ANY) < 0)
		return -errno;
	return 0;
}

int hp_probes_add_user(struct hp_probe_set *s, uint32_t idx, enum hp_mech mech, const char *path, uint64_t file_offset,
		       int pid)
{
	if (HP_GROW(s->ureq, s->capureq, s->nureq + 1))
		return -ENOMEM;
	struct user_req *q = &s->ureq[s->nureq];
	*q = (struct user_req){ idx, mech, strdup(path), file_offset, pid };
	if (!q->path)
		return -ENOMEM;
	s->nureq++;
	return 0;
}

int hp_probes_add_kernel(struct hp_probe_set *s, uint32_t idx, enum hp_mech mech, const char *func, uint64_t offset,
			 uint64_t addr)
{
	if (HP_GROW(s->kreq, s->capkreq, s->nkreq + 1))
		return -ENOMEM;
	struct kern_req *q = &s->kreq[s->nkreq];
	*q = (struct kern_req){ idx, mech, strdup(func ? func : ""), offset, addr };
	if (!q->func)
		return -ENOMEM;
	s->nkreq++;
	return 0;
}

static int keep_link(struct hp_probe_set *s, struct bpf_link *l)
{
	if (HP_GROW(s->links, s->caplinks, s->nlinks + 1)) {
		bpf_link__destroy(l);
		return -ENOMEM;
	}
	s->links[s->nlinks++] = l;
	return 0;
}

static int keep_fd(struct hp_probe_set *s, int fd)
{
	if (HP_GROW(s->fds, s->capfds, s->nfds + 1)) {
		close(fd);
		return -ENOMEM;
	}
	s->fds[s->nfds++] = fd;
	return 0;
}

static bool is_ret(enum hp_mech m)
{
	return m == HP_MECH_URETPROBE || m == HP_MECH_URETPROBE_MULTI || m == HP_MECH_KRETPROBE || m == HP_MECH_FEXIT;
}

static bool is_multi(enum hp_mech m)
{
	return m == HP_MECH_UPROBE_MULTI || m == HP_MECH_URETPROBE_MULTI;
}

static int cmp_ureq(const void *a, const void *b)
{
	const struct user_req *x = a, *y = b;
	if (is_multi(x->mech) != is_multi(y->mech))
		return is_multi(x->mech) ? -1 : 1;
	if (is_ret(x->mech) != is_ret(y->mech))
		return is_ret(x->mech) ? -1 : 1; /* return probes first (above) */
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	int c = strcmp(x->path, y->path);
	if (c)
		return c;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int attach_switch(struct hp_probe_set *s, char *err, size_t errlen)
{
	struct bpf_program *p = s->cfg.switch_hook == HP_MECH_TP_BTF     ? s->skel->progs.switch_btf :
				s->cfg.switch_hook == HP_MECH_RAW_TP     ? s->skel->progs.switch_raw :
				s->cfg.switch_hook == HP_MECH_TRACEPOINT ? s->skel->progs.switch_tp :
									   NULL;
	if (!p)
		return 0;
	struct bpf_link *l = bpf_program__attach(p);
	if (!l) {
		int e = errno;
		snprintf(err, errlen, "attaching the sched_switch hook (%s) failed: %s (%s)",
			 hp_mech_name(s->cfg.switch_hook), errname(e), strerror(e));
		return -e;
	}
	return keep_link(s, l);
}

/* Errors the kernel gives for one probe location (an instruction it cannot
 * probe, an offset it does not accept), as opposed to the whole request. */
static bool refused_here(int e)
{
	return e == HP_ENOTSUPP || e == EINVAL || e == EILSEQ || e == ENOEXEC || e == EOPNOTSUPP;
}

static int skip_probe(struct hp_probe_set *s, uint32_t idx, int e)
{
	if (HP_GROW(s->skipped, s->capskipped, s->nskipped + 1))
		return -ENOMEM;
	s->skipped[s->nskipped++] = (struct hp_probe_failure){ idx, e };
	return 0;
}

/* One uprobe_multi link for requests [i, j), split in halves where the kernel
 * refuses a location, down to the probes it refuses (kept in s->skipped). */
static int attach_multi(struct hp_probe_set *s, size_t i, size_t j)
{
	size_t n = j - i;
	struct user_req *q = &s->ureq[i];
	uint64_t *offs = malloc(n * sizeof(uint64_t)), *cookies = malloc(n * sizeof(uint64_t));
	if (!offs || !cookies) {
		free(offs);
		free(cookies);
		return -ENOMEM;
	}
	for (size_t k = 0; k < n; k++) {
		offs[k] = s->ureq[i + k].offset;
		cookies[k] = s->ureq[i + k].idx;
	}
	int fd = hp_uprobe_multi_link(bpf_program__fd(s->skel->progs.hit_multi), q->path, offs, cookies, (uint32_t)n,
				      is_ret(q->mech), q->pid);
	free(offs);
	free(cookies);
	if (fd >= 0)
		return keep_fd(s, fd);
	if (!refused_here(-fd))
		return fd;
	if (n == 1)
		return skip_probe(s, q->idx, -fd);
	int r = attach_multi(s, i, i + n / 2);
	return r < 0 ? r : attach_multi(s, i + n / 2, j);
}

static int attach_user(struct hp_probe_set *s, uint32_t *failed, char *err, size_t errlen)
{
	qsort(s->ureq, s->nureq, sizeof(*s->ureq), cmp_ureq);
	for (size_t i = 0; i < s->nureq;) {
		struct user_req *q = &s->ureq[i];
		if (!is_multi(q->mech)) {
			LIBBPF_OPTS(bpf_uprobe_opts, o, .bpf_cookie = q->idx, .retprobe = is_ret(q->mech));
			struct bpf_link *l = bpf_program__attach_uprobe_opts(s->skel->progs.hit, q->pid ? q->pid : -1,
									     q->path, q->offset, &o);
			int e = l ? 0 : errno;
			if (!l && refused_here(e)) {
				if (skip_probe(s, q->idx, e) < 0)
					return -ENOMEM;
			} else if (!l) {
				*failed = q->idx;
				snprintf(err, errlen, "%s at file offset 0x%llx of %s failed: %s (%s)",
					 hp_mech_name(q->mech), (unsigned long long)q->offset, q->path, errname(e),
					 strerror(e));
				return -e;
			} else if (keep_link(s, l) < 0) {
				return -ENOMEM;
			}
			i++;
			continue;
		}
		size_t j = i;
		while (j < s->nureq && is_multi(s->ureq[j].mech) && is_ret(s->ureq[j].mech) == is_ret(q->mech) &&
		       s->ureq[j].pid == q->pid && !strcmp(s->ureq[j].path, q->path))
			j++;
		int r = attach_multi(s, i, j);
		if (r < 0) {
			*failed = q->idx;
			snprintf(err, errlen, "%s link of %zu probes in %s failed: %s (%s)", hp_mech_name(q->mech),
				 j - i, q->path, errname(-r), strerror(-r));
			return r;
		}
		i = j;
	}
	return 0;
}

/* One trampoline object for the kernel function of requests [i, j). */
static int attach_fentry(struct hp_probe_set *s, size_t i, size_t j, uint32_t *failed, char *err, size_t errlen)
{
	struct measure_fentry_bpf *k = measure_fentry_bpf__open();
	struct kern_req *q = &s->kreq[i];
	const struct hp_mp_probe none = { { HP_MP_NO_SLOT, HP_MP_NO_SLOT }, HP_MP_NO_SLOT, 0 };
	struct hp_mp_probe entry = none, exit = none;
	bool want_entry = false, want_exit = false;
	int r;
	if (!k)
		return -ENOMEM;
	for (size_t x = i; x < j; x++) {
		if (s->kreq[x].mech == HP_MECH_FEXIT) {
			exit = s->table[s->kreq[x].idx];
			want_exit = true;
		} else {
			entry = s->table[s->kreq[x].idx];
			want_entry = true;
		}
	}
	set_filters_fentry(k, &s->cfg);
	memcpy((void *)&k->rodata->entry_probe, &entry, sizeof(entry));
	memcpy((void *)&k->rodata->exit_probe, &exit, sizeof(exit));
	bpf_program__set_autoload(k->progs.fentry_hit, want_entry);
	bpf_program__set_autoload(k->progs.fexit_hit, want_exit);
	/* A name libbpf finds in no BTF leaves the programs' default target
	 * (vfs_read) in place: refuse rather than measure another function. */
	if ((want_entry && (r = bpf_program__set_attach_target(k->progs.fentry_hit, 0, q->func))) ||
	    (want_exit && (r = bpf_program__set_attach_target(k->progs.fexit_hit, 0, q->func)))) {
		measure_fentry_bpf__destroy(k);
		*failed = q->idx;
		snprintf(err, errlen, "fentry/fexit cannot attach to %s: the kernel's BTF does not describe it (%s)",
			 q->func, strerror(-r));
		return r;
	}
	struct {
		struct bpf_map *mine, *main;
	} maps[] = {
		{ k->maps.counts, s->skel->maps.counts },
		{ k->maps.frames, s->skel->maps.frames },
		{ k->maps.vthreads, s->skel->maps.vthreads },
		{ k->maps.cpu_state, s->skel->maps.cpu_state },
		{ k->maps.target_tgids, s->skel->maps.target_tgids },
		{ k->maps.stats, s->skel->maps.stats },
		{ k->maps.armed, s->skel->maps.armed },
	};
	for (size_t m = 0; m < sizeof(maps) / sizeof(maps[0]); m++)
		if ((r = bpf_map__reuse_fd(maps[m].mine, bpf_map__fd(maps[m].main)))) {
			measure_fentry_bpf__destroy(k);
			snprintf(err, errlen, "sharing maps with the trampoline object of %s failed: %s", q->func,
				 strerror(-r));
			return r;
		}
	if ((r = measure_fentry_bpf__load(k))) {
		measure_fentry_bpf__destroy(k);
		*failed = q->idx;
		snprintf(err, errlen, "loading fentry/fexit programs for %s failed: %s (%s)", q->func, errname(-r),
			 strerror(-r));
		return r;
	}
	if (HP_GROW(s->fobjs, s->capfobjs, s->nfobjs + 1)) {
		measure_fentry_bpf__destroy(k);
		return -ENOMEM;
	}
	struct fentry_obj *o = &s->fobjs[s->nfobjs++];
	*o = (struct fentry_obj){ k, NULL, NULL };
	/* fexit before fentry: see the top of this file. */
	if (want_exit && !(o->exit = bpf_program__attach(k->progs.fexit_hit))) {
		r = -errno;
		*failed = q->idx;
		snprintf(err, errlen, "attaching fexit to %s failed: %s (%s)", q->func, errname(-r), strerror(-r));
		return r;
	}
	if (want_entry && !(o->entry = bpf_program__attach(k->progs.fentry_hit))) {
		r = -errno;
		*failed = q->idx;
		snprintf(err, errlen, "attaching fentry to %s failed: %s (%s)", q->func, errname(-r), strerror(-r));
		return r;
	}
	return 0;
}

static int cmp_kreq(const void *a, const void *b)
{
	const struct kern_req *x = a, *y = b;
	int c = strcmp(x->func, y->func);
	if (c)
		return c;
	bool xr = x->mech == HP_MECH_KRETPROBE, yr = y->mech == HP_MECH_KRETPROBE;
	if (xr != yr)
		return xr ? -1 : 1; /* kretprobes first (the top of this file) */
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int attach_kernel(struct hp_probe_set *s, uint32_t *failed, char *err, size_t errlen)
{
	qsort(s->kreq, s->nkreq, sizeof(*s->kreq), cmp_kreq);
	bool pmu = access("/sys/bus/event_source/devices/kprobe", F_OK) == 0;
	for (size_t i = 0; i < s->nkreq;) {
		struct kern_req *q = &s->kreq[i];
		if (q->mech == HP_MECH_FENTRY || q->mech == HP_MECH_FEXIT) {
			size_t j = i;
			while (j < s->nkreq && !strcmp(s->kreq[j].func, q->func) &&
			       (s->kreq[j].mech == HP_MECH_FENTRY || s->kreq[j].mech == HP_MECH_FEXIT))
				j++;
			int r = attach_fentry(s, i, j, failed, err, errlen);
			if (r < 0)
				return r;
			i = j;
			continue;
		}
		/* With the kprobe PMU, place the probe by address (names can be
		 * ambiguous); tracefs kprobe_events only take func+offset. */
		LIBBPF_OPTS(bpf_kprobe_opts, o, .bpf_cookie = q->idx, .retprobe = q->mech == HP_MECH_KRETPROBE,
			    .offset = pmu ? q->addr : q->offset);
		struct bpf_link *l = bpf_program__attach_kprobe_opts(s->skel->progs.hit, pmu ? NULL : q->func, &o);
		if (!l && refused_here(errno)) {
			if (skip_probe(s, q->idx, errno) < 0)
				return -ENOMEM;
			i++;
			continue;
		}
		if (!l) {
			int e = errno;
			*failed = q->idx;
			snprintf(err, errlen, "%s at %s+0x%llx failed: %s (%s)%s", hp_mech_name(q->mech), q->func,
				 (unsigned long long)q->offset, errname(e), strerror(e),
				 e == EILSEQ ? ": not an instruction boundary" : "");
			return -e;
		}
		if (keep_link(s, l) < 0)
			return -ENOMEM;
		i++;
	}
	return 0;
}

int hp_probes_attach(struct hp_probe_set *s, bool keep_going, uint32_t *failed_idx, char *err, size_t errlen)
{
	uint32_t failed = UINT32_MAX;
	libbpf_print_fn_t old = libbpf_set_print(quiet_print);
	int r = attach_switch(s, err, errlen);
	if (!r)
		r = attach_user(s, &failed, err, errlen);
	if (!r)
		r = attach_kernel(s, &failed, err, errlen);
	libbpf_set_print(old);
	if (!r && !s->counting) {
		/* Count from now on, in half 0: every probe is in place. */
		uint32_t zero = 0, on = 1;
		if (bpf_map_update_elem(bpf_map__fd(s->skel->maps.armed), &zero, &on, BPF_ANY) < 0) {
			r = -errno;
			snprintf(err, errlen, "starting the probes' counters failed: %s", strerror(-r));
		} else {
			s->counting = true;
		}
	}
	if (!r && s->nskipped && !keep_going) {
		int e = s->skipped[0].err;
		failed = s->skipped[0].idx;
		snprintf(err, errlen, "the kernel refused to probe this location: %s (%s)%s", errname(e), strerror(e),
			 e == HP_ENOTSUPP ? ": uprobes cannot single-step or emulate the instruction there (a lock or "
					    "segment prefix, or a privileged or legacy opcode)" :
					    "");
		r = -e;
	}
	if (failed_idx)
		*failed_idx = failed;
	if (r < 0) {
		if (r == -ENOMEM && !err[0])
			snprintf(err, errlen, "out of memory");
		hp_probes_detach(s);
	}
	return r;
}

void hp_probes_detach(struct hp_probe_set *s)
{
	for (size_t i = s->nlinks; i-- > 0;)
		bpf_link__destroy(s->links[i]);
	s->nlinks = 0;
	for (size_t i = 0; i < s->nfds; i++)
		close(s->fds[i]);
	s->nfds = 0;
	for (size_t i = 0; i < s->nfobjs; i++) {
		bpf_link__destroy(s->fobjs[i].entry);
		bpf_link__destroy(s->fobjs[i].exit);
		measure_fentry_bpf__destroy(s->fobjs[i].skel);
	}
	free(s->fobjs);
	s->fobjs = NULL;
	s->nfobjs = 0;
}

size_t hp_probes_skipped(const struct hp_probe_set *s, const struct hp_probe_failure **out)
{
	*out = s->skipped;
	return s->nskipped;
}

const char *hp_probes_refusal(int e)
{
	return e == HP_ENOTSUPP ?
		       "the kernel cannot probe the instruction there (ENOTSUPP: uprobes neither single-step "
		       "nor emulate it: a lock or segment prefix, or a privileged or legacy opcode)" :
	       e == EILSEQ ? "the kernel refused the location: not an instruction boundary (EILSEQ)" :
			     "the kernel refused to probe the location (EINVAL)";
}

int hp_probes_sample_filter_fd(const struct hp_probe_set *s)
{
	return s->cfg.sample_filter ? bpf_program__fd(s->skel->progs.sample_filter) : -1;
}

void hp_probes_forget_tgid(struct hp_probe_set *s, int tgid)
{
	uint32_t t = (uint32_t)tgid;
	bpf_map_delete_elem(bpf_map__fd(s->skel->maps.target_tgids), &t);
}

void hp_probes_close(struct hp_probe_set *s)
{
	if (!s)
		return;
	hp_probes_detach(s);
	measure_probes_bpf__destroy(s->skel);
	for (size_t i = 0; i < s->nureq; i++)
		free(s->ureq[i].path);
	for (size_t i = 0; i < s->nkreq; i++)
		free(s->kreq[i].func);
	free(s->ureq);
	free(s->kreq);
	free(s->links);
	free(s->fds);
	free(s->table);
	free(s->skipped);
	free(s->seen[0]);
	free(s->seen[1]);
	free(s->total);
	free(s);
}

static uint64_t grown(uint64_t now, uint64_t before)
{
	return now > before ? now - before : 0;
}

/*
 * Cut: switch the counting half with one write, then read the half left
 * behind. What it gained since its last read joins the totals. A hit that
 * looked up the old half just before the switch and lands after this read
 * is not lost: it is found the next time that half is read.
 */
int hp_probes_read_counts(struct hp_probe_set *s, struct hp_mp_counts *out)
{
	uint32_t n = s->cfg.nslots, old = s->half, zero = 0;
	struct hp_mp_counts *percpu = calloc((size_t)s->ncpus, sizeof(*percpu));
	int fd = bpf_map__fd(s->skel->maps.counts);
	if (!percpu)
		return -ENOMEM;
	if (s->counting) {
		uint32_t next = 1 + (1 - old) * n;
		if (bpf_map_update_elem(bpf_map__fd(s->skel->maps.armed), &zero, &next, BPF_ANY) < 0) {
			int e = errno;
			free(percpu);
			return -e;
		}
		s->half = 1 - old;
	}
	for (uint32_t slot = 0; slot < n; slot++) {
		uint32_t at = old * n + slot;
		struct hp_mp_counts sum = { 0 }, *seen = &s->seen[old][slot], *t = &s->total[slot];
		if (bpf_map_lookup_elem(fd, &at, percpu) < 0) {
			int e = errno;
			free(percpu);
			return -e;
		}
		for (int c = 0; c < s->ncpus; c++) {
			sum.count += percpu[c].count;
			sum.wall_ns += percpu[c].wall_ns;
			sum.vtime_ns += percpu[c].vtime_ns;
			sum.exits += percpu[c].exits;
		}
		t->count += grown(sum.count, seen->count);
		t->wall_ns += grown(sum.wall_ns, seen->wall_ns);
		t->vtime_ns += grown(sum.vtime_ns, seen->vtime_ns);
		t->exits += grown(sum.exits, seen->exits);
		*seen = sum;
		out[slot] = *t;
	}
	free(percpu);
	return 0;
}

int hp_probes_read_stats(struct hp_probe_set *s, struct hp_mp_stats *out)
{
	uint32_t zero = 0;
	memset(out, 0, sizeof(*out));
	return bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.stats), &zero, out) < 0 ? -errno : 0;
}

int hp_probes_read_frames(struct hp_probe_set *s, struct hp_probe_frame *out, size_t max)
{
	int fd = bpf_map__fd(s->skel->maps.frames);
	struct hp_mp_frame_key key, next;
	size_t n = 0;
	void *prev = NULL;
	while (n < max && bpf_map_get_next_key(fd, prev, &next) == 0) {
		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, &out[n].frame) == 0)
			out[n++].key = key;
	}
	return (int)n;
}

int hp_probes_delete_frame(struct hp_probe_set *s, const struct hp_mp_frame_key *key)
{
	return bpf_map_delete_elem(bpf_map__fd(s->skel->maps.frames), key) < 0 ? -errno : 0;
}

int hp_probes_read_cpus(struct hp_probe_set *s, struct hp_mp_cpu *out, int ncpus)
{
	uint32_t zero = 0;
	if (ncpus < s->ncpus)
		return -EINVAL;
	return bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.cpu_state), &zero, out) < 0 ? -errno : 0;
}

int hp_probes_vclock(struct hp_probe_set *s, uint32_t thread, uint64_t now_ns, const struct hp_mp_cpu *cpus, int ncpus,
		     uint64_t *out)
{
	struct hp_mp_vthread v;
	if (bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.vthreads), &thread, &v) < 0)
		return -ENOENT;
	*out = v.vacc_ns;
	for (int c = 0; c < ncpus; c++)
		if (cpus[c].thread == thread && now_ns > cpus[c].since_ns)
			*out += now_ns - cpus[c].since_ns;
	return 0;
}
