// SPDX-License-Identifier: Apache-2.0
/*
 * The live kernel as a code model. Functions and modules come from
 * /proc/kallsyms (which has no sizes: a function ends where the next text
 * symbol starts; kallsyms.c); text bytes come through a
 * BPF_PROG_TYPE_SYSCALL program that bpf_probe_read_kernel's a chunk per
 * BPF_PROG_TEST_RUN into its .bss, so neither /proc/kcore nor kprobes are
 * needed. The whole text is read once in chunks, module functions lose the
 * loader's fill at their ends, vmlinux's jump-label and static call sites
 * are put in one canonical form (static_branch.h), then every function is
 * decoded in parallel from that copy. A command about some functions (by
 * names and addresses, hp_open_opts) decodes just those and what decides
 * their blocks (struct hp_cfg_only); with the noreturn cache a whole parse
 * wrote (kernel_cache.h), just those.
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <dirent.h>

#include "base/grow.h"
#include "model/cfg.h"
#include "host/hostinfo.h"
#include "target/kallsyms.h"
#include "target/kernel_cache.h"
#include "target/ktext.h"
#include "target/static_branch.h"
#include "ktext.skel.h"
#include "model/model.h"
#include "target/target.h"

struct kpriv {
	struct hp_kernel_facts facts;
	struct ktext_bpf *skel;
	int prog_fd;
	/* vmlinux's jump table and static call sites in its text, for the parse
	 * and for the model's reader (kernel_read). */
	struct hp_static_branch *branches;
	size_t nbranches;
	struct hp_static_call *calls;
	size_t ncalls;
	bool vmlinux_calls; /* vmlinux's static call site table was read */
	/* Static call keys paired with their trampolines by name (kallsyms). */
	struct hp_static_call_tramp *tramps;
	size_t ntramps;
	pthread_mutex_t lock;
	/* Text copies used during the parse, one per module. */
	struct ktext_copy {
		uint64_t lo, hi;
		uint8_t *buf;
		bool keys_done; /* its sites put in canonical form (sites_canonical) */
	} * copies;
	size_t cap_static_branches; /* of facts.static_branches */
	size_t cap_static_calls;    /* of facts.static_calls */
};

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

/* Copy len (<= KTEXT_CHUNK) bytes of kernel memory at addr into dst. */
static int bpf_read_chunk(struct kpriv *kp, uint64_t addr, void *dst, size_t len)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	int r;

	kp->skel->bss->src_addr = addr;
	kp->skel->bss->src_len = len;
	kp->skel->bss->read_ret = -EIO;
	r = bpf_prog_test_run_opts(kp->prog_fd, &opts);
	if (r < 0)
		return errno ? -errno : -EIO;
	if (kp->skel->bss->read_ret < 0)
		return (int)kp->skel->bss->read_ret;
	memcpy(dst, kp->skel->bss->buf, len);
	return 0;
}

static int kernel_read_raw(struct kpriv *kp, uint64_t addr, void *buf, size_t len)
{
	uint8_t *dst = buf;
	int r;

	while (len) {
		size_t n = len > KTEXT_CHUNK ? KTEXT_CHUNK : len;

		if ((r = bpf_read_chunk(kp, addr, dst, n)) < 0)
			return r;
		addr += n;
		dst += n;
		len -= n;
	}
	return 0;
}

int hp_kernel_read_live(struct hp_model *m, uint64_t addr, void *buf, size_t len)
{
	struct kpriv *kp = m && m->kind == HP_TARGET_KERNEL ? m->priv : NULL;
	int r;

	if (!kp)
		return -EINVAL;
	pthread_mutex_lock(&kp->lock);
	r = kernel_read_raw(kp, addr, buf, len);
	pthread_mutex_unlock(&kp->lock);
	return r;
}

/* The first index of the sorted v[0, n) whose code is >= x. */
#define LOWER_BOUND(v, n, x)                                 \
	({                                                   \
		size_t lo_ = 0, hi_ = (n);                   \
		while (lo_ < hi_) {                          \
			size_t mid_ = lo_ + (hi_ - lo_) / 2; \
			if ((v)[mid_].code < (x))            \
				lo_ = mid_ + 1;              \
			else                                 \
				hi_ = mid_;                  \
		}                                            \
		lo_;                                         \
	})

/* The model's reader: the live bytes, with the sites the parse put in
 * canonical form shown in that form, so disassembly and plans see the code
 * the blocks were cut from. One .bss buffer, so one reader at a time. */
static int kernel_read(struct hp_model *m, uint64_t addr, void *buf, size_t len)
{
	struct kpriv *kp = m->priv;
	struct hp_static_branch_stats st;
	uint64_t *tmp;
	int r;

	if ((r = hp_kernel_read_live(m, addr, buf, len)) < 0)
		return r;
	size_t bi = LOWER_BOUND(kp->branches, kp->nbranches, addr),
	       bj = LOWER_BOUND(kp->branches, kp->nbranches, addr + len);
	size_t ci = LOWER_BOUND(kp->calls, kp->ncalls, addr), cj = LOWER_BOUND(kp->calls, kp->ncalls, addr + len);
	size_t most = (bj - bi) > (cj - ci) ? bj - bi : cj - ci;
	if (!most)
		return 0;
	if (!(tmp = malloc(most * sizeof(*tmp))))
		return -ENOMEM;
	if (kp->facts.nstatic_branches)
		hp_static_branch_canonicalize(buf, addr, len, kp->branches + bi, bj - bi, tmp, &st);
	if (kp->facts.nstatic_calls)
		hp_static_call_canonicalize(buf, addr, len, kp->calls + ci, cj - ci, tmp, &st);
	free(tmp);
	return 0;
}

/* A loaded kernel module's GNU build id, from its notes in sysfs; "" without. */
static void module_build_id(const char *name, char *out, size_t outlen)
{
	char path[320];

	snprintf(path, sizeof(path), "/sys/module/%s/notes/.note.gnu.build-id", name);
	hp_notes_file_build_id(path, out, outlen);
}

static void kernel_free_priv(struct hp_model *m)
{
	struct kpriv *kp = m->priv;

	if (!kp)
		return;
	ktext_bpf__destroy(kp->skel);
	pthread_mutex_destroy(&kp->lock);
	free(kp->facts.pinned);
	free(kp->facts.warn_traps);
	free(kp->facts.static_branches);
	free(kp->branches);
	free(kp->calls);
	free(kp->tramps);
	free(kp->facts.static_calls);
	free(kp->copies);
	free(kp);
	m->priv = NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

const struct hp_kernel_facts *hp_kernel_facts(const struct hp_model *m)
{
	return m && m->kind == HP_TARGET_KERNEL && m->priv ? &((struct kpriv *)m->priv)->facts : NULL;
}

static void note(struct hp_kernel_facts *kf, const char *fmt, const char *what, int err)
{
	if (kf->nnotes < 4)
		snprintf(kf->notes[kf->nnotes++], sizeof(kf->notes[0]), fmt, what, strerror(err));
}

static int32_t le32(const uint8_t *p)
{
	return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static int push_pin(struct hp_kernel_facts *kf, size_t *cap, uint64_t lo, uint64_t hi, const char *rule)
{
	if (HP_GROW(kf->pinned, *cap, kf->npinned + 1))
		return -ENOMEM;
	kf->pinned[kf->npinned++] = (struct hp_pinned_range){ lo, hi, rule };
	return 0;
}

static int cmp_pin(const void *a, const void *b)
{
	const struct hp_pinned_range *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Whether a table's layout is right: the entries of a sample of its n (the
 * first 32 in a row, then a spread over the rest, 64 at most) are as the
 * layout says, 9 in 10 of those that say anything. check(ctx, i) is 1 if
 * entry i is as expected, 0 if not, and -1 if it says nothing (its code
 * could not be read, or was freed). */
static bool layout_holds(size_t n, int (*check)(void *ctx, size_t i), void *ctx)
{
	size_t good = 0, tried = 0;

	for (size_t i = 0, seen = 0; i < n && seen < 64; i += seen < 32 ? 1 : n / 32 + 1, seen++) {
		int c = check(ctx, i);

		if (c < 0)
			continue;
		tried++;
		good += (size_t)c;
	}
	return tried && good * 10 >= tried * 9;
}

/* The bug table read as entries of esz bytes. */
struct bug_layout {
	struct kpriv *kp;
	const uint8_t *tab;
	uint64_t lo;
	size_t esz;
	uint64_t text, etext; /* vmlinux's text: the only traps the entries are checked at */
};

/* Whether entry i's trap address holds a ud instruction. */
static int bug_entry_ok(void *ctx, size_t i)
{
	const struct bug_layout *l = ctx;
	uint64_t at = l->lo + i * l->esz + (int64_t)le32(l->tab + i * l->esz);
	uint8_t b[2];

	/* Entries outside vmlinux's text say nothing: those in init text point
	 * into pages freed after boot, which read as zeros at first and, once the
	 * kernel has reused them, as anything (after a day of uptime here, enough
	 * of the sample to refuse every layout). */
	if (at < l->text || at >= l->etext || kernel_read_raw(l->kp, at, b, 2) < 0 || (b[0] == 0 && b[1] == 0))
		return -1;
	return b[0] == 0x0f && (b[1] == 0x0b || b[1] == 0xb9 || b[1] == 0xff);
}

/* Which traps are WARN()s: the bug table's entries are (relative trap
 * address, ..., u16 line, u16 flags); its size differs between kernel
 * versions, so the layout whose addresses all land on ud instructions wins. */
static void read_bug_table(struct kpriv *kp, const uint64_t *mk, uint64_t text, uint64_t etext)
{
	struct hp_kernel_facts *kf = &kp->facts;
	uint64_t lo = mk[HP_KMARK_BUG_START], hi = mk[HP_KMARK_BUG_STOP];
	static const int sizes[] = { 12, 16, 8 };
	uint8_t *tab;
	int r;

	if (!lo || hi <= lo || hi - lo > (64u << 20)) {
		note(kf, "%s: no __start___bug_table in /proc/kallsyms (%s); every ud2 is taken to end its block",
		     "WARN traps", ENOENT);
		return;
	}
	if (!(tab = malloc(hi - lo)))
		return;
	if ((r = kernel_read_raw(kp, lo, tab, hi - lo)) < 0) {
		note(kf, "%s: reading the bug table failed (%s)", "WARN traps", -r);
		free(tab);
		return;
	}
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		size_t esz = sizes[si], n = (hi - lo) / esz;
		struct bug_layout layout = { kp, tab, lo, esz, text, etext };

		if ((hi - lo) % esz || !layout_holds(n, bug_entry_ok, &layout))
			continue;
		kf->warn_traps = malloc(n * sizeof(uint64_t));
		if (!kf->warn_traps)
			break;
		for (size_t i = 0; i < n; i++) {
			const uint8_t *e = tab + i * esz;
			uint16_t flags = (uint16_t)(e[esz - 2] | e[esz - 1] << 8);
			if (flags & 1) /* BUGFLAG_WARNING */
				kf->warn_traps[kf->nwarn_traps++] = lo + i * esz + (int64_t)le32(e);
		}
		kf->nbug_entries = n;
		qsort(kf->warn_traps, kf->nwarn_traps, sizeof(uint64_t), cmp_u64);
		free(tab);
		return;
	}
	note(kf, "%s: the bug table's layout was not recognized (%s); every ud2 is taken to end its block",
	     "WARN traps", EPROTO);
	free(tab);
}

/* Code found by address: text sections by marker, exception-table entries,
 * the kprobe blacklist. */
static int read_pinned(struct kpriv *kp, const uint64_t *mk)
{
	struct hp_kernel_facts *kf = &kp->facts;
	static const struct {
		int lo, hi;
		const char *rule;
	} sections[] = {
		{ HP_KMARK_NOINSTR_START, HP_KMARK_NOINSTR_END, "noinstr text" },
		{ HP_KMARK_ENTRY_START, HP_KMARK_ENTRY_END, "entry text" },
		{ HP_KMARK_IRQENTRY_START, HP_KMARK_IRQENTRY_END, "entry text (irqentry)" },
		{ HP_KMARK_SOFTIRQ_START, HP_KMARK_SOFTIRQ_END, "entry text (softirqentry)" },
		{ HP_KMARK_SCHED_START, HP_KMARK_SCHED_END, "__sched text" },
		{ HP_KMARK_LOCK_START, HP_KMARK_LOCK_END, "__lock text" },
		{ HP_KMARK_CPUIDLE_START, HP_KMARK_CPUIDLE_END, "cpuidle text (noinstr)" },
		{ HP_KMARK_KPROBES_START, HP_KMARK_KPROBES_END, "kprobe-blacklisted (__kprobes text)" },
	};
	size_t cap = 0;
	uint64_t lo, hi;
	int r;

	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
		if (mk[sections[i].lo] && mk[sections[i].hi] > mk[sections[i].lo] &&
		    (r = push_pin(kf, &cap, mk[sections[i].lo], mk[sections[i].hi], sections[i].rule)) < 0)
			return r;
	/* struct exception_table_entry { int insn, fixup, data; }, relative. */
	lo = mk[HP_KMARK_EX_START];
	hi = mk[HP_KMARK_EX_STOP];
	if (lo && hi > lo && hi - lo < (16u << 20) && (hi - lo) % 12 == 0) {
		uint8_t *tab = malloc(hi - lo);
		if (tab && (r = kernel_read_raw(kp, lo, tab, hi - lo)) == 0) {
			for (size_t i = 0; i < (hi - lo) / 12; i++) {
				uint64_t at = lo + i * 12 + (int64_t)le32(tab + i * 12);
				if ((r = push_pin(kf, &cap, at, at + 1, "exception table entry")) < 0)
					break;
			}
		} else if (tab) {
			note(kf, "%s: reading the exception table failed (%s)", "exclusions", -r);
		}
		free(tab);
	} else {
		note(kf, "%s: no readable __start___ex_table in /proc/kallsyms (%s)", "exclusions", ENOENT);
	}
	/* NOKPROBE_SYMBOL() addresses; the kernel's own list in debugfs has
	 * their ranges when kprobes are built in. */
	FILE *fp = fopen("/sys/kernel/debug/kprobes/blacklist", "r");
	if (fp) {
		char line[512];
		while (fgets(line, sizeof(line), fp)) {
			unsigned long long a, b;
			if (sscanf(line, "0x%llx-0x%llx", &a, &b) == 2 && b > a &&
			    (r = push_pin(kf, &cap, a, b, "kprobe-blacklisted")) < 0)
				break;
		}
		fclose(fp);
	} else {
		note(kf, "%s: /sys/kernel/debug/kprobes/blacklist unavailable (%s): only __kprobes text is excluded",
		     "kprobe blacklist", errno);
	}
	if (kf->npinned)
		qsort(kf->pinned, kf->npinned, sizeof(*kf->pinned), cmp_pin);
	kf->fentry = mk[HP_KMARK_FENTRY];
	return 0;
}

/* A site table of vmlinux, [lo, hi) in entries of entry bytes, read whole;
 * NULL (with a note saying the sites are decoded as they are now) when
 * kallsyms gave no usable bounds or the read failed, or when it is empty. */
static uint8_t *read_site_table(struct kpriv *kp, uint64_t lo, uint64_t hi, size_t entry, uint64_t text, uint64_t etext,
				const char *what, const char *start_sym)
{
	struct hp_kernel_facts *kf = &kp->facts;
	char label[96];
	uint8_t *tab;
	int r;

	snprintf(label, sizeof(label), "%s (%s)", what, start_sym);
	if (!lo || hi < lo || hi - lo > (64u << 20) || (hi - lo) % entry || !text || etext <= text) {
		note(kf, "%s: no usable table bounds in /proc/kallsyms (%s); sites are decoded as they are now", label,
		     ENOENT);
		return NULL;
	}
	if (hi == lo || !(tab = malloc(hi - lo)))
		return NULL;
	if ((r = kernel_read_raw(kp, lo, tab, hi - lo)) < 0) {
		note(kf, "%s: reading the table failed (%s); sites are decoded as they are now", label, -r);
		free(tab);
		return NULL;
	}
	return tab;
}

/* How many bytes are read at a site to check its form. */
#define SITE_PEEK 8

/* A decoded site table: entries of size bytes at sites, each starting with
 * its site's address; form() puts the SITE_PEEK bytes read at one in
 * canonical form in place and returns 1 if they were one of its forms. */
struct site_layout {
	struct kpriv *kp;
	const void *sites;
	size_t size;
	size_t (*form)(uint8_t *b, const void *site);
};

/* Whether site i holds one of its forms; -1 if it could not be read. */
static int site_ok(void *ctx, size_t i)
{
	const struct site_layout *l = ctx;
	const void *site = (const uint8_t *)l->sites + i * l->size;
	uint8_t b[SITE_PEEK];
	uint64_t code;

	memcpy(&code, site, sizeof(code));
	if (kernel_read_raw(l->kp, code, b, sizeof(b)) < 0)
		return -1;
	return (int)l->form(b, site);
}

_Static_assert(offsetof(struct hp_static_branch, code) == 0, "a jump entry starts with its site");
_Static_assert(offsetof(struct hp_static_call, code) == 0, "a static call site starts with its site");

static size_t branch_form(uint8_t *b, const void *site)
{
	const struct hp_static_branch *e = site;
	struct hp_static_branch_stats st;
	uint64_t one;

	return hp_static_branch_canonicalize(b, e->code, SITE_PEEK, e, 1, &one, &st);
}

static size_t call_form(uint8_t *b, const void *site)
{
	const struct hp_static_call *e = site;
	struct hp_static_branch_stats st;
	uint64_t one;

	return hp_static_call_canonicalize(b, e->code, SITE_PEEK, e, 1, &one, &st);
}

/* vmlinux's jump table. Its layout is taken as right only if the sites of
 * a sample of its entries in [text, etext) hold the NOP or the JMP to the
 * entry's target, as every site does. */
static void read_jump_table(struct kpriv *kp, const uint64_t *mk, uint64_t text, uint64_t etext)
{
	struct hp_kernel_facts *kf = &kp->facts;
	uint64_t lo = mk[HP_KMARK_JUMP_START], hi = mk[HP_KMARK_JUMP_STOP];
	struct hp_static_branch *v = NULL;
	uint8_t *tab =
		read_site_table(kp, lo, hi, HP_JUMP_ENTRY_SIZE, text, etext, "jump labels", "__start___jump_table");
	long n;

	if (!tab)
		return;
	n = hp_jump_table_parse(tab, hi - lo, lo, text, etext, &v);
	free(tab);
	if (n <= 0) {
		free(v);
		return;
	}
	if (!layout_holds((size_t)n, site_ok, &(struct site_layout){ kp, v, sizeof(*v), branch_form })) {
		note(kf, "%s: the jump table's layout was not recognized (%s); sites are decoded as they are now",
		     "jump labels", EPROTO);
		free(v);
		return;
	}
	kp->branches = v;
	kp->nbranches = (size_t)n;
	kf->jump_entries = v;
	kf->njump_entries = (size_t)n;
}

/* Each site's trampoline, from its key (kp->tramps); 0 where no trampoline
 * of the key's name is known. */
static void resolve_tramps(const struct kpriv *kp, struct hp_static_call *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t lo = 0, hi = kp->ntramps;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (kp->tramps[mid].key < v[i].key)
				lo = mid + 1;
			else
				hi = mid;
		}
		v[i].tramp = !v[i].trampoline && lo < kp->ntramps && kp->tramps[lo].key == v[i].key ?
				     kp->tramps[lo].tramp :
				     0;
	}
}

/* vmlinux's static call sites, checked like the jump table. */
static void read_static_calls(struct kpriv *kp, const uint64_t *mk, uint64_t text, uint64_t etext)
{
	struct hp_kernel_facts *kf = &kp->facts;
	uint64_t lo = mk[HP_KMARK_SCALL_START], hi = mk[HP_KMARK_SCALL_STOP];
	struct hp_static_call *v = NULL;
	uint8_t *tab = read_site_table(kp, lo, hi, HP_STATIC_CALL_SITE_SIZE, text, etext, "static calls",
				       "__start_static_call_sites");
	long n;

	if (!tab)
		return;
	n = hp_static_call_parse(tab, hi - lo, lo, text, etext, &v);
	free(tab);
	if (n <= 0) {
		free(v);
		return;
	}
	if (!layout_holds((size_t)n, site_ok, &(struct site_layout){ kp, v, sizeof(*v), call_form })) {
		note(kf,
		     "%s: the static call site table's layout was not recognized (%s); sites are decoded as they are now",
		     "static calls", EPROTO);
		free(v);
		return;
	}
	resolve_tramps(kp, v, (size_t)n);
	kp->calls = v;
	kp->ncalls = (size_t)n;
	kp->vmlinux_calls = true;
	kp->facts.call_entries = v;
	kp->facts.ncall_entries = (size_t)n;
}

/* Add v[0, n) to the static call entries (kept sorted by site). 0 or -ENOMEM. */
static int add_calls(struct kpriv *kp, const struct hp_static_call *v, size_t n)
{
	if (!n)
		return 0;
	struct hp_static_call *all = realloc(kp->calls, (kp->ncalls + n) * sizeof(*all));
	if (!all)
		return -ENOMEM;
	memcpy(all + kp->ncalls, v, n * sizeof(*v));
	kp->calls = all;
	kp->ncalls += n;
	qsort(all, kp->ncalls, sizeof(*all), cmp_u64); /* code is the first member */
	kp->facts.call_entries = all;
	kp->facts.ncall_entries = kp->ncalls;
	return 0;
}

/* The static call trampolines (__SCT__name) of a module (vmlinux: once its
 * site table was read) join the sites as tail calls: the kernel rewrites
 * their first instruction too. Returns 0 or -ENOMEM. */
static int add_trampolines(struct kpriv *kp, const struct hp_module *mod, bool vmlinux)
{
	struct hp_static_call *v;
	size_t extra = 0, k = 0;
	int r;

	if (vmlinux && !kp->vmlinux_calls)
		return 0;
	for (size_t i = 0; i < mod->nfuncs; i++)
		extra += !strncmp(mod->funcs[i].name, "__SCT__", 7) && mod->funcs[i].size >= 5;
	if (!extra)
		return 0;
	if (!(v = malloc(extra * sizeof(*v))))
		return -ENOMEM;
	for (size_t i = 0; i < mod->nfuncs; i++)
		if (!strncmp(mod->funcs[i].name, "__SCT__", 7) && mod->funcs[i].size >= 5)
			v[k++] = (struct hp_static_call){ .code = mod->funcs[i].addr, .tail = 1, .trampoline = 1 };
	r = add_calls(kp, v, k);
	free(v);
	return r;
}

static int open_bpf(struct kpriv *kp, char *err, size_t errlen)
{
	int r;

	libbpf_set_print(quiet_print);
	kp->skel = ktext_bpf__open();
	if (!kp->skel) {
		r = errno ? -errno : -EINVAL;
		snprintf(err, errlen, "reading kernel text: BPF skeleton open failed: %s", strerror(-r));
		return r;
	}
	r = ktext_bpf__load(kp->skel);
	if (r < 0) {
		if (r == -EPERM || r == -EACCES)
			snprintf(err, errlen,
				 "reading kernel text needs CAP_BPF and CAP_PERFMON (or "
				 "CAP_SYS_ADMIN): BPF program load failed: %s",
				 strerror(-r));
		else
			snprintf(err, errlen, "reading kernel text: BPF program load failed: %s", strerror(-r));
		return r;
	}
	if (!kp->skel->bss) {
		snprintf(err, errlen, "reading kernel text: BPF .bss is not memory-mapped");
		return -ENOTSUP;
	}
	kp->prog_fd = bpf_program__fd(kp->skel->progs.read_text);
	return 0;
}

/* Where module name's section sect starts, and the lowest start of another
 * of its sections above it (0 when none): /sys/module/NAME/sections (root). */
static uint64_t module_section(const char *name, const char *sect, uint64_t *next)
{
	char path[512], line[64];
	uint64_t start = 0, above = 0;
	struct dirent *e;
	DIR *d;

	*next = 0;
	snprintf(path, sizeof(path), "/sys/module/%s/sections", name);
	if (!(d = opendir(path)))
		return 0;
	uint64_t *addrs = NULL;
	size_t n = 0, cap = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		snprintf(path, sizeof(path), "/sys/module/%s/sections/%s", name, e->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		uint64_t a = fgets(line, sizeof(line), f) ? strtoull(line, NULL, 16) : 0;
		fclose(f);
		if (!strcmp(e->d_name, sect))
			start = a;
		else if (a && !HP_GROW(addrs, cap, n + 1))
			addrs[n++] = a;
	}
	closedir(d);
	for (size_t i = 0; start && i < n; i++)
		if (addrs[i] > start && (!above || addrs[i] < above))
			above = addrs[i];
	free(addrs);
	*next = above;
	return start;
}

/* Most bytes of a module's jump table read (4096 sites). */
#define MODULE_JUMP_TABLE_MAX (4096u * HP_JUMP_ENTRY_SIZE)

/* A loaded module's own jump table (its static_branch sites, its
 * tracepoints'): sysfs gives its start, not its end, so it is read up to the
 * next section (at most MODULE_JUMP_TABLE_MAX, page by page while readable)
 * and ends at its first entry whose site or target is not in the module's
 * text (hp_jump_table_own_prefix). Checked like vmlinux's (layout_holds),
 * its entries join kp->branches. 0, or -ENOMEM. */
/* A module's section NAME as far as it is readable: from the start sysfs
 * gives, up to the next section and at most max bytes, page by page while
 * the pages read. Its bytes into *tab (malloc'd; NULL with 0 when the
 * module has no such section), its start into *lo; the length, or -ENOMEM. */
static long read_module_section(struct kpriv *kp, const char *module, const char *name, size_t max, uint8_t **tab,
				uint64_t *lo)
{
	uint64_t next;
	size_t len = 0, want = max;

	*tab = NULL;
	if (!(*lo = module_section(module, name, &next)))
		return 0;
	if (next > *lo && next - *lo < want)
		want = (size_t)(next - *lo);
	if (!(*tab = malloc(want)))
		return -ENOMEM;
	while (len < want) {
		size_t page = 4096 - (size_t)((*lo + len) & 4095), step = want - len < page ? want - len : page;
		if (kernel_read_raw(kp, *lo + len, *tab + len, step) < 0)
			break;
		len += step;
	}
	return (long)len;
}

static int read_module_jump_table(struct kpriv *kp, const struct hp_module *mod, const struct ktext_copy *c)
{
	uint64_t lo;
	struct hp_static_branch *v = NULL;
	uint8_t *tab;
	long n, got = read_module_section(kp, mod->name, "__jump_table", MODULE_JUMP_TABLE_MAX, &tab, &lo);
	size_t len;

	if (got <= 0) {
		free(tab);
		return (int)got;
	}
	len = hp_jump_table_own_prefix(tab, (size_t)got, lo, c->lo, c->hi);
	n = len ? hp_jump_table_parse(tab, len, lo, c->lo, c->hi, &v) : 0;
	free(tab);
	if (n < 0)
		return (int)n;
	if (n == 0 || !layout_holds((size_t)n, site_ok, &(struct site_layout){ kp, v, sizeof(*v), branch_form })) {
		free(v);
		return 0;
	}
	struct hp_static_branch *all = realloc(kp->branches, (kp->nbranches + (size_t)n) * sizeof(*all));
	if (!all) {
		free(v);
		return -ENOMEM;
	}
	memcpy(all + kp->nbranches, v, (size_t)n * sizeof(*v));
	free(v);
	kp->branches = all;
	kp->nbranches += (size_t)n;
	qsort(all, kp->nbranches, sizeof(*all), cmp_u64); /* code is the first member */
	kp->facts.jump_entries = all;
	kp->facts.njump_entries = kp->nbranches;
	return 0;
}

/* A loaded module's own static call sites (.static_call_sites), read like
 * its jump table: from the start sysfs gives up to the next section, ended
 * at its first entry whose site is not in the module's text or whose key is
 * (hp_static_call_own_prefix). The module loader has pointed every entry's
 * key at its struct static_call_key (objtool may have named the trampoline
 * there). Checked like vmlinux's table, each site's trampoline found by the
 * key's name, the entries join kp->calls. 0, or -ENOMEM. */
static int read_module_static_calls(struct kpriv *kp, const struct hp_module *mod, const struct ktext_copy *c)
{
	uint64_t lo;
	struct hp_static_call *v = NULL;
	uint8_t *tab;
	long n, got = read_module_section(kp, mod->name, ".static_call_sites", MODULE_JUMP_TABLE_MAX / 2, &tab, &lo);
	size_t len;
	int r;

	if (got <= 0) {
		free(tab);
		return (int)got;
	}
	len = hp_static_call_own_prefix(tab, (size_t)got, lo, c->lo, c->hi);
	n = len ? hp_static_call_parse(tab, len, lo, c->lo, c->hi, &v) : 0;
	free(tab);
	if (n < 0)
		return (int)n;
	if (n == 0 || !layout_holds((size_t)n, site_ok, &(struct site_layout){ kp, v, sizeof(*v), call_form })) {
		free(v);
		return 0;
	}
	resolve_tramps(kp, v, (size_t)n);
	r = add_calls(kp, v, (size_t)n);
	free(v);
	return r;
}

/* Put the static call sites and trampolines of a text copy in their
 * canonical form and add them to the facts' sorted list (which the CFG is
 * given). 0 or -ENOMEM. */
static int calls_canonical(struct kpriv *kp, struct ktext_copy *c)
{
	struct hp_kernel_facts *kf = &kp->facts;
	struct hp_static_branch_stats st;

	if (!kp->ncalls)
		return 0;
	if (HP_GROW(kf->static_calls, kp->cap_static_calls, kf->nstatic_calls + kp->ncalls))
		return -ENOMEM;
	kf->nstatic_calls += hp_static_call_canonicalize(c->buf, c->lo, c->hi - c->lo, kp->calls, kp->ncalls,
							 kf->static_calls + kf->nstatic_calls, &st);
	kf->static_call_foreign += st.foreign;
	qsort(kf->static_calls, kf->nstatic_calls, sizeof(uint64_t), cmp_u64);
	return 0;
}

/* Put the jump-label sites of a text copy in their canonical form and add
 * them to the facts' sorted list (which the CFG is given). 0 or -ENOMEM. */
static int keys_canonical(struct kpriv *kp, struct ktext_copy *c)
{
	struct hp_kernel_facts *kf = &kp->facts;
	struct hp_static_branch_stats st;
	uint64_t *sites;

	if (!kp->nbranches)
		return 0;
	if (HP_GROW(kf->static_branches, kp->cap_static_branches, kf->nstatic_branches + kp->nbranches))
		return -ENOMEM;
	sites = kf->static_branches + kf->nstatic_branches;
	kf->nstatic_branches +=
		hp_static_branch_canonicalize(c->buf, c->lo, c->hi - c->lo, kp->branches, kp->nbranches, sites, &st);
	kf->static_branch_foreign += st.foreign;
	qsort(kf->static_branches, kf->nstatic_branches, sizeof(uint64_t), cmp_u64);
	return 0;
}

/* A text copy's jump-label and static call sites in canonical form, once: a
 * module's own tables read from sysfs first, a module's or vmlinux's
 * trampolines added. 0 or -ENOMEM. */
static int sites_canonical(struct kpriv *kp, const struct hp_module *mod, struct ktext_copy *c, bool vmlinux)
{
	if (c->keys_done)
		return 0;
	c->keys_done = true;
	if (!vmlinux && (read_module_jump_table(kp, mod, c) < 0 || read_module_static_calls(kp, mod, c) < 0))
		return -ENOMEM;
	if (add_trampolines(kp, mod, vmlinux) < 0 || keys_canonical(kp, c) < 0 || calls_canonical(kp, c) < 0)
		return -ENOMEM;
	return 0;
}

/* Copy [lo, hi) into one buffer chunk by chunk; where a chunk fails (a hole
 * in the text), fall back to reading its functions one at a time. The
 * whole text even for a few functions: their parse reaches their callees. */
static int read_text(struct kpriv *kp, struct hp_module *mod, struct ktext_copy *c)
{
	size_t span = c->hi - c->lo, off, k;

	c->buf = malloc(span ? span : 1);
	if (!c->buf)
		return -ENOMEM;
	for (off = 0; off < span; off += KTEXT_CHUNK) {
		size_t n = span - off > KTEXT_CHUNK ? KTEXT_CHUNK : span - off;
		int r = bpf_read_chunk(kp, c->lo + off, c->buf + off, n);

		if (r == 0)
			continue;
		for (k = 0; k < mod->nfuncs; k++) {
			struct hp_function *f = &mod->funcs[k];
			if (f->addr + f->size <= c->lo + off || f->addr >= c->lo + off + n)
				continue;
			r = kernel_read_raw(kp, f->addr, c->buf + (f->addr - c->lo), f->size);
			if (r < 0) {
				f->flags |= HP_FN_UNREADABLE;
				f->read_errno = -r;
			}
		}
	}
	return 0;
}

static const uint8_t *kernel_bytes(void *ctx, const struct hp_module *mod, const struct hp_function *f, int *err)
{
	struct ktext_copy *c = ctx;

	if (!c->buf || f->addr < c->lo || f->addr + f->size > c->hi) {
		*err = EFAULT;
		return NULL;
	}
	return c->buf + (f->addr - c->lo);
}

/* A module's memory is zeroed by the loader: the zeros after a section's last
 * function are not code. Only functions whose bytes were read are trimmed. */
static void trim_module_fill(struct hp_module *mod, const struct ktext_copy *c)
{
	for (size_t k = 0; k < mod->nfuncs; k++) {
		struct hp_function *f = &mod->funcs[k];

		if ((f->flags & HP_FN_UNREADABLE) || f->addr < c->lo || f->addr + f->size > c->hi)
			continue;
		f->size = hp_ktext_trim_fill(c->buf + (f->addr - c->lo), f->size, f->addr,
					     f->flags & HP_FN_SIZE_ESTIMATED);
	}
}

/* A targeted open's functions of one module: their start addresses,
 * sorted and unique (what struct hp_cfg_only's addrs takes). */
struct only_set {
	uint64_t *v;
	size_t n, cap;
};

static int only_push(struct only_set *s, uint64_t a)
{
	if (HP_GROW(s->v, s->cap, s->n + 1))
		return -ENOMEM;
	s->v[s->n++] = a;
	return 0;
}

/* Sort s and drop repeats. */
static void only_sort(struct only_set *s)
{
	size_t k, n = 0;

	if (!s->n)
		return;
	qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
	for (k = 0; k < s->n; k++)
		if (!n || s->v[n - 1] != s->v[k])
			s->v[n++] = s->v[k];
	s->n = n;
}

/* The functions o asks for, after the index is built, into sets[i] for
 * m->mods[i]: every function each name finds (hp_model_find_all: an alias,
 * module:name, all of that name) and the one holding each address. A name
 * or an address that finds nothing adds nothing (the caller reports it).
 * Returns whether o asks for any (names, or an address that finds a
 * function: one that finds none asks for the whole parse, as before), or
 * -ENOMEM. */
static int only_resolve(const struct hp_model *m, const struct hp_open_opts *o, struct only_set *sets)
{
	struct hp_find_hit *hits = NULL;
	size_t cap_hits = 0;
	bool any = false;
	int r = 0;

	for (size_t k = 0; k <= o->nonly_functions; k++) {
		const char *name = k < o->nonly_functions ? o->only_functions[k] : o->only_function;
		size_t n;

		if (!name)
			continue;
		any = true;
		if ((n = hp_model_find_all(m, name, NULL, 0)) == 0)
			continue;
		if (HP_GROW(hits, cap_hits, n)) {
			r = -ENOMEM;
			goto out;
		}
		n = hp_model_find_all(m, name, hits, n);
		for (size_t h = 0; h < n; h++)
			if ((r = only_push(&sets[hits[h].mod - m->mods], hits[h].fn->addr)) < 0)
				goto out;
	}
	for (size_t k = 0; k <= o->nonly_addresses; k++) {
		uint64_t a = k < o->nonly_addresses ? o->only_addresses[k] : o->only_address;
		const struct hp_module *mod;
		const struct hp_function *f = a ? hp_model_lookup(m, a, &mod) : NULL;

		if (!f)
			continue;
		any = true;
		if ((r = only_push(&sets[mod - m->mods], f->addr)) < 0)
			goto out;
	}
	for (size_t i = 0; i < m->nmods; i++)
		only_sort(&sets[i]);
	r = any;
out:
	free(hits);
	return r;
}

/* Read module i's text into its copy (modules lose the loader's fill). */
static int module_text(struct kpriv *kp, struct hp_model *m, size_t i)
{
	struct hp_module *mod = &m->mods[i];
	struct ktext_copy *c = &kp->copies[i];
	int r;

	c->lo = mod->funcs[0].addr < mod->base ? mod->funcs[0].addr : mod->base;
	c->hi = mod->funcs[mod->nfuncs - 1].addr + mod->funcs[mod->nfuncs - 1].size;
	if ((r = read_text(kp, mod, c)) < 0)
		return r;
	if (i > 0)
		trim_module_fill(mod, c);
	return 0;
}

/* The noreturn cache's key for vmlinux (m->mods[0]) as the model has it. */
static int cache_key(const struct hp_model *m, struct hp_kcache_key *k)
{
	const struct hp_module *vm = &m->mods[0];

	if (!m->nmods || !vm->nfuncs)
		return -ENOENT;
	return hp_kcache_key_now(k, m->build_id, vm->nfuncs,
				 vm->funcs[vm->nfuncs - 1].addr + vm->funcs[vm->nfuncs - 1].size - vm->base);
}

/* vmlinux's functions that never return, from the cache in dir: sorted
 * addresses of all of them into *all, of those proven into *proven, and
 * each one's flags set on vmlinux's functions. Every entry must start a
 * function of vmlinux. 0, or a negative errno (-ENOENT: no cache) with the
 * reason for a refused file printed. */
static int cache_read(struct hp_model *m, const char *dir, uint64_t **all, size_t *nall, uint64_t **proven,
		      size_t *nproven)
{
	struct hp_module *vm = &m->mods[0];
	struct hp_kcache_key k;
	struct hp_kcache_fn *v = NULL;
	char why[512] = "";
	size_t n = 0, np = 0;
	int r;

	*all = *proven = NULL;
	*nall = *nproven = 0;
	if ((r = cache_key(m, &k)) < 0)
		return r;
	if ((r = hp_kcache_load(dir, &k, &v, &n, why, sizeof(why))) < 0)
		goto refused;
	*all = malloc((n ? n : 1) * sizeof(uint64_t));
	*proven = malloc((n ? n : 1) * sizeof(uint64_t));
	if (!*all || !*proven) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		size_t lo = 0, hi = vm->nfuncs;
		uint64_t a = vm->base + v[i].off;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (vm->funcs[mid].addr < a)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == vm->nfuncs || vm->funcs[lo].addr != a) {
			snprintf(why, sizeof(why), "its entry +0x%" PRIx64 " starts no function of vmlinux", v[i].off);
			r = -EBADMSG;
			goto refused;
		}
		vm->funcs[lo].flags |= HP_FN_NORETURN | (v[i].named ? HP_FN_NORETURN_NAMED : 0);
		(*all)[i] = a;
		if (!v[i].named)
			(*proven)[np++] = a;
	}
	*nall = n;
	*nproven = np;
	free(v);
	return 0;
refused:
	if (r != -ENOENT)
		fprintf(stderr, "hotpathd: the kernel's noreturn cache in %s is ignored: %s\n", dir, why);
out:
	for (size_t i = 0; i < vm->nfuncs; i++)
		vm->funcs[i].flags &= ~(uint32_t)(HP_FN_NORETURN | HP_FN_NORETURN_NAMED);
	free(*all);
	free(*proven);
	*all = *proven = NULL;
	free(v);
	return r;
}

/* After a whole parse of vmlinux: its functions that never return into the
 * cache in dir (a failure is printed unless quiet; the parse stands). */
static void cache_write(const struct hp_model *m, const char *dir, bool quiet)
{
	const struct hp_module *vm = &m->mods[0];
	struct hp_kcache_fn *v = malloc((vm->nfuncs ? vm->nfuncs : 1) * sizeof(*v));
	struct hp_kcache_key k;
	char why[512] = "";
	size_t n = 0;
	int r;

	if (!v || cache_key(m, &k) < 0) {
		free(v);
		return;
	}
	for (size_t i = 0; i < vm->nfuncs; i++)
		if (vm->funcs[i].flags & HP_FN_NORETURN)
			v[n++] = (struct hp_kcache_fn){ vm->funcs[i].addr - vm->base,
							!!(vm->funcs[i].flags & HP_FN_NORETURN_NAMED) };
	if ((r = hp_kcache_store(dir, &k, v, n, why, sizeof(why))) < 0 && !quiet)
		fprintf(stderr, "hotpathd: the kernel's noreturn cache was not written: %s\n", why);
	free(v);
}

int hp_model_open_kernel(const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen)
{
	struct hp_open_opts defaults = { 0 };
	struct hp_kallsyms ks = { 0 };
	struct hp_model *m;
	struct kpriv *kp;
	struct utsname un;
	struct only_set *sets = NULL; /* a targeted open's functions, per module */
	size_t nsets = 0;
	uint64_t *vm_noret = NULL, *cached = NULL, *proven = NULL;
	size_t nvm_noret = 0, ncached = 0, nproven = 0;
	bool have_cache = false, only = false;
	const char *cache_dir;
	double t0 = hp_now();
	size_t i;
	int r;

	*out = NULL;
	if (!o)
		o = &defaults;
	m = hp_model_new(HP_TARGET_KERNEL);
	kp = calloc(1, sizeof(*kp));
	if (!m || !kp) {
		free(kp);
		hp_model_free(m);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&kp->lock, NULL);
	m->priv = kp;
	m->free_priv = kernel_free_priv;
	m->read = kernel_read;
	if (uname(&un) == 0)
		snprintf(m->release, sizeof(m->release), "%s", un.release);
	hp_kernel_build_id(m->build_id, sizeof(m->build_id));

	/* HOTPATH_TIMING=1 prints where the open spends its time. */
	bool timing = getenv("HOTPATH_TIMING") != NULL;
	double tp = t0;
#define PHASE(what)                                                               \
	do {                                                                      \
		if (timing)                                                       \
			fprintf(stderr, "  %-10s %.3f s\n", what, hp_now() - tp); \
		tp = hp_now();                                                    \
	} while (0)

	/* Load the reader first: without permission nothing else matters. */
	if ((r = open_bpf(kp, err, errlen)) < 0)
		goto fail;
	PHASE("bpf load");
	FILE *fp = fopen("/proc/kallsyms", "re");
	if (!fp) {
		r = -errno;
		snprintf(err, errlen, "cannot open /proc/kallsyms: %s", strerror(errno));
		goto fail;
	}
	/* stdio reads a /proc file 1 KiB per read(): thousands of system
	 * calls for the kallsyms, seconds under emulation; a large buffer
	 * makes them a few dozen. */
	char *fbuf = malloc(HP_KALLSYMS_BUF);
	if (fbuf)
		setvbuf(fp, fbuf, _IOFBF, HP_KALLSYMS_BUF);
	r = hp_kallsyms_read(m, fp, &ks, err, errlen);
	fclose(fp);
	free(fbuf);
	if (r < 0)
		goto fail;
	PHASE("kallsyms");
	if (hp_kallsyms_read_sections(&ks, "/sys/module") < 0) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	PHASE("sections");
	read_bug_table(kp, ks.markers, ks.text, ks.etext);
	read_jump_table(kp, ks.markers, ks.text, ks.etext);
	{
		long nt = hp_kallsyms_static_call_tramps(&ks, &kp->tramps);
		if (nt < 0) {
			r = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		kp->ntramps = (size_t)nt;
	}
	read_static_calls(kp, ks.markers, ks.text, ks.etext);
	if ((r = read_pinned(kp, ks.markers)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	PHASE("tables");
	if ((r = hp_kallsyms_build(m, &ks, err, errlen)) < 0)
		goto fail;
	/* Each module keeps its ELF build id (vmlinux: the kernel's). */
	for (size_t k = 0; k < m->nmods; k++) {
		struct hp_module *mod = &m->mods[k];
		if (k == 0)
			snprintf(mod->build_id, sizeof(mod->build_id), "%s", m->build_id);
		else
			module_build_id(mod->name, mod->build_id, sizeof(mod->build_id));
	}

	/* The index covers every function, parsed or not, so callees of a
	 * single parsed function still symbolize. */
	if ((r = hp_model_build_index(m)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	PHASE("index");
	/* Some functions (the CLI's fast path): each module's set of them,
	 * parsed with what decides their blocks. */
	nsets = m->nmods;
	sets = calloc(nsets ? nsets : 1, sizeof(*sets));
	if (!sets || (r = only_resolve(m, o, sets)) < 0) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	only = r > 0;
	/* Some functions: vmlinux's functions that never return, as a whole
	 * parse of this boot found them, spare the parse of their callees. */
	cache_dir = o->kernel_cache_dir ? o->kernel_cache_dir : HP_KERNEL_CACHE_DIR;
	if (only && *cache_dir && m->nmods && cache_read(m, cache_dir, &cached, &ncached, &proven, &nproven) == 0)
		have_cache = true;
	PHASE("cache");
	kp->copies = calloc(m->nmods ? m->nmods : 1, sizeof(*kp->copies));
	if (!kp->copies) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	/* Kernel semantics: WARN traps continue, hlt resumes, objtool's
	 * noreturn functions; modules also know vmlinux's noreturn functions. */
	struct hp_cfg_env env = { .ret_thunks = ks.ret_thunks,
				  .nret_thunks = ks.nret,
				  .ind_thunks = ks.ind_thunks,
				  .nind_thunks = ks.nind,
				  .noreturn_names = hp_noreturn_kernel,
				  .warn_traps = kp->facts.warn_traps,
				  .nwarn_traps = kp->facts.nwarn_traps,
				  .traps_known = kp->facts.nbug_entries > 0,
				  .hlt_continues = true };
	/* Functions of a module: whether the vmlinux functions their parse
	 * reaches return decides their blocks, so those join vmlinux's set. */
	for (i = 1; only && !have_cache && i < m->nmods; i++) {
		struct hp_module *mod = &m->mods[i];
		struct hp_cfg_env menv = env;
		struct hp_cfg_only one = { .addrs = sets[i].v, .naddrs = sets[i].n };

		if (!sets[i].n)
			continue;
		if ((r = module_text(kp, m, i)) < 0) {
			snprintf(err, errlen, "out of memory for a copy of %s text", mod->name);
			goto fail;
		}
		if (sites_canonical(kp, mod, &kp->copies[i], false) < 0) {
			r = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		menv.static_branches = kp->facts.static_branches;
		menv.nstatic_branches = kp->facts.nstatic_branches;
		menv.static_calls = kp->facts.static_calls;
		menv.nstatic_calls = kp->facts.nstatic_calls;
		menv.traps_known = false;
		if ((r = hp_cfg_parse_module(mod, &menv, kernel_bytes, &kp->copies[i], 1, &one)) < 0) {
			snprintf(err, errlen, "parsing %s: %s", mod->name, strerror(-r));
			goto fail;
		}
		for (size_t k = 0; k < one.noutside && r == 0; k++)
			r = only_push(&sets[0], one.outside[k]);
		free(one.outside);
		if (r < 0) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	if (only)
		only_sort(&sets[0]);
	for (i = 0; i < m->nmods; i++) {
		struct hp_module *mod = &m->mods[i];
		struct ktext_copy *c = &kp->copies[i];
		struct hp_cfg_only one = { .addrs = sets[i].v,
					   .naddrs = sets[i].n,
					   .complete = i == 0 && have_cache,
					   .proven = i == 0 ? proven : NULL,
					   .nproven = i == 0 ? nproven : 0 };

		/* Only modules' functions with the cache: vmlinux's facts are
		 * the cache's, nothing of vmlinux is parsed. */
		if (i == 0 && have_cache && !sets[0].n) {
			env.noreturn = cached;
			env.nnoreturn = ncached;
			env.traps_known = false;
			continue;
		}
		if (!mod->nfuncs || (only && i > 0 && !sets[i].n) || (o->modules_only && i == 0))
			continue;
		if (!c->buf && (r = module_text(kp, m, i)) < 0) {
			snprintf(err, errlen, "out of memory for a copy of %s text", mod->name);
			goto fail;
		}
		PHASE("read text");
		/* Jump labels and static calls: one canonical form whatever the
		 * keys and calls are set to (a module's own tables read from
		 * sysfs first). */
		if (sites_canonical(kp, mod, c, i == 0) < 0) {
			r = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		env.static_branches = kp->facts.static_branches;
		env.nstatic_branches = kp->facts.nstatic_branches;
		env.static_calls = kp->facts.static_calls;
		env.nstatic_calls = kp->facts.nstatic_calls;
		if (i == 0)
			PHASE("static");
		r = hp_cfg_parse_module(mod, &env, kernel_bytes, c, o->threads, only ? &one : NULL);
		free(one.outside);
		PHASE("decode");
		free(c->buf);
		c->buf = NULL;
		if (r < 0) {
			snprintf(err, errlen, "parsing %s: %s", mod->name, strerror(-r));
			goto fail;
		}
		if (i == 0 && !only && !o->modules_only && *cache_dir)
			cache_write(m, cache_dir, o->quiet);
		if (i == 0 && !vm_noret) {
			vm_noret = malloc((mod->nfuncs ? mod->nfuncs : 1) * sizeof(*vm_noret));
			for (size_t k = 0; vm_noret && k < mod->nfuncs; k++)
				if (mod->funcs[k].flags & HP_FN_NORETURN)
					vm_noret[nvm_noret++] = mod->funcs[k].addr;
			env.noreturn = vm_noret;
			env.nnoreturn = nvm_noret;
			/* Module bug tables are not read: their traps prove nothing. */
			env.traps_known = false;
		}
	}
	free(vm_noret);
	vm_noret = NULL;
	free(cached);
	cached = NULL;
	free(proven);
	proven = NULL;
	m->parse_seconds = hp_now() - t0;
	if (!o->quiet) {
		struct hp_model_stats st;

		hp_model_stats(m, &st);
		fprintf(stderr, "parsed %zu kernel functions (%zu blocks) in %.2f s\n", st.functions, st.blocks,
			m->parse_seconds);
	}
	r = 0;
	*out = m;
	m = NULL;
fail:
	for (i = 0; sets && i < nsets; i++)
		free(sets[i].v);
	free(sets);
	free(vm_noret);
	free(cached);
	free(proven);
	hp_kallsyms_free(&ks);
	hp_model_free(m);
	return r;
}
