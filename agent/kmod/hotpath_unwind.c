// SPDX-License-Identifier: GPL-2.0
/*
 * The copies' names and unwind entries. A heap is a slot of this module's own
 * text (hotpath_heaps.S), so the kernel looks a copy's addresses up in this
 * module: kallsyms in THIS_MODULE->kallsyms, the ORC unwinder in
 * THIS_MODULE->arch's table. A copy registered here (HOTPATH_HEAP_UNWIND)
 * adds, from its position map (hotpath_uapi.h):
 *   - a symbol per function copy, named as the original, so a stack trace,
 *     /proc/kallsyms and perf show "vfs_read [hotpath]";
 *   - the ORC entries of the original code each byte of the copy runs as: a
 *     run of the original's instructions gets the original's entries at the
 *     same distances, an added branch the entry in effect where the map says,
 *     and the end of every copy an undefined entry, so an unwinder stops with
 *     an error rather than reading a wrong frame.
 * Both tables are rebuilt whole and published as the kernel publishes a
 * module's: kallsyms with rcu_assign_pointer and a grace period before the
 * old table is freed; the ORC table, whose three fields readers (the unwinder,
 * also in NMI) load without a lock, emptied first (count 0: no entry found,
 * the unwinder's error path), then given its new arrays, then its count, with a
 * grace period between the steps, so no reader pairs a count with arrays it
 * does not cover. ORC tables hold 32-bit offsets to the code: the arrays live
 * in module space (module_alloc), within reach of the heaps.
 */
#include <linux/elf.h>
#include <linux/kallsyms.h>
#include <linux/module.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/string.h>
#include <linux/vmalloc.h>
#ifdef CONFIG_UNWINDER_ORC
#include <asm/orc_types.h>
#endif

#include "hotpath.h"

#define HP_MAP_SYMS_MAX 4096u
#define HP_MAP_RUNS_MAX 65536u

struct hp_sym {
	unsigned long addr, size;
	char name[KSYM_NAME_LEN];
};

struct hp_orc_at {
	unsigned long ip;
#ifdef CONFIG_UNWINDER_ORC
	struct orc_entry orc;
#endif
	u8 rank; /* at one ip: a copy's entry (0), the module's own (1), an end (2) */
};

struct hp_unwind {
	struct hp_sym *syms;
	unsigned int nsyms;
	struct hp_orc_at *orcs;
	unsigned int norcs, cap;
};

static struct mod_kallsyms *hp_kallsyms_now; /* published by us; NULL: the module's own */

#ifdef CONFIG_UNWINDER_ORC
static void *(*hp_module_alloc)(unsigned long size);
static int *hp_own_ip;
static struct orc_entry *hp_own_orc;
static unsigned int hp_own_n;
static int *hp_kernel_ip;
static struct orc_entry *hp_kernel_orc;
static unsigned int hp_kernel_n;
static int *hp_ip_now; /* published by us (module_alloc); NULL: the module's own */
static struct orc_entry *hp_orc_now;

static unsigned long hp_orc_ip(const int *ip)
{
	return (unsigned long)ip + *ip;
}

/* The entry in effect at ip in a sorted table: the last at or before it. */
static long hp_orc_index(const int *ipt, unsigned int n, unsigned long ip)
{
	long lo = 0, hi = (long)n - 1, found = -1;

	while (lo <= hi) {
		long mid = lo + (hi - lo) / 2;

		if (hp_orc_ip(&ipt[mid]) <= ip) {
			found = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return found;
}

static int hp_orc_push(struct hp_unwind *uw, unsigned long ip, const struct orc_entry *e, u8 rank)
{
	if (uw->norcs == uw->cap) {
		unsigned int cap = uw->cap ? uw->cap * 2 : 256;
		struct hp_orc_at *o = kvrealloc(uw->orcs, uw->cap * sizeof(*o), cap * sizeof(*o), GFP_KERNEL);

		if (!o)
			return -ENOMEM;
		uw->orcs = o;
		uw->cap = cap;
	}
	uw->orcs[uw->norcs].ip = ip;
	uw->orcs[uw->norcs].orc = *e;
	uw->orcs[uw->norcs].rank = rank;
	uw->norcs++;
	return 0;
}

/* The original's entries for one run, copied into buf (at most max of them,
 * as distances from orig and entries; -E2BIG more): under preempt_disable, so a module
 * whose table is read cannot go away meanwhile. -ENOENT no table covers orig. */
static int hp_orc_of_run(unsigned long orig, u32 len, bool same, u32 *dist, struct orc_entry *buf, int max)
{
	const int *ipt = NULL;
	const struct orc_entry *u = NULL;
	unsigned int n = 0;
	int got = 0;
	struct module *mod;
	long k;

	preempt_disable();
	if (hp_core_kernel_text(orig) && hp_kernel_ip) {
		ipt = hp_kernel_ip;
		u = hp_kernel_orc;
		n = hp_kernel_n;
	} else {
		mod = hp_module_text_address(orig);
		if (mod && mod != THIS_MODULE && mod->arch.orc_unwind_ip) {
			ipt = mod->arch.orc_unwind_ip;
			u = mod->arch.orc_unwind;
			n = mod->arch.num_orcs;
		}
	}
	k = ipt ? hp_orc_index(ipt, n, orig) : -1;
	if (k >= 0) {
		dist[got] = 0;
		buf[got++] = u[k];
		for (k++; same && k < n && hp_orc_ip(&ipt[k]) < orig + len; k++) {
			if (got == max) {
				got = -E2BIG; /* more changes of state in one run than a block has */
				break;
			}
			dist[got] = hp_orc_ip(&ipt[k]) - orig;
			buf[got++] = u[k];
		}
	}
	preempt_enable();
	return got ? got : -ENOENT;
}
#endif

static void hp_unwind_free(struct hp_unwind *uw)
{
	if (!uw)
		return;
	kvfree(uw->syms);
	kvfree(uw->orcs);
	kfree(uw);
}

/* The names in a map: each NUL-terminated inside strtab, printable, short
 * enough for kallsyms. */
static const char *hp_map_name(const char *strtab, u32 strtab_len, u32 off)
{
	size_t n;
	u32 i;

	if (off >= strtab_len)
		return NULL;
	n = strnlen(strtab + off, strtab_len - off);
	if (!n || n >= KSYM_NAME_LEN || off + n == strtab_len)
		return NULL;
	for (i = 0; i < n; i++)
		if (strtab[off + i] <= ' ' || strtab[off + i] > '~')
			return NULL;
	return strtab + off;
}

/* Bytes [off, off + len) from code lie inside the heap, which ends at end. */
static bool hp_map_inside(unsigned long code, unsigned long end, u32 off, u32 len)
{
	return len && off < end - code && len <= end - code - off;
}

/* Parse and check heap h's map (a copy of it in map), filling uw. */
static int hp_unwind_parse(struct hp_heap *h, const u8 *map, u32 len, unsigned long map_addr, struct hp_unwind *uw)
{
	const size_t head_len = sizeof(struct hotpath_map_head);
	const size_t sym_len = sizeof(struct hotpath_map_sym), run_len = sizeof(struct hotpath_map_run);
	struct hotpath_map_head head;
	unsigned long code, end = h->addr + h->size;
	const char *strtab;
	u32 i;
	int err;

	if (len < head_len)
		return -EINVAL;
	memcpy(&head, map, head_len);
	if (le32_to_cpu(head.magic) != HOTPATH_MAP_MAGIC || le16_to_cpu(head.version) != HOTPATH_MAP_VERSION ||
	    head.flags)
		return -EINVAL;
	head.code_to_map = le32_to_cpu(head.code_to_map);
	head.nsyms = le32_to_cpu(head.nsyms);
	head.nruns = le32_to_cpu(head.nruns);
	head.strtab_len = le32_to_cpu(head.strtab_len);
	if (head.nsyms > HP_MAP_SYMS_MAX || head.nruns > HP_MAP_RUNS_MAX || !head.nsyms ||
	    head_len + head.nsyms * sym_len + head.nruns * run_len + head.strtab_len != len ||
	    head.code_to_map > map_addr - h->addr)
		return -EINVAL;
	code = map_addr - head.code_to_map;
	strtab = (const char *)map + head_len + head.nsyms * sym_len + head.nruns * run_len;

	uw->syms = kvcalloc(head.nsyms, sizeof(*uw->syms), GFP_KERNEL);
	if (!uw->syms)
		return -ENOMEM;
	for (i = 0; i < head.nsyms; i++) {
		struct hotpath_map_sym s;
		const char *name;

		memcpy(&s, map + head_len + i * sym_len, sym_len);
		s.off = le32_to_cpu(s.off);
		s.size = le32_to_cpu(s.size);
		name = hp_map_name(strtab, head.strtab_len, le32_to_cpu(s.name));
		if (!name || !hp_map_inside(code, end, s.off, s.size))
			return -EINVAL;
		uw->syms[i].addr = code + s.off;
		uw->syms[i].size = s.size;
		strscpy(uw->syms[i].name, name, sizeof(uw->syms[i].name));
	}
	uw->nsyms = head.nsyms;

#ifdef CONFIG_UNWINDER_ORC
	{
		static const struct orc_entry undefined; /* sp_reg ORC_REG_UNDEFINED, not an end */
		const int max = 256;
		struct orc_entry *buf = kmalloc_array(max, sizeof(*buf), GFP_KERNEL);
		u32 *dist = kmalloc_array(max, sizeof(*dist), GFP_KERNEL);

		err = buf && dist ? 0 : -ENOMEM;
		for (i = 0; i < head.nruns && !err; i++) {
			struct hotpath_map_run r;
			int got, j;

			memcpy(&r, map + head_len + head.nsyms * sym_len + i * run_len, run_len);
			r.off = le32_to_cpu(r.off);
			r.len = le32_to_cpu(r.len);
			r.orig = le64_to_cpu(r.orig);
			r.kind = le32_to_cpu(r.kind);
			if (r.reserved || r.kind > HOTPATH_RUN_STATE_AT || !hp_map_inside(code, end, r.off, r.len)) {
				err = -EINVAL;
				break;
			}
			got = hp_orc_of_run(r.orig, r.len, r.kind == HOTPATH_RUN_SAME, dist, buf, max);
			if (got < 0) {
				err = got;
				break;
			}
			for (j = 0; j < got && !err; j++)
				err = hp_orc_push(uw, code + r.off + dist[j], &buf[j], 0);
		}
		/* Where each copy ends (and where the heap starts), an undefined entry. */
		for (i = 0; i < uw->nsyms && !err; i++)
			err = hp_orc_push(uw, uw->syms[i].addr + uw->syms[i].size, &undefined, 2);
		if (!err)
			err = hp_orc_push(uw, h->addr, &undefined, 2);
		kfree(buf);
		kfree(dist);
		if (err)
			return err;
	}
#else
	err = 0;
#endif
	return err;
}

/* Every heap's symbols after the module's own, published for kallsyms. */
static int hp_publish_kallsyms(struct hp_heap *heaps, unsigned int n)
{
	const struct mod_kallsyms *own = &THIS_MODULE->core_kallsyms;
	struct mod_kallsyms *ks, *old = hp_kallsyms_now;
	unsigned int i, j, k, nsyms = 0;
	size_t strlen_own = 0, strlen_all, at;
	Elf_Half shndx = SHN_ABS;

	for (i = 0; i < n; i++)
		if (heaps[i].addr && heaps[i].uw)
			nsyms += heaps[i].uw->nsyms;
	if (!nsyms) {
		ks = NULL;
		goto publish;
	}
	for (i = 0; i < own->num_symtab; i++) {
		size_t e = own->symtab[i].st_name + strlen(own->strtab + own->symtab[i].st_name) + 1;

		strlen_own = max(strlen_own, e);
		if (shndx == SHN_ABS && own->symtab[i].st_shndx != SHN_UNDEF && own->symtab[i].st_shndx < SHN_LORESERVE)
			shndx = own->symtab[i].st_shndx;
	}
	strlen_all = strlen_own;
	for (i = 0; i < n; i++)
		for (j = 0; heaps[i].addr && heaps[i].uw && j < heaps[i].uw->nsyms; j++)
			strlen_all += strlen(heaps[i].uw->syms[j].name) + 1;
	ks = kzalloc(sizeof(*ks), GFP_KERNEL);
	if (!ks)
		return -ENOMEM;
	ks->num_symtab = own->num_symtab + nsyms;
	ks->symtab = kvcalloc(ks->num_symtab, sizeof(*ks->symtab), GFP_KERNEL);
	ks->strtab = kvmalloc(strlen_all, GFP_KERNEL);
	ks->typetab = kvmalloc(ks->num_symtab, GFP_KERNEL);
	if (!ks->symtab || !ks->strtab || !ks->typetab) {
		kvfree(ks->symtab);
		kvfree(ks->strtab);
		kvfree(ks->typetab);
		kfree(ks);
		return -ENOMEM;
	}
	/* The copies' symbols first after the null one: kallsyms takes the first
	 * of several symbols at one address, and a copy in slot 0 starts where
	 * the area's own symbol (hotpath_heap_area) does. */
	ks->symtab[0] = own->symtab[0];
	ks->typetab[0] = own->typetab[0];
	memcpy(ks->symtab + 1 + nsyms, own->symtab + 1, (own->num_symtab - 1) * sizeof(*ks->symtab));
	memcpy(ks->typetab + 1 + nsyms, own->typetab + 1, own->num_symtab - 1);
	memcpy(ks->strtab, own->strtab, strlen_own);
	k = 1;
	at = strlen_own;
	for (i = 0; i < n; i++) {
		for (j = 0; heaps[i].addr && heaps[i].uw && j < heaps[i].uw->nsyms; j++, k++) {
			const struct hp_sym *s = &heaps[i].uw->syms[j];
			size_t len = strlen(s->name) + 1;

			ks->symtab[k].st_name = at;
			ks->symtab[k].st_info = (STB_GLOBAL << 4) | STT_FUNC;
			ks->symtab[k].st_shndx = shndx;
			ks->symtab[k].st_value = s->addr;
			ks->symtab[k].st_size = s->size;
			ks->typetab[k] = 't';
			memcpy(ks->strtab + at, s->name, len);
			at += len;
		}
	}
publish:
	rcu_assign_pointer(THIS_MODULE->kallsyms, ks ? ks : &THIS_MODULE->core_kallsyms);
	synchronize_rcu();
	hp_kallsyms_now = ks;
	if (old) {
		kvfree(old->symtab);
		kvfree(old->strtab);
		kvfree(old->typetab);
		kfree(old);
	}
	return 0;
}

#ifdef CONFIG_UNWINDER_ORC
static int hp_orc_cmp(const void *a, const void *b)
{
	const struct hp_orc_at *x = a, *y = b;

	if (x->ip != y->ip)
		return x->ip < y->ip ? -1 : 1;
	return (int)x->rank - (int)y->rank;
}

/* Give the module's ORC fields ip, orc and n, in the order that keeps every
 * reader's view consistent (above). */
static void hp_orc_switch(int *ip, struct orc_entry *orc, unsigned int n)
{
	WRITE_ONCE(THIS_MODULE->arch.num_orcs, 0);
	synchronize_rcu();
	WRITE_ONCE(THIS_MODULE->arch.orc_unwind_ip, ip);
	WRITE_ONCE(THIS_MODULE->arch.orc_unwind, orc);
	synchronize_rcu();
	WRITE_ONCE(THIS_MODULE->arch.num_orcs, n);
}

/* The module's own entries and every heap's, sorted, published. */
static int hp_publish_orc(struct hp_heap *heaps, unsigned int n)
{
	int *old_ip = hp_ip_now, *ip;
	struct orc_entry *old_orc = hp_orc_now, *orc;
	struct hp_orc_at *all;
	unsigned int i, j, k = 0, total = hp_own_n, kept = 0;

	for (i = 0; i < n; i++)
		if (heaps[i].addr && heaps[i].uw)
			total += heaps[i].uw->norcs;
	if (total == hp_own_n) { /* no copy has entries: the module's own table again */
		if (!old_ip)
			return 0;
		ip = hp_own_ip;
		orc = hp_own_orc;
		kept = hp_own_n;
		goto publish;
	}
	all = kvmalloc_array(total, sizeof(*all), GFP_KERNEL);
	if (!all)
		return -ENOMEM;
	for (i = 0; i < hp_own_n; i++, k++) {
		all[k].ip = hp_orc_ip(&hp_own_ip[i]);
		all[k].orc = hp_own_orc[i];
		all[k].rank = 1;
	}
	for (i = 0; i < n; i++)
		for (j = 0; heaps[i].addr && heaps[i].uw && j < heaps[i].uw->norcs; j++)
			all[k++] = heaps[i].uw->orcs[j];
	sort(all, total, sizeof(*all), hp_orc_cmp, NULL);
	ip = hp_module_alloc(total * sizeof(*ip));
	orc = hp_module_alloc(total * sizeof(*orc));
	if (!ip || !orc) {
		vfree(ip);
		vfree(orc);
		kvfree(all);
		return -ENOMEM;
	}
	for (i = 0; i < total; i++) {
		if (kept && all[i].ip == all[i - 1].ip)
			continue; /* one entry per address: the best ranked, first after sorting */
		ip[kept] = (int)(all[i].ip - (unsigned long)&ip[kept]);
		orc[kept++] = all[i].orc;
	}
	kvfree(all);
publish:
	hp_orc_switch(ip, orc, kept);
	hp_ip_now = ip == hp_own_ip ? NULL : ip;
	hp_orc_now = ip == hp_own_ip ? NULL : orc;
	vfree(old_ip);
	vfree(old_orc);
	return 0;
}
#endif

static int hp_publish(struct hp_heap *heaps, unsigned int n)
{
	int err = hp_publish_kallsyms(heaps, n);

#ifdef CONFIG_UNWINDER_ORC
	if (!err)
		err = hp_publish_orc(heaps, n);
#endif
	return err;
}

int hp_unwind_set(struct hp_heap *heaps, unsigned int n, struct hp_heap *h, u32 offset, u32 len)
{
	struct hp_unwind *uw = kzalloc(sizeof(*uw), GFP_KERNEL);
	u8 *map = kvmalloc(len, GFP_KERNEL);
	int err = uw && map ? 0 : -ENOMEM;

	if (!err)
		err = copy_from_kernel_nofault(map, (void *)(h->addr + offset), len) ? -EFAULT : 0;
	if (!err)
		err = hp_unwind_parse(h, map, len, h->addr + offset, uw);
	kvfree(map);
	if (err) {
		hp_unwind_free(uw);
		return err;
	}
	h->uw = uw;
	err = hp_publish(heaps, n);
	if (err) {
		h->uw = NULL;
		hp_unwind_free(uw);
		hp_publish(heaps, n);
	}
	return err;
}

void hp_unwind_drop(struct hp_heap *heaps, unsigned int n, struct hp_heap *h)
{
	struct hp_unwind *uw = h->uw;

	if (!uw)
		return;
	h->uw = NULL;
	/* Publishing fewer entries needs no memory beyond the smaller tables; if
	 * even that fails, the copy's names and entries stay published with the
	 * heap kept (never freed under them). */
	if (hp_publish(heaps, n)) {
		h->uw = uw;
		pr_warn("hotpath: out of memory removing a copy's names and unwind entries; its heap is kept\n");
		return;
	}
	hp_unwind_free(uw);
}

int hp_unwind_init(void)
{
#ifdef CONFIG_UNWINDER_ORC
	int *stop;

	hp_module_alloc = (void *)hp_lookup_name("module_alloc");
	if (!hp_module_alloc) {
		pr_err("hotpath: cannot find module_alloc (kallsyms_lookup_name)\n");
		return -ENOENT;
	}
	hp_own_ip = THIS_MODULE->arch.orc_unwind_ip;
	hp_own_orc = THIS_MODULE->arch.orc_unwind;
	hp_own_n = THIS_MODULE->arch.num_orcs;
	/* The kernel's table (data symbols: CONFIG_KALLSYMS_ALL). Without it, a
	 * copy of vmlinux code gets no entries (HOTPATH_HEAP_UNWIND: ENOENT). */
	hp_kernel_ip = (int *)hp_lookup_name("__start_orc_unwind_ip");
	stop = (int *)hp_lookup_name("__stop_orc_unwind_ip");
	hp_kernel_orc = (struct orc_entry *)hp_lookup_name("__start_orc_unwind");
	if (!hp_kernel_ip || !stop || !hp_kernel_orc || stop <= hp_kernel_ip) {
		pr_warn("hotpath: the kernel's ORC table is not in kallsyms: copies of its code will have no unwind entries\n");
		hp_kernel_ip = NULL;
	} else {
		hp_kernel_n = stop - hp_kernel_ip;
	}
#endif
	return 0;
}

void hp_unwind_exit(void)
{
	/* Every heap is gone (hp_undo_all) or kept for a stuck call site: either
	 * way the module's own tables go back before its memory does. */
	rcu_assign_pointer(THIS_MODULE->kallsyms, &THIS_MODULE->core_kallsyms);
#ifdef CONFIG_UNWINDER_ORC
	if (hp_ip_now)
		hp_orc_switch(hp_own_ip, hp_own_orc, hp_own_n);
#endif
	synchronize_rcu();
	if (hp_kallsyms_now) {
		kvfree(hp_kallsyms_now->symtab);
		kvfree(hp_kallsyms_now->strtab);
		kvfree(hp_kallsyms_now->typetab);
		kfree(hp_kallsyms_now);
		hp_kallsyms_now = NULL;
	}
#ifdef CONFIG_UNWINDER_ORC
	vfree(hp_ip_now);
	vfree(hp_orc_now);
	hp_ip_now = NULL;
	hp_orc_now = NULL;
#endif
}
