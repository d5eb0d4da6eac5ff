// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel's probing rules for one function (see kprobe_policy.h). Lists
 * are read once and kept sorted: ftrace-able names from tracefs, blacklisted
 * ranges from debugfs or, when debugfs is not mounted, the ranges between the
 * text section markers in /proc/kallsyms that the kernel itself refuses
 * (entry, irqentry, softirqentry, noinstr and __kprobes text). Without
 * tracefs, an ftrace site is recognized by the function's first instruction:
 * the 5-byte nop (or a call, while traced) that every function compiled with
 * -mfentry -mrecord-mcount starts with, after endbr64 where IBT is built in.
 */
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/grow.h"
#include "target/kallsyms.h"
#include "target/kprobe_policy.h"

struct range {
	uint64_t lo, hi;
	const char *why; /* static */
	char name[64];
};

struct hp_kprobe_policy {
	struct hp_model *m;
	char **ftrace_names; /* sorted; NULL when tracefs is not readable */
	size_t nftrace;
	struct range *ranges;
	size_t nranges, cap_ranges;
	bool blacklist_file;
	struct btf *vmlinux_btf;
	/* Per module of the model (index 0, vmlinux, unused): its BTF from
	 * /sys/kernel/btf/NAME, loaded on first use; a module built without
	 * BTF (an out-of-tree module built without the kernel's vmlinux) has
	 * none, and fentry/fexit cannot attach to its functions. */
	struct btf **mod_btf;
	uint8_t *mod_btf_state; /* 0 not looked at, 1 loaded, 2 absent */
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void read_ftrace_names(struct hp_kprobe_policy *p)
{
	static const char *const paths[] = { "/sys/kernel/tracing/available_filter_functions",
					     "/sys/kernel/debug/tracing/available_filter_functions" };
	for (size_t i = 0; i < 2 && !p->ftrace_names; i++) {
		FILE *f = fopen(paths[i], "re");
		if (!f)
			continue;
		char *fbuf = malloc(HP_KALLSYMS_BUF); /* ~50,000 lines: a few reads, not thousands */
		if (fbuf)
			setvbuf(f, fbuf, _IOFBF, HP_KALLSYMS_BUF);
		char line[512];
		size_t cap = 0;
		char **v = NULL;
		while (fgets(line, sizeof(line), f)) {
			line[strcspn(line, " \t\n")] = '\0';
			if (!line[0])
				continue;
			if (HP_GROW(v, cap, p->nftrace + 1))
				break;
			if (!(v[p->nftrace] = strdup(line)))
				break;
			p->nftrace++;
		}
		fclose(f);
		free(fbuf);
		if (v)
			qsort(v, p->nftrace, sizeof(*v), cmp_str);
		p->ftrace_names = v ? v : calloc(1, sizeof(char *));
	}
}

static int add_range(struct hp_kprobe_policy *p, uint64_t lo, uint64_t hi, const char *why, const char *name)
{
	if (HP_GROW(p->ranges, p->cap_ranges, p->nranges + 1))
		return -ENOMEM;
	struct range *v = p->ranges;
	v[p->nranges] = (struct range){ lo, hi, why, "" };
	snprintf(v[p->nranges].name, sizeof(v[p->nranges].name), "%s", name ? name : "");
	p->nranges++;
	return 0;
}

/* debugfs kprobes/blacklist: "0xSTART-0xEND\tSYMBOL" per line. */
static bool read_blacklist(struct hp_kprobe_policy *p)
{
	FILE *f = fopen("/sys/kernel/debug/kprobes/blacklist", "re");
	if (!f)
		return false;
	char line[512], sym[128];
	unsigned long long lo, hi;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "0x%llx-0x%llx %127s", &lo, &hi, sym) == 3)
			add_range(p, lo, hi, "the kernel's kprobe blacklist", sym);
	fclose(f);
	return true;
}

/* Text sections the kernel never lets kprobes into, from their kallsyms markers. */
static void read_section_markers(struct hp_kprobe_policy *p)
{
	static const struct {
		const char *start, *end, *why;
	} secs[] = {
		{ "__entry_text_start", "__entry_text_end", "entry text (.entry.text)" },
		{ "__irqentry_text_start", "__irqentry_text_end", "interrupt entry text (.irqentry.text)" },
		{ "__softirqentry_text_start", "__softirqentry_text_end", "softirq entry text (.softirqentry.text)" },
		{ "__noinstr_text_start", "__noinstr_text_end", "noinstr text (.noinstr.text)" },
		{ "__kprobes_text_start", "__kprobes_text_end", "__kprobes text (.kprobes.text)" },
	};
	uint64_t lo[5] = { 0 }, hi[5] = { 0 };
	FILE *f = fopen("/proc/kallsyms", "re");
	if (!f)
		return;
	char line[512], name[256], type;
	unsigned long long addr;
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '\0' || sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || name[0] != '_')
			continue;
		for (size_t i = 0; i < 5; i++) {
			if (!strcmp(name, secs[i].start))
				lo[i] = addr;
			else if (!strcmp(name, secs[i].end))
				hi[i] = addr;
		}
	}
	fclose(f);
	for (size_t i = 0; i < 5; i++)
		if (lo[i] && hi[i] > lo[i])
			add_range(p, lo[i], hi[i], secs[i].why, NULL);
}

struct hp_kprobe_policy *hp_kprobe_policy_open(struct hp_model *m)
{
	struct hp_kprobe_policy *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->m = m;
	/* HOTPATH_TIMING=1 prints what each list took. */
	bool timing = getenv("HOTPATH_TIMING") != NULL;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
#define STEP(what)                                                                                          \
	do {                                                                                                \
		if (timing) {                                                                               \
			clock_gettime(CLOCK_MONOTONIC, &t1);                                                \
			fprintf(stderr, "  policy %-14s %.3f s\n", what,                                    \
				(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9); \
			t0 = t1;                                                                            \
		}                                                                                           \
	} while (0)
	read_ftrace_names(p);
	STEP("ftrace names");
	p->blacklist_file = read_blacklist(p);
	if (!p->blacklist_file)
		read_section_markers(p);
	STEP(p->blacklist_file ? "blacklist" : "text markers");
	p->vmlinux_btf = btf__load_vmlinux_btf();
	if (libbpf_get_error(p->vmlinux_btf))
		p->vmlinux_btf = NULL;
	STEP("vmlinux btf");
#undef STEP
	return p;
}

/* The function starts with an ftrace site: nop5 or call rel32, after endbr64 if present. */
static bool entry_has_ftrace_site(struct hp_model *m, const struct hp_function *f)
{
	static const uint8_t nop5[5] = { 0x0f, 0x1f, 0x44, 0x00, 0x00 }, endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
	uint8_t b[9];
	if (f->size < 5 || !m->read || m->read(m, f->addr, b, f->size < 9 ? 5 : 9) < 0)
		return false;
	const uint8_t *site = b;
	if (f->size >= 9 && !memcmp(b, endbr64, 4))
		site = b + 4;
	return !memcmp(site, nop5, 5) || site[0] == 0xe8;
}

/* The BTF of the model's module mi (not vmlinux), or NULL when it has none. */
static struct btf *module_btf(struct hp_kprobe_policy *p, size_t mi)
{
	if (!p->vmlinux_btf || mi == 0 || mi >= p->m->nmods)
		return NULL;
	if (!p->mod_btf) {
		p->mod_btf = calloc(p->m->nmods, sizeof(*p->mod_btf));
		p->mod_btf_state = calloc(p->m->nmods, 1);
		if (!p->mod_btf || !p->mod_btf_state) {
			free(p->mod_btf);
			free(p->mod_btf_state);
			p->mod_btf = NULL;
			p->mod_btf_state = NULL;
			return NULL;
		}
	}
	if (!p->mod_btf_state[mi]) {
		struct btf *b = btf__load_module_btf(p->m->mods[mi].name, p->vmlinux_btf);
		if (libbpf_get_error(b))
			b = NULL;
		p->mod_btf[mi] = b;
		p->mod_btf_state[mi] = b ? 1 : 2;
	}
	return p->mod_btf[mi];
}

void hp_kprobe_policy_check(struct hp_kprobe_policy *p, const struct hp_module *mod, const struct hp_function *f,
			    struct hp_kfunc_rules *out)
{
	memset(out, 0, sizeof(*out));
	if (p->ftrace_names) {
		const char *key = f->name;
		out->ftrace_site = bsearch(&key, p->ftrace_names, p->nftrace, sizeof(char *), cmp_str) != NULL;
	} else {
		out->ftrace_site = entry_has_ftrace_site(p->m, f);
	}
	bool in_module = mod != &p->m->mods[0];
	struct btf *mb = in_module ? module_btf(p, (size_t)(mod - p->m->mods)) : NULL;
	if (!in_module)
		out->btf = p->vmlinux_btf && btf__find_by_name_kind(p->vmlinux_btf, f->name, BTF_KIND_FUNC) > 0;
	else
		out->btf = mb && btf__find_by_name_kind(mb, f->name, BTF_KIND_FUNC) > 0;
	if (!out->ftrace_site)
		snprintf(out->no_trampoline, sizeof(out->no_trampoline),
			 "%s has no ftrace site (notrace or not instrumentable), so fentry/fexit cannot attach",
			 f->name);
	else if (!out->btf && in_module && !mb)
		snprintf(out->no_trampoline, sizeof(out->no_trampoline),
			 "module %s has no BTF (/sys/kernel/btf/%s), so fentry/fexit cannot attach to %s", mod->name,
			 mod->name, f->name);
	else if (!out->btf)
		snprintf(out->no_trampoline, sizeof(out->no_trampoline),
			 "%s is not described in the kernel's BTF, so fentry/fexit cannot attach", f->name);
	out->kprobe_ok = true;
	for (size_t i = 0; i < p->nranges; i++) {
		const struct range *r = &p->ranges[i];
		if (f->addr < r->hi && f->addr + (f->size ? f->size : 1) > r->lo) {
			out->kprobe_ok = false;
			snprintf(out->no_kprobe, sizeof(out->no_kprobe),
				 "%s is in %s%s%s: the kernel refuses kprobes there", f->name, r->why,
				 r->name[0] ? " as " : "", r->name);
			break;
		}
	}
}

void hp_kprobe_policy_free(struct hp_kprobe_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nftrace; i++)
		free(p->ftrace_names[i]);
	free(p->ftrace_names);
	free(p->ranges);
	for (size_t i = 0; p->mod_btf && i < p->m->nmods; i++)
		btf__free(p->mod_btf[i]);
	free(p->mod_btf);
	free(p->mod_btf_state);
	btf__free(p->vmlinux_btf);
	free(p);
}
