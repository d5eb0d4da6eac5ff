// SPDX-License-Identifier: Apache-2.0
/*
 * Turns /proc/kallsyms into the functions of vmlinux and of every loaded
 * module. kallsyms has no sizes, so a function ends where the next text symbol
 * starts (__pfx_ and __cfi_ padding symbols are boundaries, not functions).
 * In a module, no function runs across the start of one of the module's
 * sections (/sys/module/NAME/sections, readable by root) or into one of its
 * non-text symbols; so the last function of a section ends where the next
 * section starts, the module's last function at its first non-text section or
 * symbol above it (at most a page on), and what the loader left between them
 * as fill is trimmed once the bytes are read (hp_ktext_trim_fill). A module's init_module/cleanup_module are aliases the
 * module_init()/module_exit() macros add: the function keeps its own name.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "isa/isa.h"
#include "target/kallsyms.h"

/* Without a nearer non-text symbol, a module's last function is bounded here. */
#define MODULE_TAIL_MAX 4096

static bool has_prefix(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

static bool ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);

	return a >= b && !strcmp(s + a - b, suf);
}

/* Names of the markers, in enum hp_kernel_marker order. */
static const char *const marker_names[HP_KMARK_COUNT] = {
	"__start___bug_table",
	"__stop___bug_table",
	"__start___ex_table",
	"__stop___ex_table",
	"__noinstr_text_start",
	"__noinstr_text_end",
	"__entry_text_start",
	"__entry_text_end",
	"__irqentry_text_start",
	"__irqentry_text_end",
	"__softirqentry_text_start",
	"__softirqentry_text_end",
	"__sched_text_start",
	"__sched_text_end",
	"__lock_text_start",
	"__lock_text_end",
	"__cpuidle_text_start",
	"__cpuidle_text_end",
	"__kprobes_text_start",
	"__kprobes_text_end",
	"__start_kprobe_blacklist",
	"__stop_kprobe_blacklist",
	"__fentry__",
	"__start___jump_table",
	"__stop___jump_table",
	"__start_static_call_sites",
	"__stop_static_call_sites",
};

/* Their lengths, for a cheap first test (every marker starts with "__"). */
static size_t marker_lens[HP_KMARK_COUNT];

/* The address at the start of a kallsyms line: its hex digits, as strtoull
 * would read them (which it still does for anything unusual: more than 16
 * digits, a sign, space or 0x in front). */
static uint64_t line_addr(const char *p, char **end)
{
	static const int8_t hexval[256] = {
		['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
		['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
		['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
	};
	uint64_t x = 0;
	size_t i;

	for (i = 0; i < 17 && hexval[(uint8_t)p[i]]; i++)
		x = x << 4 | (uint64_t)(hexval[(uint8_t)p[i]] - 1);
	if (i == 0 || i > 16 || (i == 1 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')))
		return strtoull(p, end, 16);
	*end = (char *)p + i;
	return x;
}

static int cmp_ksym(const void *a, const void *b)
{
	const struct hp_ksym *x = a, *y = b;

	if (x->mod != y->mod)
		return x->mod < y->mod ? -1 : 1;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/*
 * Sort by (module, address), keeping the file's order where they are equal
 * (as glibc's merge sort does). kallsyms lists vmlinux first, in address
 * order, then the modules: so the sorted run it starts with is left as it is
 * and only the rest is sorted, when all of the rest sorts after it (the
 * result is then the very order a sort of the whole would give); else the
 * whole is sorted.
 */
static void sort_syms(struct hp_ksym *v, size_t n)
{
	size_t run = 1;

	while (run < n && cmp_ksym(&v[run - 1], &v[run]) <= 0)
		run++;
	if (run == n)
		return;
	qsort(v + run, n - run, sizeof(*v), cmp_ksym);
	if (cmp_ksym(&v[run - 1], &v[run]) > 0)
		qsort(v, n, sizeof(*v), cmp_ksym);
}

static int cmp_kdata(const void *a, const void *b)
{
	const struct hp_kdata *x = a, *y = b;

	if (x->mod != y->mod)
		return x->mod < y->mod ? -1 : 1;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int push_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
	if (HP_GROW(*v, *cap, *n + 1))
		return -ENOMEM;
	(*v)[(*n)++] = x;
	return 0;
}

static int push_data(struct hp_kallsyms *ks, uint32_t mod, uint64_t addr)
{
	if (HP_GROW(ks->data, ks->capdata, ks->ndata + 1))
		return -ENOMEM;
	ks->data[ks->ndata++] = (struct hp_kdata){ mod, addr };
	return 0;
}

static int push_sc(struct hp_ksc_sym **v, size_t *n, size_t *cap, uint32_t mod, uint64_t addr, const char *name)
{
	if (HP_GROW(*v, *cap, *n + 1))
		return -ENOMEM;
	struct hp_ksc_sym *e = &(*v)[*n];
	e->mod = mod;
	e->addr = addr;
	if (!(e->name = strdup(name)))
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* The index + 1 of module modname, added if new; 0 on allocation failure. */
static uint32_t module_index(struct hp_kallsyms *ks, const char *modname)
{
	size_t i;

	for (i = 0; i < ks->nmods && strcmp(ks->modnames[i], modname); i++)
		;
	if (i == ks->nmods) {
		if (HP_GROW(ks->modnames, ks->capmods, ks->nmods + 1))
			return 0;
		if (!(ks->modnames[ks->nmods] = strdup(modname)))
			return 0;
		ks->nmods++;
	}
	return (uint32_t)i + 1;
}

static bool is_text(char type)
{
	return type == 't' || type == 'T' || type == 'w' || type == 'W';
}

int hp_kallsyms_read(struct hp_model *m, FILE *fp, struct hp_kallsyms *ks, char *err, size_t errlen)
{
	char line[1024];
	int r = 0;

	if (!marker_lens[0])
		for (int k = 0; k < HP_KMARK_COUNT; k++)
			marker_lens[k] = strlen(marker_names[k]);
	while (fgets(line, sizeof(line), fp)) {
		char *p = line, *name, *modname = NULL, *e;
		uint64_t addr = line_addr(p, &e);
		char type;
		uint32_t mod = 0;

		if (e == p || *e != ' ' || !e[1] || e[2] != ' ')
			continue;
		type = e[1];
		name = e + 3;
		name[strcspn(name, "\n")] = 0;
		if ((e = strchr(name, '\t')) || (e = strchr(name, ' '))) {
			*e++ = 0;
			if ((modname = strchr(e, '['))) {
				modname++;
				modname[strcspn(modname, "]")] = 0;
			}
		}
		if (!modname && name[0] == '_' && name[1] == '_') {
			size_t nl = strlen(name);
			for (int k = 0; k < HP_KMARK_COUNT; k++)
				if (nl == marker_lens[k] && !memcmp(name, marker_names[k], nl))
					ks->markers[k] = addr;
		}
		/* JIT'd BPF programs and ftrace/kprobe trampolines come and go
		 * and have no sizes: they are not part of the code model. */
		if (modname && (!strcmp(modname, "bpf") || has_prefix(modname, "__builtin")))
			continue;
		if (modname && !(mod = module_index(ks, modname))) {
			r = -ENOMEM;
			break;
		}
		if (!is_text(type)) {
			if (has_prefix(name, "__SCK__") &&
			    (r = push_sc(&ks->sc_keys, &ks->nsc_keys, &ks->cap_sc_keys, mod, addr, name + 7)) < 0)
				break;
			if (mod && (r = push_data(ks, mod, addr)) < 0)
				break;
			continue;
		}
		if (has_prefix(name, "__SCT__") &&
		    (r = push_sc(&ks->sc_tramps, &ks->nsc_tramps, &ks->cap_sc_tramps, mod, addr, name + 7)) < 0)
			break;
		if (!strcmp(name, "_text") && !modname)
			ks->text = addr;
		else if (!strcmp(name, "_etext") && !modname)
			ks->etext = addr;
		/* (one search for "thunk" first: most names have none) */
		if (!strstr(name, "thunk"))
			;
		else if (strstr(name, "return_thunk"))
			r = push_u64(&ks->ret_thunks, &ks->nret, &ks->capret, addr);
		else if (strstr(name, "indirect_thunk_") || strstr(name, "indirect_jump_thunk_") ||
			 strstr(name, "indirect_call_thunk_"))
			r = push_u64(&ks->ind_thunks, &ks->nind, &ks->capind, addr);
		if (r < 0)
			break;
		if (HP_GROW(ks->syms, ks->cap, ks->n + 1)) {
			r = -ENOMEM;
			break;
		}
		bool boundary = has_prefix(name, "__pfx_") || has_prefix(name, "__cfi_");
		bool label = !strcmp(name, "_text") || !strcmp(name, "_stext") || !strcmp(name, "_etext") ||
			     !strcmp(name, "_sinittext") || !strcmp(name, "_einittext") ||
			     (name[0] == '_' && (ends_with(name, "_start") || ends_with(name, "_end"))) ||
			     has_prefix(name, "__pi_");
		bool generic = mod && (!strcmp(name, "init_module") || !strcmp(name, "cleanup_module"));
		const char *pooled = boundary ? NULL : hp_model_strdup(m, name);
		if (!boundary && !pooled) {
			r = -ENOMEM;
			break;
		}
		ks->syms[ks->n++] =
			(struct hp_ksym){ addr, pooled, mod, type == 'T' || type == 'W', boundary, label, generic };
	}
	if (r < 0) {
		snprintf(err, errlen, "reading /proc/kallsyms: %s", strerror(-r));
		return r;
	}
	if (ferror(fp)) {
		r = errno ? -errno : -EIO;
		snprintf(err, errlen, "reading /proc/kallsyms: %s", strerror(-r));
		return r;
	}
	if (!ks->text || !ks->etext || ks->etext <= ks->text) {
		snprintf(err, errlen,
			 "/proc/kallsyms has no _text/_etext with addresses "
			 "(kernel.kptr_restrict set, or not root?)");
		return -EPERM;
	}
	/* (qsort wants a real array even when there is nothing to sort) */
	if (ks->n)
		sort_syms(ks->syms, ks->n);
	if (ks->ndata)
		qsort(ks->data, ks->ndata, sizeof(*ks->data), cmp_kdata);
	if (ks->nret)
		qsort(ks->ret_thunks, ks->nret, sizeof(uint64_t), cmp_u64);
	if (ks->nind)
		qsort(ks->ind_thunks, ks->nind, sizeof(uint64_t), cmp_u64);
	return 0;
}

int hp_kallsyms_read_sections(struct hp_kallsyms *ks, const char *dir)
{
	int modules = 0;

	for (size_t i = 0; i < ks->nmods; i++) {
		char path[512], line[64];
		struct dirent *e;
		bool any = false;
		DIR *d;

		snprintf(path, sizeof(path), "%s/%s/sections", dir, ks->modnames[i]);
		if (!(d = opendir(path)))
			continue;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			snprintf(path, sizeof(path), "%s/%s/sections/%s", dir, ks->modnames[i], e->d_name);
			FILE *f = fopen(path, "re");
			if (!f)
				continue;
			char *end = NULL;
			uint64_t addr = fgets(line, sizeof(line), f) ? strtoull(line, &end, 16) : 0;
			fclose(f);
			/* Without privilege the addresses read as zero. */
			if (!addr || end == line)
				continue;
			if (push_data(ks, (uint32_t)i + 1, addr) < 0) {
				closedir(d);
				return -ENOMEM;
			}
			any = true;
		}
		closedir(d);
		modules += any;
	}
	if (ks->ndata)
		qsort(ks->data, ks->ndata, sizeof(*ks->data), cmp_kdata);
	return modules;
}

/* The lowest non-text symbol or section start of module mod above addr, or 0. */
static uint64_t data_above(const struct hp_kallsyms *ks, uint32_t mod, uint64_t addr)
{
	size_t lo = 0, hi = ks->ndata;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct hp_kdata *d = &ks->data[mid];

		if (d->mod < mod || (d->mod == mod && d->addr <= addr))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < ks->ndata && ks->data[lo].mod == mod ? ks->data[lo].addr : 0;
}

/* Turn sorted symbols of one module into functions: each ends at the next
 * symbol at a higher address (a __pfx_ padding symbol included), at the next
 * section start or non-text symbol of its module, or at end. */
static int build_module(struct hp_model *m, const struct hp_kallsyms *ks, struct hp_module *mod,
			const struct hp_ksym *s, size_t n, uint64_t lo, uint64_t end)
{
	size_t i, j = 0;

	for (i = 0; i < n; i++) {
		uint64_t next, data;

		if (s[i].boundary || s[i].addr < lo || s[i].addr >= end)
			continue;
		if (j <= i)
			j = i + 1;
		while (j < n && s[j].addr <= s[i].addr)
			j++;
		next = j < n && s[j].addr < end ? s[j].addr : end;
		if (s[i].mod && (data = data_above(ks, s[i].mod, s[i].addr)) && data < next)
			next = data;
		uint32_t flags = s[i].global && !s[i].label ? HP_FN_BUILD_GLOBAL : 0;
		if (s[i].generic)
			flags |= HP_FN_BUILD_GENERIC;
		int r = hp_module_add_function(mod, s[i].name, s[i].addr, next - s[i].addr, flags);
		if (r < 0)
			return r;
	}
	/* Section markers and generic aliases lose to any real name at the same address. */
	return hp_module_normalize(m, mod);
}

int hp_kallsyms_build(struct hp_model *m, const struct hp_kallsyms *ks, char *err, size_t errlen)
{
	size_t i, s0;

	/* vmlinux first, then one module per [mod] tag, in kallsyms order. */
	for (s0 = 0, i = 0; i <= ks->n; i++) {
		if (i < ks->n && ks->syms[i].mod == ks->syms[s0].mod)
			continue;
		uint32_t mi = ks->n ? ks->syms[s0].mod : 0;
		struct hp_module *mod;
		uint64_t lo, hi;

		if (mi == 0) {
			lo = ks->text;
			hi = ks->etext;
		} else {
			lo = ks->syms[s0].addr;
			hi = ks->syms[i - 1].addr + MODULE_TAIL_MAX;
		}
		mod = hp_model_add_module(m, mi ? ks->modnames[mi - 1] : "vmlinux", lo);
		if (!mod || build_module(m, ks, mod, ks->syms + s0, i - s0, lo, hi) < 0) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		if (mi && mod->nfuncs)
			mod->funcs[mod->nfuncs - 1].flags |= HP_FN_SIZE_ESTIMATED;
		s0 = i;
		if (i >= ks->n)
			break;
	}
	return 0;
}

static int cmp_sc_name(const void *a, const void *b)
{
	const struct hp_ksc_sym *x = a, *y = b;

	if (x->mod != y->mod)
		return x->mod < y->mod ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_tramp_key(const void *a, const void *b)
{
	const struct hp_static_call_tramp *x = a, *y = b;

	return x->key < y->key ? -1 : x->key > y->key;
}

long hp_kallsyms_static_call_tramps(const struct hp_kallsyms *ks, struct hp_static_call_tramp **out)
{
	struct hp_ksc_sym *tramps = NULL;
	struct hp_static_call_tramp *v = NULL;
	size_t n = 0, u = 0;

	*out = NULL;
	if (!ks->nsc_keys || !ks->nsc_tramps)
		return 0;
	tramps = malloc(ks->nsc_tramps * sizeof(*tramps));
	v = malloc(ks->nsc_keys * sizeof(*v));
	if (!tramps || !v) {
		free(tramps);
		free(v);
		return -ENOMEM;
	}
	memcpy(tramps, ks->sc_tramps, ks->nsc_tramps * sizeof(*tramps));
	qsort(tramps, ks->nsc_tramps, sizeof(*tramps), cmp_sc_name);
	for (size_t i = 0; i < ks->nsc_keys; i++) {
		const struct hp_ksc_sym *t =
			bsearch(&ks->sc_keys[i], tramps, ks->nsc_tramps, sizeof(*tramps), cmp_sc_name);
		/* A name listed twice at two addresses names no one trampoline. */
		bool twice = t && ((t > tramps && !cmp_sc_name(t - 1, t) && t[-1].addr != t->addr) ||
				   (t + 1 < tramps + ks->nsc_tramps && !cmp_sc_name(t + 1, t) && t[1].addr != t->addr));
		if (t && !twice)
			v[n++] = (struct hp_static_call_tramp){ ks->sc_keys[i].addr, t->addr };
	}
	free(tramps);
	if (n)
		qsort(v, n, sizeof(*v), cmp_tramp_key);
	/* One trampoline per key: a key address listed under two names with
	 * two trampolines is not trusted at all. */
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;
		bool same = true;
		for (; j < n && v[j].key == v[i].key; j++)
			same &= v[j].tramp == v[i].tramp;
		if (same)
			v[u++] = v[i];
		i = j;
	}
	if (!u) {
		free(v);
		return 0;
	}
	*out = v;
	return (long)u;
}

void hp_kallsyms_free(struct hp_kallsyms *ks)
{
	for (size_t i = 0; i < ks->nsc_keys; i++)
		free(ks->sc_keys[i].name);
	for (size_t i = 0; i < ks->nsc_tramps; i++)
		free(ks->sc_tramps[i].name);
	free(ks->sc_keys);
	free(ks->sc_tramps);
	free(ks->syms);
	for (size_t i = 0; i < ks->nmods; i++)
		free(ks->modnames[i]);
	free(ks->modnames);
	free(ks->data);
	free(ks->ret_thunks);
	free(ks->ind_thunks);
	memset(ks, 0, sizeof(*ks));
}

uint32_t hp_ktext_trim_fill(const uint8_t *code, uint32_t size, uint64_t addr, bool int3_fill)
{
	uint32_t p = size, off = 0;

	while (p && (code[p - 1] == 0x00 || (int3_fill && code[p - 1] == 0xcc)))
		p--;
	if (p == size || p == 0)
		return size;
	while (off < p) {
		struct hp_isa_insn d;

		if (hp_isa_decode(code + off, size - off, addr + off, &d) < 0)
			return size; /* no boundary to cut at: leave the function as it is */
		off += d.len;
	}
	return off;
}
