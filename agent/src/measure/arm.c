// SPDX-License-Identifier: Apache-2.0
/*
 * From rows to armed probes. First every row's metrics are planned: the
 * host's mechanism for the row kind (mechanism.c), narrowed for kernel
 * functions by what the kernel allows in that function (target/
 * kprobe_policy.c: no trampoline without an ftrace site, no kprobe in
 * blacklisted text). Then the probe table is built: a function's entry probe
 * counts its entries (and its first block's executions when that block is a
 * row measured the same way) and opens its timers; its exit probe closes
 * them; every other block row gets a probe at its start. Probes of a process
 * are placed by (file, file offset) as uprobes require; kernel probes by
 * address or function name.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "host/procmaps.h"
#include "isa/isa.h"
#include "measure/measure_internal.h"
#include "target/kprobe_policy.h"

/* One copy of each mechanism name per handle (a handful of combinations). */
static const char *intern(struct hp_measure *h, const char *s)
{
	for (size_t i = 0; i < h->ninterned; i++)
		if (!strcmp(h->interned[i], s))
			return h->interned[i];
	if (HP_GROW(h->interned, h->cap_interned, h->ninterned + 1) || !(h->interned[h->ninterned] = strdup(s)))
		return "";
	return h->interned[h->ninterned++];
}

static void set_plan(struct hp_metric_plan *p, enum hp_mech entry, enum hp_mech exit, enum hp_mech sw,
		     enum hp_value_label label)
{
	p->available = true;
	p->entry = entry;
	p->exit = exit;
	p->switch_hook = sw;
	p->label = label;
	p->reason[0] = '\0';
	snprintf(p->mechanism, sizeof(p->mechanism), "%s%s%s%s%s", hp_mech_name(entry), exit ? "+" : "",
		 exit ? hp_mech_name(exit) : "", sw ? "+" : "", sw ? hp_mech_name(sw) : "");
}

static void refuse_plan(struct hp_metric_plan *p, const char *function_why, const char *host_why)
{
	p->available = false;
	p->entry = p->exit = p->switch_hook = HP_MECH_NONE;
	p->mechanism[0] = '\0';
	if (function_why[0] && host_why[0])
		snprintf(p->reason, sizeof(p->reason), "%s; besides, %s", function_why, host_why);
	else
		snprintf(p->reason, sizeof(p->reason), "%s", function_why[0] ? function_why : host_why);
}

/*
 * A kernel row's mechanisms, from what the host has and what the kernel
 * allows in this function: trampolines (fentry/fexit) need an ftrace site,
 * BTF and an unambiguous name; kprobes need code outside the blacklist. A
 * function that refuses the host's first choice takes the next one (fentry,
 * then kprobes, then, for counts with --blocks, samples), so one request can
 * mix them. rp holds the host-level plan on entry, the row's on return.
 */
static void plan_kernel_row(struct hp_measure *h, struct hp_kprobe_policy *pol, size_t i,
			    struct hp_metric_plan rp[HP_METRIC_N])
{
	const struct hp_row *r = &h->rows[i];
	const struct hp_module *mod = &h->model->mods[r->mod];
	const struct hp_function *f = &mod->funcs[r->fn];
	const struct hp_mechanisms *m = &h->mech;
	struct hp_kfunc_rules k;
	struct hp_find_hit hits[2];
	char tramp_why[256], why[640];
	hp_kprobe_policy_check(pol, mod, f, &k);
	bool unique = hp_model_find_all(h->model, f->name, hits, 2) == 1;
	bool tramp_ok = k.ftrace_site && k.btf && unique, kp_ok = k.kprobe_ok;
	if (!unique)
		snprintf(tramp_why, sizeof(tramp_why),
			 "%s has several kernel symbols of that name and fentry attaches by name", f->name);
	else
		snprintf(tramp_why, sizeof(tramp_why), "%s", k.no_trampoline);
	/* What the kernel refuses in this function, for every mechanism it could otherwise use. */
	size_t n = 0;
	why[0] = '\0';
	if (!tramp_ok)
		n += (size_t)snprintf(why + n, sizeof(why) - n, "%s", tramp_why);
	if (!kp_ok && n < sizeof(why))
		snprintf(why + n, sizeof(why) - n, "%s%s", n ? "; " : "", k.no_kprobe);

	if (r->kind == HP_ROW_BLOCK) {
		struct hp_metric_plan *c = &rp[HP_METRIC_COUNT];
		/* Samples stand in for kprobes on a host without them, and for a
		 * block --blocks added (best effort); a block the request names, in
		 * code where the kernel refuses kprobes, is refused with its reason. */
		if (m->have_kprobe && kp_ok)
			set_plan(c, HP_MECH_KPROBE, HP_MECH_NONE, HP_MECH_NONE, HP_LABEL_EXACT);
		else if (m->have_sampling && (!m->have_kprobe || r->implicit))
			set_plan(c, HP_MECH_SAMPLING, HP_MECH_NONE, HP_MECH_NONE, HP_LABEL_SAMPLED);
		else
			refuse_plan(c, m->have_kprobe ? k.no_kprobe : why,
				    m->have_kprobe ? "" : m->why_no_kernel_block);
		return;
	}
	enum hp_mech pe = HP_MECH_NONE, px = HP_MECH_NONE, one = HP_MECH_NONE;
	if (m->have_fentry && m->have_fexit && tramp_ok) {
		pe = HP_MECH_FENTRY;
		px = HP_MECH_FEXIT;
	} else if (m->have_kprobe && m->have_kretprobe && kp_ok) {
		pe = HP_MECH_KPROBE;
		px = HP_MECH_KRETPROBE;
	}
	if (m->have_fentry && tramp_ok)
		one = HP_MECH_FENTRY;
	else if (m->have_kprobe && kp_ok)
		one = HP_MECH_KPROBE;
	bool timers = h->metrics & HP_METRICS_TIMERS;
	for (int x = 0; x < HP_METRIC_N; x++) {
		struct hp_metric_plan *p = &rp[x];
		char host[sizeof(p->reason)];
		if (!p->applicable || (HP_METRIC_BIT(x) & HP_METRICS_HARDWARE))
			continue;
		snprintf(host, sizeof(host), "%s", p->reason); /* the host-level refusal, if any */
		if (x == HP_METRIC_COUNT) {
			enum hp_mech e = timers && pe ? pe : one;
			if (e)
				set_plan(p, e, HP_MECH_NONE, HP_MECH_NONE, HP_LABEL_EXACT);
			else if (h->blocks && m->have_sampling && !timers)
				set_plan(p, HP_MECH_SAMPLING, HP_MECH_NONE, HP_MECH_NONE, HP_LABEL_SAMPLED);
			else
				refuse_plan(p, why, m->have_fentry || m->have_kprobe ? "" : host);
			continue;
		}
		if (!pe) {
			refuse_plan(p, why,
				    (m->have_fentry && m->have_fexit) || (m->have_kprobe && m->have_kretprobe) ? "" :
														 host);
			continue;
		}
		if (x == HP_METRIC_VTIME && m->switch_hook == HP_MECH_NONE) {
			refuse_plan(p, "", host);
			continue;
		}
		set_plan(p, pe, px, x == HP_METRIC_VTIME ? m->switch_hook : HP_MECH_NONE, HP_LABEL_EXACT);
	}
}

/* uprobes decline instructions they can neither emulate nor single-step out of
 * line; say so before asking the kernel (a refused offset fails its whole
 * uprobe_multi link, and finding it costs a registration per try). */
static void plan_user_location(struct hp_measure *h, size_t i, bool *refused, char *why, size_t whylen)
{
	const struct hp_measure_row *p = &h->pub[i];
	uint64_t addr = p->run_address;
	uint8_t code[16];
	unsigned t = 0;
	size_t len = sizeof(code);
	uint64_t end = addr == (p->kind == HP_ROW_BLOCK ? p->block_address : p->function_address) ?
			       p->function_address + p->function_size :
			       addr + len;
	if (addr + len > end)
		len = (size_t)(end - addr);
	*refused = false;
	if (!len || !h->model->read || h->model->read(h->model, addr, code, len) < 0 ||
	    hp_isa_traits(code, len, &t) < 0)
		return;
	const char *what = (t & HP_ISA_LOCK)       ? "a lock prefix" :
			   (t & HP_ISA_SEG_LEGACY) ? "an es/cs/ss/ds segment (or notrack) prefix" :
			   (t & HP_ISA_TRAP)       ? "a trap (int3, int n, hlt or ud2)" :
			   (t & HP_ISA_IO)         ? "port I/O" :
			   (t & HP_ISA_INTERRUPTS) ? "an interrupt-flag instruction" :
						     NULL;
	if (!what)
		return;
	*refused = true;
	if (p->kind == HP_ROW_BLOCK)
		snprintf(why, whylen, "%s+0x%x starts with an instruction with %s, which uprobes cannot probe",
			 p->function, p->block_offset, what);
	else
		snprintf(why, whylen, "%s starts with an instruction with %s, which uprobes cannot probe", p->function,
			 what);
}

int hp_measure_plan_rows(struct hp_measure *h, bool allow_partial, char *err, size_t errlen)
{
	struct hp_kprobe_policy *pol = NULL;
	bool any = false, reported_implied = false;
	int ret = 0;
	for (int kind = 0; kind < 2; kind++)
		for (int m = 0; m < HP_METRIC_N; m++)
			hp_metric_plan(&h->mech, h->target, kind == HP_ROW_BLOCK, h->blocks, (enum hp_metric)m,
				       &h->plan[kind][m]);
	if (h->target == HP_MEASURE_KERNEL && !(pol = hp_kprobe_policy_open(h->model))) {
		snprintf(err, errlen, "out of memory");
		return -HP_MEASURE_E_SYSTEM;
	}
	for (size_t i = 0; i < h->nrows; i++) {
		const struct hp_row *r = &h->rows[i];
		struct hp_measure_row *p = &h->pub[i];
		const struct hp_module *mod = &h->model->mods[r->mod];
		const struct hp_function *f = &mod->funcs[r->fn];
		const struct hp_block *b = &mod->blocks[f->block_start + r->block];
		p->kind = (enum hp_row_kind)r->kind;
		p->resource = h->resources[r->resource];
		p->function = f->name;
		p->module = mod->name;
		p->module_index = r->mod;
		p->function_index = r->fn;
		p->function_address = f->addr;
		p->function_size = f->size;
		p->function_row = r->func_row;
		if (r->kind == HP_ROW_BLOCK) {
			p->block_address = f->addr + b->offset;
			p->block_offset = b->offset;
			p->block_size = b->size;
		}
		/* Where it runs: an installed copy's block when it moved. */
		p->run_address = r->kind == HP_ROW_BLOCK ? p->block_address : p->function_address;
		if (h->nmoved)
			p->run_address = hp_moved_run_address(h->moved, h->nmoved, h->pids[0], p->run_address,
							      r->kind != HP_ROW_BLOCK);
		struct hp_metric_plan rp[HP_METRIC_N];
		memcpy(rp, h->plan[r->kind], sizeof(rp));
		if (pol) {
			plan_kernel_row(h, pol, i, rp);
		} else {
			bool refused = false;
			char why[512] = "";
			if (!p->run_address) {
				refused = true;
				snprintf(why, sizeof(why),
					 "%s+0x%x: the installed copy's layout emptied this block (it was a jump to "
					 "the block laid out after it): there is nothing to probe",
					 p->function, p->block_offset);
			} else {
				plan_user_location(h, i, &refused, why, sizeof(why));
			}
			for (int m = 0; refused && m < HP_METRIC_N; m++)
				if (rp[m].applicable && rp[m].available)
					refuse_plan(&rp[m], why, "");
		}
		for (int m = 0; m < HP_METRIC_N; m++) {
			const struct hp_metric_plan *pl = &rp[m];
			struct hp_metric_info *mi = &p->metric[m];
			mi->requested = (h->metrics & HP_METRIC_BIT(m)) && pl->applicable;
			mi->label = pl->label;
			mi->available = pl->available;
			mi->mechanism = pl->available ? intern(h, pl->mechanism) : "";
			mi->reason = pl->available ? "" : intern(h, pl->reason);
			if (!mi->requested)
				continue;
			if (mi->available) {
				any = true;
				if (pl->entry == HP_MECH_SAMPLING)
					h->sampled_row[i] = true;
				/* The row's probes: the count's entry, or the timers' pair. */
				if (!h->row_entry[i] || m != HP_METRIC_COUNT)
					h->row_entry[i] = (uint8_t)pl->entry;
				if (pl->exit)
					h->row_exit[i] = (uint8_t)pl->exit;
				continue;
			}
			/* Blocks added by --blocks are best effort: one the kernel will not
			 * let be probed is reported unavailable, not fatal. */
			if (r->implicit)
				continue;
			/* Name a metric the caller asked for before the count implied by timers. */
			bool implied = m == HP_METRIC_COUNT && !(h->requested_metrics & HP_METRIC_BIT(m));
			if (!allow_partial && (!ret || (reported_implied && !implied))) {
				reported_implied = implied;
				if (r->kind == HP_ROW_BLOCK)
					snprintf(err, errlen, "%s+0x%x (block): %s: %s", f->name, b->offset,
						 hp_metric_name((enum hp_metric)m), mi->reason);
				else
					snprintf(err, errlen, "%s: %s: %s", p->resource,
						 hp_metric_name((enum hp_metric)m), mi->reason);
				ret = -HP_MEASURE_E_UNAVAILABLE;
			}
		}
	}
	hp_kprobe_policy_free(pol);
	if (!ret && !any) {
		snprintf(err, errlen, "nothing requested can be measured on this host");
		for (size_t i = 0; i < h->nrows; i++)
			for (int m = 0; m < HP_METRIC_N; m++)
				if (h->pub[i].metric[m].requested && !h->pub[i].metric[m].available) {
					snprintf(err, errlen, "%s: %s: %s", h->pub[i].resource,
						 hp_metric_name((enum hp_metric)m), h->pub[i].metric[m].reason);
					i = h->nrows;
					break;
				}
		ret = -HP_MEASURE_E_UNAVAILABLE;
	}
	return ret;
}

/* Where addr of process pid is, as uprobes need it; one /proc read per mapping. */
struct loc_cache {
	struct hp_code_location loc;
	uint64_t map_file_offset; /* file offset of loc.map_start */
	bool valid;
};

static int user_location(int pid, uint64_t addr, struct loc_cache *c, uint64_t *off)
{
	if (!c->valid || addr < c->loc.map_start || addr >= c->loc.map_end) {
		int r = hp_code_location(pid, addr, &c->loc);
		if (r < 0)
			return r;
		c->map_file_offset = c->loc.file_offset - (addr - c->loc.map_start);
		c->valid = true;
	}
	*off = c->map_file_offset + (addr - c->loc.map_start);
	return 0;
}

struct probe_build {
	struct hp_mp_probe *table;
	uint32_t *row_of; /* probe -> row it belongs to (for errors) */
	uint64_t *addr;   /* probe -> absolute address */
	uint8_t *mech;    /* probe -> enum hp_mech */
	size_t n;
	size_t cap_table, cap_row_of, cap_addr, cap_mech; /* hp_grow's, one per array */
};

static int new_probe(struct probe_build *b, size_t row, uint64_t addr, enum hp_mech mech, struct hp_mp_probe p)
{
	if (HP_GROW(b->table, b->cap_table, b->n + 1) || HP_GROW(b->row_of, b->cap_row_of, b->n + 1) ||
	    HP_GROW(b->addr, b->cap_addr, b->n + 1) || HP_GROW(b->mech, b->cap_mech, b->n + 1))
		return -ENOMEM;
	b->table[b->n] = p;
	b->row_of[b->n] = (uint32_t)row;
	b->addr[b->n] = addr;
	b->mech[b->n] = (uint8_t)mech;
	b->n++;
	return 0;
}

static bool served(const struct hp_measure_row *p, enum hp_metric m)
{
	return p->metric[m].requested && p->metric[m].available;
}

/* The probe table of every row. */
static int build_probes(struct hp_measure *h, struct probe_build *b, bool *vtime_any)
{
	const struct hp_mp_probe none = { { HP_MP_NO_SLOT, HP_MP_NO_SLOT }, HP_MP_NO_SLOT, 0 };
	bool *merged = calloc(h->nrows ? h->nrows : 1, sizeof(bool));
	if (!merged)
		return -ENOMEM;
	*vtime_any = false;
	for (size_t i = 0; i < h->nrows; i++) {
		const struct hp_measure_row *p = &h->pub[i];
		if (p->kind != HP_ROW_FUNCTION)
			continue;
		bool count = served(p, HP_METRIC_COUNT) && !h->sampled_row[i];
		bool timed =
			served(p, HP_METRIC_WALL) || served(p, HP_METRIC_VTIME) || served(p, HP_METRIC_CONCURRENCY);
		bool vtime = served(p, HP_METRIC_VTIME);
		if (!count && !timed)
			continue;
		enum hp_mech entry_mech = (enum hp_mech)h->row_entry[i], exit_mech = (enum hp_mech)h->row_exit[i];
		struct hp_mp_probe entry = none;
		entry.count_slot[0] = (uint32_t)i;
		if (timed) {
			entry.timer_slot = (uint32_t)i;
			entry.flags = HP_MP_ENTER | (vtime ? HP_MP_VTIME : 0);
		}
		/* The entry block shares the entry probe when it is measured the same way. */
		for (size_t j = i + 1; j < h->nrows && h->pub[j].kind == HP_ROW_BLOCK &&
				       h->rows[j].fn == h->rows[i].fn && h->rows[j].mod == h->rows[i].mod;
		     j++) {
			if (h->rows[j].block == 0 && served(&h->pub[j], HP_METRIC_COUNT) && !h->sampled_row[j] &&
			    h->row_entry[j] == entry_mech) {
				entry.count_slot[1] = (uint32_t)j;
				merged[j] = true;
			}
		}
		if (new_probe(b, i, p->run_address, entry_mech, entry) < 0)
			goto nomem;
		if (timed) {
			struct hp_mp_probe exit = none;
			exit.timer_slot = (uint32_t)i;
			exit.flags = HP_MP_LEAVE | (vtime ? HP_MP_VTIME : 0);
			if (new_probe(b, i, p->run_address, exit_mech, exit) < 0)
				goto nomem;
			*vtime_any |= vtime;
		}
	}
	for (size_t i = 0; i < h->nrows; i++) {
		const struct hp_measure_row *p = &h->pub[i];
		if (p->kind != HP_ROW_BLOCK || merged[i] || h->sampled_row[i] || !served(p, HP_METRIC_COUNT))
			continue;
		struct hp_mp_probe bp = none;
		bp.count_slot[0] = (uint32_t)i;
		if (new_probe(b, i, p->run_address, (enum hp_mech)h->row_entry[i], bp) < 0)
			goto nomem;
	}
	free(merged);
	return 0;
nomem:
	free(merged);
	return -ENOMEM;
}

static void probe_error(struct hp_measure *h, const struct probe_build *b, uint32_t failed, const char *what, char *err,
			size_t errlen)
{
	if (failed >= b->n) {
		snprintf(err, errlen, "%s", what);
		return;
	}
	const struct hp_measure_row *p = &h->pub[b->row_of[failed]];
	if (p->kind == HP_ROW_BLOCK)
		snprintf(err, errlen, "%s+0x%x (block): %s", p->function, p->block_offset, what);
	else
		snprintf(err, errlen, "%s: %s", p->function, what);
}

/* Rows whose probe the kernel refused: every requested metric becomes unavailable with the kernel's reason. */
static void mark_refused(struct hp_measure *h, const struct probe_build *b)
{
	const struct hp_probe_failure *f;
	size_t n = hp_probes_skipped(h->probes, &f);
	for (size_t k = 0; k < n; k++) {
		const struct hp_mp_probe *p = &b->table[f[k].idx];
		uint32_t rows[3] = { p->count_slot[0], p->count_slot[1], p->timer_slot };
		for (int x = 0; x < 3; x++) {
			if (rows[x] == HP_MP_NO_SLOT || rows[x] >= h->nrows)
				continue;
			struct hp_measure_row *r = &h->pub[rows[x]];
			for (int m = 0; m < HP_METRIC_N; m++) {
				if (!r->metric[m].requested || !r->metric[m].available)
					continue;
				r->metric[m].available = false;
				r->metric[m].mechanism = "";
				r->metric[m].reason = hp_probes_refusal(f[k].err);
			}
		}
	}
}

int hp_measure_arm(struct hp_measure *h, const struct hp_probe_config *base, unsigned sample_hz, bool allow_partial,
		   char *err, size_t errlen)
{
	struct probe_build b = { 0 };
	struct hp_probe_config cfg = *base;
	bool vtime_any = false, sampled_any = false;
	int ret = -HP_MEASURE_E_SYSTEM;
	for (size_t i = 0; i < h->nrows; i++)
		sampled_any |= h->sampled_row[i];
	if (build_probes(h, &b, &vtime_any) < 0) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (b.n) {
		cfg.nslots = (uint32_t)h->nrows;
		cfg.nprobes = (uint32_t)b.n;
		cfg.switch_hook = vtime_any ? h->mech.switch_hook : HP_MECH_NONE;
		cfg.use_multi = h->target != HP_MEASURE_KERNEL && h->mech.user_entry == HP_MECH_UPROBE_MULTI;
		cfg.sample_filter = sampled_any && (cfg.tgid_on || cfg.comm_on || cfg.cgroup_on);
	} else {
		cfg.nslots = 1;
		cfg.nprobes = 1;
		cfg.sample_filter = sampled_any && (cfg.tgid_on || cfg.comm_on || cfg.cgroup_on);
		cfg.switch_hook = HP_MECH_NONE;
	}
	bool timing = getenv("HOTPATH_TIMING") != NULL;
	double tp = hp_now();
	if (b.n || cfg.sample_filter) {
		char perr[512];
		if (!(h->probes = hp_probes_open(&cfg, perr, sizeof(perr)))) {
			snprintf(err, errlen, "%s", perr);
			goto out;
		}
	}
	if (timing)
		fprintf(stderr, "  arm   bpf load     %.3f s (%zu probes)\n", hp_now() - tp, b.n);
	tp = hp_now();
	struct loc_cache lc = { 0 };
	for (size_t k = 0; k < b.n; k++) {
		int r = hp_probes_set(h->probes, (uint32_t)k, &b.table[k]);
		enum hp_mech mech = (enum hp_mech)b.mech[k];
		const struct hp_measure_row *p = &h->pub[b.row_of[k]];
		if (r < 0) {
			snprintf(err, errlen, "writing the probe table: %s", strerror(-r));
			goto out;
		}
		if (h->target == HP_MEASURE_KERNEL) {
			uint64_t off = b.addr[k] - p->function_address;
			r = hp_probes_add_kernel(h->probes, (uint32_t)k, mech, p->function, off, b.addr[k]);
		} else {
			uint64_t off = 0;
			r = user_location(h->pids[0], b.addr[k], &lc, &off);
			if (r < 0) {
				probe_error(h, &b, (uint32_t)k,
					    r == -ESRCH ?
						    "the process exited before its probes were attached" :
						    "the code is not in an executable file mapping of the process",
					    err, errlen);
				ret = r == -ESRCH ? -HP_MEASURE_E_NOT_FOUND : -HP_MEASURE_E_SYSTEM;
				goto out;
			}
			for (size_t q = 0; q < h->npids && r >= 0; q++) {
				if (q && hp_process_maps_file(h->pids[q], lc.loc.dev, lc.loc.ino) != 1)
					continue; /* runs another binary: its calls are not this code */
				r = hp_probes_add_user(h->probes, (uint32_t)k, mech, lc.loc.path, off, h->pids[q]);
			}
		}
		if (r < 0) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
	}
	if (b.n) {
		uint32_t failed = UINT32_MAX;
		char aerr[768];
		if (hp_probes_attach(h->probes, true, &failed, aerr, sizeof(aerr)) < 0) {
			probe_error(h, &b, failed, aerr, err, errlen);
			goto out;
		}
		if (timing)
			fprintf(stderr, "  arm   attach       %.3f s\n", hp_now() - tp);
		/* A location the kernel refused fails the request unless it is only
		 * a block --blocks added (or --partial was given). */
		const struct hp_probe_failure *fl;
		size_t nf = hp_probes_skipped(h->probes, &fl);
		for (size_t k = 0; k < nf && !allow_partial; k++) {
			const struct hp_mp_probe *tp = &b.table[fl[k].idx];
			uint32_t slots[3] = { tp->count_slot[0], tp->count_slot[1], tp->timer_slot };
			for (int x = 0; x < 3; x++) {
				if (slots[x] >= h->nrows || h->rows[slots[x]].implicit)
					continue;
				probe_error(h, &b, fl[k].idx, hp_probes_refusal(fl[k].err), err, errlen);
				hp_probes_detach(h->probes);
				ret = -HP_MEASURE_E_UNAVAILABLE;
				goto out;
			}
		}
		mark_refused(h, &b);
	}
	if (sampled_any) {
		struct hp_sampler_opts so = { .frequency = sample_hz };
		char serr[512];
		if (cfg.sample_filter) {
			so.use_filter = true;
			so.filter_prog_fd = hp_probes_sample_filter_fd(h->probes);
		}
		if (!(h->sampler = hp_sampler_open(h->model, &so, serr, sizeof(serr)))) {
			snprintf(err, errlen, "sampled block counts: %s", serr);
			goto out;
		}
	}
	ret = 0;
out:
	free(b.table);
	free(b.row_of);
	free(b.addr);
	free(b.mech);
	return ret;
}
