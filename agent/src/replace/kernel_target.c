// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel target (patch_target.h) over hotpath.ko's /dev/hotpath
 * (agent/kmod/hotpath_uapi.h): the same install and revert engine as for
 * processes, with the module doing every write.
 *
 *   module_base    vmlinux: _text; a module: its lowest text symbol, both
 *                  from /proc/kallsyms (as the kernel model's kallsyms.c
 *                  places modules), through the process's view of it
 *                  (kernel_syms.h); the build id is the kernel's
 *   read           HOTPATH_READ (kernel text, module text, our own heaps)
 *   heap_place     HOTPATH_HEAP_ALLOC: the module picks the address (a
 *                  slot of its own text), so "place" allocates; an
 *                  address outside the range the engine needs is freed
 *                  and refused
 *   heap_unplace   HOTPATH_HEAP_FREE of a heap placed and never mapped
 *   heap_map       HOTPATH_HEAP_WRITE of the whole image, then HEAP_SEAL
 *                  (no write after it)
 *   unwind         HOTPATH_HEAP_UNWIND of the copy's position map (the
 *                  plan's unwind data): the originals' ORC entries and
 *                  names for the copy / nothing: HOTPATH_HEAP_FREE drops
 *                  them with the heap (after any drain)
 *   entries        HOTPATH_REDIRECT (ftrace IPMODIFY, with the original
 *                  bytes as expect) / HOTPATH_UNDO
 *   call sites     HOTPATH_CALL_PATCH (the module pokes the e8 rel32 with
 *                  the kernel's text_poke_bp, checking the original bytes
 *                  as the undo record holds them) / HOTPATH_CALL_UNDO
 *   heap_release   HOTPATH_HEAP_FREE (the module waits for an RCU-tasks
 *                  grace period, then keeps the heap draining while any
 *                  task's stack may still be inside the copy: freed for
 *                  us at once, its slot released once the last one left)
 *
 * The device is opened once per process and stays open for the process's
 * life: closing it makes the module undo everything this process
 * installed (call sites, then redirects, then heaps). So an install lives as long as the
 * process that made it (`hotpathd install --hold`, or the daemon), and
 * nothing can be left half-done by an agent that dies: its fd closes.
 *
 * An entry redirected through ftrace is not a jump written at the entry:
 * ftrace turns the entry's 5-byte nop into a call of its trampoline, whose
 * bytes the agent cannot predict. read_raw shows a redirect this process
 * made as the jump it amounts to (the undo record's new bytes), so the
 * engine's live-state rule (original / ours / neither) holds for kernel
 * entries too. A patched call site needs no such help: its bytes are the
 * ones written.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "hotpath_uapi.h"
#include "host/hostinfo.h"
#include "host/processes.h"
#include "isa/isa.h"
#include "replace/kernel_syms.h"
#include "replace/patch_target.h"

/* The process's one open of the device, its heaps and redirects: they
 * outlive any one hp_patch_target (an install's, then its revert's). */
static struct {
	int fd; /* -1: not open */
	struct hotpath_info info;
	uint64_t fentry; /* __fentry__, from /proc/kallsyms */
	struct {
		uint64_t addr, len;
		uint32_t id;
		char name[64]; /* the install's heap name, once mapped (heap_find) */
	} heaps[HOTPATH_HEAPS_MAX];
	struct {
		uint64_t entry, target;
	} redirects[HOTPATH_REDIRECTS_MAX];
} kdev = { .fd = -1 };

static const char *device_path(void)
{
	const char *p = getenv("HOTPATH_KERNEL_DEVICE"); /* tests: a device that is not there */
	return p && *p ? p : HOTPATH_DEVICE;
}

static int kmodule_base(struct hp_patch_target *t, const char *path, const char *build_id, uint64_t *bias, char *err,
			size_t errlen)
{
	char now[65] = "";
	bool vmlinux = !strcmp(path, "vmlinux");

	hp_kernel_build_id(now, sizeof(now));
	if (build_id && build_id[0] && now[0] && strcmp(build_id, now)) {
		snprintf(err, errlen,
			 "the plan is for another kernel build (build id %.16s..., this kernel's %.16s...): plan again "
			 "on this kernel",
			 build_id, now);
		return -ESTALE;
	}
	*bias = vmlinux ? hp_ksyms_live_text() : hp_ksyms_live_module(path);
	if (!*bias) {
		snprintf(err, errlen, "%s is not loaded in this kernel (no text symbol of it in /proc/kallsyms)",
			 vmlinux ? "vmlinux's _text" : path);
		return -ENOENT;
	}
	return 0;
}

static int kquiesce(struct hp_patch_target *t, char *err, size_t errlen)
{
	/* Nothing to stop: ftrace serialises a redirect's registration itself
	 * (under ftrace_lock, with text_poke_bp and a sync of every CPU), and a
	 * task is always either before the entry (it takes the redirect or
	 * not, whole) or inside the original or the copy, both complete. */
	t->quiesce_seconds = 0;
	return 0;
}

static void kresume(struct hp_patch_target *t)
{
}

static int kread(struct hp_patch_target *t, uint64_t addr, void *buf, size_t len)
{
	for (size_t done = 0; done < len;) {
		size_t n = len - done < kdev.info.read_max ? len - done : kdev.info.read_max;
		struct hotpath_read rq = { .addr = addr + done,
					   .buf = (uint64_t)(uintptr_t)((uint8_t *)buf + done),
					   .len = (uint32_t)n };
		if (ioctl(kdev.fd, HOTPATH_READ, &rq) < 0)
			return -errno;
		done += n;
	}
	return 0;
}

/* The jump an entry redirect amounts to: e9 rel32 from entry to target. */
static void jump_bytes(uint64_t entry, uint64_t target, uint8_t out[5])
{
	int32_t rel = (int32_t)(target - (entry + 5));
	out[0] = 0xe9;
	memcpy(out + 1, &rel, 4);
}

static int kread_raw(struct hp_patch_target *t, uint64_t addr, void *buf, size_t len)
{
	int r = kread(t, addr, buf, len);
	if (r < 0)
		return r;
	for (size_t i = 0; i < HOTPATH_REDIRECTS_MAX; i++) {
		uint64_t e = kdev.redirects[i].entry;
		uint8_t j[5];
		if (!e || e + 5 <= addr || e >= addr + len)
			continue;
		jump_bytes(e, kdev.redirects[i].target, j);
		for (int k = 0; k < 5; k++)
			if (e + k >= addr && e + k < addr + len)
				((uint8_t *)buf)[e + k - addr] = j[k];
	}
	return 0;
}

static int kprepare_scratch(struct hp_patch_target *t, struct hp_undo *u, char *err, size_t errlen)
{
	memset(u, 0, sizeof(*u));
	u->kind = HP_UNDO_SCRATCH; /* none needed: the module does the writes */
	return 0;
}

static int kheap_free_id(uint32_t id)
{
	struct hotpath_heap_id rq = { .id = id };
	return ioctl(kdev.fd, HOTPATH_HEAP_FREE, &rq) < 0 ? -errno : 0;
}

static int kheap_place(struct hp_patch_target *t, uint64_t lo, uint64_t hi, uint64_t near, size_t len, uint64_t *addr,
		       char *err, size_t errlen)
{
	struct hotpath_heap_alloc rq = { .size = (uint32_t)len };
	size_t slot = HOTPATH_HEAPS_MAX;

	if (len > kdev.info.heap_max) {
		snprintf(err, errlen, "the copy needs %zu bytes; hotpath.ko's heaps hold at most %u", len,
			 kdev.info.heap_max);
		return -E2BIG;
	}
	for (size_t i = 0; i < HOTPATH_HEAPS_MAX && slot == HOTPATH_HEAPS_MAX; i++)
		if (!kdev.heaps[i].addr)
			slot = i;
	/* The module picks the address (a slot of its own text, within rel32
	 * reach of kernel text): "placing" is allocating here. */
	if (slot == HOTPATH_HEAPS_MAX || ioctl(kdev.fd, HOTPATH_HEAP_ALLOC, &rq) < 0) {
		int e = slot == HOTPATH_HEAPS_MAX ? ENOSPC : errno;
		snprintf(err, errlen, "hotpath.ko could not allocate a code heap of %zu bytes: %s", len, strerror(e));
		return -e;
	}
	/* Kernel addresses are the upper half: the engine's range is signed. */
	if ((int64_t)rq.addr < (int64_t)lo || (int64_t)(rq.addr + len) > (int64_t)hi) {
		kheap_free_id(rq.id);
		snprintf(err, errlen,
			 "hotpath.ko's code heap at 0x%" PRIx64
			 " is out of rel32 reach of the copy's references "
			 "[0x%" PRIx64 ", 0x%" PRIx64 ")",
			 (uint64_t)rq.addr, lo, hi);
		return -ERANGE;
	}
	kdev.heaps[slot].addr = rq.addr;
	kdev.heaps[slot].len = len;
	kdev.heaps[slot].id = rq.id;
	*addr = rq.addr;
	return 0;
}

static size_t heap_slot(uint64_t addr)
{
	for (size_t i = 0; i < HOTPATH_HEAPS_MAX; i++)
		if (kdev.heaps[i].addr && kdev.heaps[i].addr == addr)
			return i;
	return HOTPATH_HEAPS_MAX;
}

static int kheap_map(struct hp_patch_target *t, struct hp_heap *h, const uint8_t *image, char *err, size_t errlen)
{
	size_t s = heap_slot(h->addr);

	if (s == HOTPATH_HEAPS_MAX) {
		snprintf(err, errlen, "no code heap of this process at 0x%" PRIx64, h->addr);
		return -ENOENT;
	}
	if (h->rw_off) {
		snprintf(err, errlen,
			 "a copy with inline counters is not installed in the kernel yet (its heap would need a "
			 "writable part)");
		return -EOPNOTSUPP;
	}
	snprintf(kdev.heaps[s].name, sizeof(kdev.heaps[s].name), "%s", h->name);
	h->data = 0; /* no registration area: the module keeps the copy's unwind entries (kunwind_register) */
	h->data_len = 0;
	struct hotpath_heap_write w = { .id = kdev.heaps[s].id,
					.buf = (uint64_t)(uintptr_t)image,
					.len = (uint32_t)h->len };
	struct hotpath_heap_id seal = { .id = kdev.heaps[s].id };
	if (ioctl(kdev.fd, HOTPATH_HEAP_WRITE, &w) < 0 || ioctl(kdev.fd, HOTPATH_HEAP_SEAL, &seal) < 0) {
		int e = errno;
		snprintf(err, errlen, "hotpath.ko refused to write or seal the code heap: %s", strerror(e));
		return -e;
	}
	return 0;
}

/* The copy's position map (the plan's unwind data, plan/kernel_map.c) to
 * hotpath.ko, which gives the copy the originals' ORC entries and names
 * (kmod/hotpath_unwind.c). Where the kernel's ORC table is not in kallsyms
 * (no CONFIG_KALLSYMS_ALL) the module answers ENOENT: the copy runs without
 * them, as the install's unwind note says. */
static int kunwind_register(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen)
{
	static unsigned long registrations;
	size_t s = heap_slot(h->addr);

	h->unwind_registered = false;
	if (s == HOTPATH_HEAPS_MAX || h->unwind < h->addr || h->unwind - h->addr >= h->len) {
		snprintf(err, errlen, "the copy's position map is not in a code heap of this process");
		return -ENOENT;
	}
	/* Test hook, the kernel lane's control for livepatch's reliable-stack
	 * check (guest/klivepatch.sh): HOTPATH_TEST_SKIP_UNWIND=N leaves this
	 * process's Nth copy without names and ORC entries, as a kernel whose
	 * ORC table is not in kallsyms does (the ENOENT below). */
	const char *skip = getenv("HOTPATH_TEST_SKIP_UNWIND");
	registrations++;
	if (skip && strtoul(skip, NULL, 10) == registrations)
		return 0;
	struct hotpath_heap_unwind rq = { .id = kdev.heaps[s].id,
					  .offset = (uint32_t)(h->unwind - h->addr),
					  .len = h->unwind_len > UINT32_MAX ? UINT32_MAX : (uint32_t)h->unwind_len };
	if (ioctl(kdev.fd, HOTPATH_HEAP_UNWIND, &rq) == 0) {
		h->unwind_registered = true;
		return 0;
	}
	if (errno == ENOENT)
		return 0;
	int e = errno;
	snprintf(err, errlen, "hotpath.ko refused the copy's position map: %s", strerror(e));
	return e == EBUSY ? -EIO : -e; /* -EBUSY tells the engine nothing was called */
}

/* The copy's names and ORC entries go with its heap: HOTPATH_HEAP_FREE
 * removes them when it releases the slot, which hotpath.ko delays while a
 * task's stack may still be inside the copy (its README, "Draining heaps";
 * the engine calls heap_release right after this). Dropped here, before the
 * free, a task asleep in the copy would lose its frame's name and the
 * reliable walk of its stack: livepatch transitions would wait on it, and
 * the drain could not see it leave. So the module is asked nothing here
 * (HOTPATH_HEAP_UNWIND_DROP stays for a heap that keeps running). */
static int kunwind_deregister(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen)
{
	h->unwind_registered = false;
	return 0;
}

/* Nothing to mark: a request to the module is whole or not done, and the
 * module drops everything of a process that dies (closing /dev/hotpath). */
static int kunwind_arm(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen)
{
	return 0;
}

static int kunwind_settle(struct hp_patch_target *t, struct hp_heap *h, bool deregister, char *err, size_t errlen)
{
	return 0;
}

/* Whether the 5 bytes at p are an idle ftrace site: a 5-byte nop, or the
 * call of __fentry__ the compiler left (ftrace nops it at boot or load). */
static bool idle_site(const uint8_t *p, uint64_t addr)
{
	struct hp_isa_insn in;
	struct hp_isa_detail d;

	if (hp_isa_decode(p, 5, addr, &in) < 0 || in.len != 5)
		return false;
	if (in.cls == HP_IC_CALL && in.has_target)
		return kdev.fentry && in.target == kdev.fentry;
	return hp_isa_decode_detail(p, 5, addr, &d) == 0 && d.mnem == HP_MN_NOP;
}

static int kprepare_entry(struct hp_patch_target *t, uint64_t fn, uint64_t new_entry, struct hp_undo *u, char *err,
			  size_t errlen)
{
	uint8_t copy[5];
	int r;

	memset(u, 0, sizeof(*u));
	u->kind = HP_UNDO_ENTRY;
	u->len = 5;
	u->addr = fn;
	if ((r = kread(t, fn, u->orig, 5)) < 0 || (r = kread(t, new_entry, copy, 5)) < 0) {
		snprintf(err, errlen, "cannot read the entry at 0x%" PRIx64 " or its copy through hotpath.ko: %s", fn,
			 strerror(-r));
		return r;
	}
	if (!idle_site(u->orig, fn)) {
		snprintf(err, errlen,
			 "the entry at 0x%" PRIx64
			 " is not an idle ftrace site (a 5-byte nop): something traces or patches it now",
			 fn);
		return -EBUSY;
	}
	/* The copy starts with the site as the planner read it; a call there
	 * other than __fentry__ would be an ftrace trampoline's, run from the
	 * copy with a return address ftrace does not know. */
	if (!idle_site(copy, new_entry)) {
		snprintf(
			err, errlen,
			"the copy's entry at 0x%" PRIx64
			" does not start with an idle ftrace site (a 5-byte nop or a call of __fentry__): the plan was "
			"made while something traced the function; plan again",
			new_entry);
		return -EINVAL;
	}
	jump_bytes(fn, new_entry, u->now);
	return 0;
}

static int kprepare_call(struct hp_patch_target *t, uint64_t site, uint64_t new_target, struct hp_undo *u, char *err,
			 size_t errlen)
{
	struct hp_isa_insn in;
	int r;

	memset(u, 0, sizeof(*u));
	u->kind = HP_UNDO_CALL;
	u->addr = site;
	u->len = HOTPATH_CALL_LEN;
	if ((r = kread(t, site, u->orig, HOTPATH_CALL_LEN)) < 0) {
		snprintf(err, errlen, "cannot read the call at 0x%" PRIx64 " through hotpath.ko: %s", site,
			 strerror(-r));
		return r;
	}
	/* hotpath.ko patches e8 rel32 only: the direct call the model found. */
	if (u->orig[0] != 0xe8 || hp_isa_decode(u->orig, HOTPATH_CALL_LEN, site, &in) < 0 || in.cls != HP_IC_CALL ||
	    in.len != HOTPATH_CALL_LEN) {
		snprintf(err, errlen, "0x%" PRIx64 " holds no 5-byte direct call (e8 rel32) now", site);
		return -EINVAL;
	}
	int64_t rel = (int64_t)(new_target - (site + HOTPATH_CALL_LEN));
	if (rel != (int32_t)rel) {
		snprintf(err, errlen, "the call at 0x%" PRIx64 " cannot reach 0x%" PRIx64, site, new_target);
		return -ERANGE;
	}
	int32_t rel32 = (int32_t)rel;
	u->now[0] = 0xe8;
	memcpy(u->now + 1, &rel32, 4);
	return 0;
}

/* Make the call site u calls its new target (u->now) through hotpath.ko. */
static int kapply_call(const struct hp_undo *u, char *err, size_t errlen)
{
	int32_t rel;
	struct hotpath_call rq = { .site = u->addr };

	if (u->len != HOTPATH_CALL_LEN || u->now[0] != 0xe8) {
		snprintf(err, errlen, "internal: a kernel call site record is not e8 rel32");
		return -EINVAL;
	}
	memcpy(&rel, u->now + 1, 4);
	rq.target = u->addr + HOTPATH_CALL_LEN + (uint64_t)(int64_t)rel;
	memcpy(rq.expect, u->orig, HOTPATH_CALL_LEN);
	if (ioctl(kdev.fd, HOTPATH_CALL_PATCH, &rq) < 0) {
		int e = errno;
		snprintf(err, errlen, "hotpath.ko refused to patch the call at 0x%" PRIx64 ": %s%s", u->addr,
			 strerror(e),
			 e == EBADMSG ? " (its bytes are not the ones planned)" :
			 e == EBUSY   ? " (patched already)" :
			 e == EINVAL  ? " (not a call, or an ftrace site)" :
			 e == ENOSPC  ? " (the module's call-site table is full)" :
					"");
		return -e;
	}
	return 0;
}

static int kapply(struct hp_patch_target *t, const struct hp_undo *u, hp_pc_map_fn map, void *ctx, char *err,
		  size_t errlen)
{
	size_t slot = HOTPATH_REDIRECTS_MAX;
	int32_t rel;

	if (u->kind == HP_UNDO_SCRATCH && !u->len && !u->big_len)
		return 0;
	if (u->kind == HP_UNDO_CALL)
		return kapply_call(u, err, errlen);
	if (u->kind != HP_UNDO_ENTRY || u->len != 5 || u->now[0] != 0xe9) {
		snprintf(err, errlen, "the kernel target writes entries and call sites only");
		return -EOPNOTSUPP;
	}
	for (size_t i = 0; i < HOTPATH_REDIRECTS_MAX && slot == HOTPATH_REDIRECTS_MAX; i++)
		if (!kdev.redirects[i].entry)
			slot = i;
	memcpy(&rel, u->now + 1, 4);
	struct hotpath_redirect rq = { .entry = u->addr,
				       .target = u->addr + 5 + (uint64_t)(int64_t)rel,
				       .expect = (uint64_t)(uintptr_t)u->orig,
				       .expect_len = 5 };
	if (slot == HOTPATH_REDIRECTS_MAX || ioctl(kdev.fd, HOTPATH_REDIRECT, &rq) < 0) {
		int e = slot == HOTPATH_REDIRECTS_MAX ? ENOSPC : errno;
		snprintf(err, errlen, "hotpath.ko refused to redirect 0x%" PRIx64 ": %s%s", u->addr, strerror(e),
			 e == EBADMSG ? " (its bytes are not the ones planned)" :
			 e == EBUSY   ? " (another ftrace IPMODIFY user, e.g. livepatch, owns it)" :
			 e == EINVAL  ? " (not a function's ftrace site)" :
					"");
		return -e;
	}
	kdev.redirects[slot].entry = rq.entry;
	kdev.redirects[slot].target = rq.target;
	return 0;
}

static int krestore(struct hp_patch_target *t, const struct hp_undo *u, char *err, size_t errlen)
{
	if (u->kind == HP_UNDO_CALL) {
		/* ENOENT: not patched by this process (never applied, or its
		 * holder's fd closed and the module restored it). */
		struct hotpath_call_undo rq = { .site = u->addr };
		if (ioctl(kdev.fd, HOTPATH_CALL_UNDO, &rq) < 0 && errno != ENOENT) {
			int e = errno;
			snprintf(err, errlen, "hotpath.ko could not restore the call at 0x%" PRIx64 ": %s%s", u->addr,
				 strerror(e),
				 e == EBADMSG ? " (someone else rewrote it: left as it is, its code heap kept)" : "");
			return -e;
		}
		return 0;
	}
	if (u->kind != HP_UNDO_ENTRY)
		return 0; /* nothing else is ever written */
	struct hotpath_undo rq = { .entry = u->addr };
	if (ioctl(kdev.fd, HOTPATH_UNDO, &rq) < 0 && errno != ENOENT) {
		int e = errno;
		snprintf(err, errlen, "hotpath.ko could not undo the redirect of 0x%" PRIx64 ": %s", u->addr,
			 strerror(e));
		return -e;
	}
	for (size_t i = 0; i < HOTPATH_REDIRECTS_MAX; i++)
		if (kdev.redirects[i].entry == u->addr)
			kdev.redirects[i].entry = kdev.redirects[i].target = 0;
	return 0;
}

static int kin_use(struct hp_patch_target *t, uint64_t lo, uint64_t hi, char *why, size_t wlen)
{
	/* Never "in use" here: HOTPATH_HEAP_FREE itself waits for an RCU-tasks
	 * grace period, and the module keeps a heap a task's stack may still be
	 * inside (a sleeper in the copy) until that task has left it. */
	return 0;
}

static int kheap_release(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen)
{
	size_t s = heap_slot(h->addr);
	int r;

	if (s == HOTPATH_HEAPS_MAX)
		return 0; /* not this process's: it was freed when its holder's fd closed */
	if ((r = kheap_free_id(kdev.heaps[s].id)) < 0 && r != -ENOENT) {
		snprintf(err, errlen, "hotpath.ko could not free the code heap at 0x%" PRIx64 ": %s", h->addr,
			 strerror(-r));
		return r;
	}
	memset(&kdev.heaps[s], 0, sizeof(kdev.heaps[s]));
	return 0;
}

/* A heap placed (allocated by hotpath.ko) and never mapped: freed as any
 * heap is; one that cannot be freed keeps its slot, as in kheap_release. */
static void kheap_unplace(struct hp_patch_target *t, uint64_t addr)
{
	struct hp_heap h = { .addr = addr };
	char err[256];

	kheap_release(t, &h, err, sizeof(err));
}

/* A mapped heap of this process by its install's name (the revert asks so,
 * with h empty). Leftovers of another process cannot exist: the module frees
 * an opener's heaps when its fd closes. (It compared h->addr, which the
 * revert leaves 0, so an in-process revert never released its heap: the
 * module's 16 slots ran out at a process's 17th install, as the lane's
 * read-path cycles found.) */
static int kheap_find(struct hp_patch_target *t, const char *name, struct hp_heap *h)
{
	for (size_t i = 0; i < HOTPATH_HEAPS_MAX; i++)
		if (kdev.heaps[i].addr && kdev.heaps[i].name[0] && !strcmp(kdev.heaps[i].name, name)) {
			h->addr = kdev.heaps[i].addr;
			h->len = kdev.heaps[i].len;
			return 1;
		}
	return 0;
}

static bool kalive(struct hp_patch_target *t)
{
	return kdev.fd >= 0;
}

static void kclose(struct hp_patch_target *t)
{
	/* The device stays open: closing it would undo the install. */
	t->ops = NULL;
}

static const struct hp_patch_ops kernel_ops = {
	.kind = "kernel",
	.module_base = kmodule_base,
	.quiesce = kquiesce,
	.resume = kresume,
	.read = kread,
	.read_raw = kread_raw,
	.prepare_scratch = kprepare_scratch,
	.heap_place = kheap_place,
	.heap_unplace = kheap_unplace,
	.heap_map = kheap_map,
	.unwind_register = kunwind_register,
	.unwind_deregister = kunwind_deregister,
	.unwind_arm = kunwind_arm,
	.unwind_settle = kunwind_settle,
	.prepare_entry = kprepare_entry,
	.prepare_call = kprepare_call,
	.apply = kapply,
	.restore = krestore,
	.in_use = kin_use,
	.heap_release = kheap_release,
	.heap_find = kheap_find,
	.alive = kalive,
	.close = kclose,
};

int hp_patch_target_kernel(struct hp_patch_target *t, char *err, size_t errlen)
{
	const char *dev = device_path();
	uint64_t st = 0;

	memset(t, 0, sizeof(*t));
	if (kdev.fd < 0) {
		int fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			snprintf(err, errlen,
				 e == ENOENT ?
					 "%s is missing: load hotpath.ko (agent/kmod) to install into the kernel" :
				 e == EBUSY ? "%s is held by another process (one user at a time: `hotpathd installed` "
					      "names the one holding an install)" :
					      "cannot open %s: %s",
				 dev, strerror(e));
			return -e;
		}
		struct hotpath_info info;
		if (ioctl(fd, HOTPATH_INFO, &info) < 0 || info.abi_version != HOTPATH_ABI_VERSION) {
			snprintf(err, errlen,
				 "%s speaks ABI version %u, this agent %u: load the hotpath.ko built with it", dev,
				 ioctl(fd, HOTPATH_INFO, &info) < 0 ? 0 : info.abi_version, HOTPATH_ABI_VERSION);
			close(fd);
			return -EPROTO;
		}
		kdev.fd = fd;
		kdev.info = info;
		kdev.fentry = hp_ksyms_live_fentry();
	}
	hp_process_start_time(getpid(), &st);
	t->ops = &kernel_ops;
	snprintf(t->desc, sizeof(t->desc), "the kernel %.64s (%s held by process %d)", kdev.info.release, dev,
		 (int)getpid());
	t->instance = st;
	return 0;
}

long hp_kernel_heaps_draining(void)
{
	char buf[32];
	FILE *f = fopen("/sys/module/hotpath/parameters/draining", "re");
	if (!f)
		return -1;
	char *got = fgets(buf, sizeof(buf), f);
	fclose(f);
	char *end = NULL;
	long n = got ? strtol(buf, &end, 10) : -1;
	return got && end != buf && n >= 0 ? n : -1;
}
