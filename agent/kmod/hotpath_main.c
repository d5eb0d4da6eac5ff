// SPDX-License-Identifier: GPL-2.0
/*
 * hotpath.ko, first slice: the kernel side of Hotpath's target interface
 * (agent/src/replace/patch_target.h) behind a root-only misc device,
 * /dev/hotpath, one opener at a time. Its requests (hotpath_uapi.h, README.md):
 *
 *   INFO        ABI version, limits, kernel release
 *   READ        bytes of kernel text (core kernel, one module, or an own heap)
 *   HEAP_ALLOC  a code heap: a slot of this module's own text (hotpath_heaps.S),
 *               so within rel32 reach of kernel text and module text to the
 *               kernel (kallsyms, the ORC unwinder, kprobes)
 *   HEAP_WRITE  bytes into a heap that is not sealed yet (text_poke_copy)
 *   HEAP_SEAL   no write after this; a redirect or call may now reach it
 *   HEAP_UNWIND the copy's position map (read from the sealed heap) gives it
 *               the original's ORC entries and names (unwind.c's part here)
 *   HEAP_UNWIND_DROP  those entries and names removed
 *   REDIRECT    calls of a traceable function go to a sealed heap of the
 *               opener, through an ftrace_ops with IPMODIFY (livepatch's way)
 *   UNDO        one redirect removed
 *   CALL_PATCH  one direct call (e8 rel32) in kernel text made to call a
 *               sealed heap of the opener, through text_poke_bp under
 *               text_mutex (the way static calls and ftrace poke calls)
 *   CALL_UNDO   one call site's original bytes written back the same way
 *   HEAP_FREE   a heap no redirect or call site points into, freed after an
 *               RCU-tasks grace period (its slot filled with int3 again) once
 *               no task's stack has an address in it; until then it drains
 *               (its slot kept, re-checked every second, the module pinned)
 *
 * Closing the device undoes everything the opener did, call sites first, then
 * redirects, then heaps (and rmmod cannot happen while it is open).
 *
 * core_kernel_text, __module_text_address, ftrace_location, text_poke_bp and
 * text_mutex are not exported by 6.1: their addresses come from
 * register_kprobe on their names at load time, text_mutex's (data) and the
 * rest from kallsyms_lookup_name found the same way (docs/decisions.md).
 */
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/ftrace.h>
#include <linux/kprobes.h>
#include <linux/memory.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/rcupdate.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/stacktrace.h>
#include <linux/stringify.h>
#include <linux/uaccess.h>
#include <linux/utsname.h>
#include <linux/vmalloc.h>
#include <linux/workqueue.h>

#include "hotpath.h"

/* The area of hotpath_heaps.S: heap id i is its slot i. */
extern u8 hotpath_heap_area[];
extern const u64 hotpath_heap_area_bytes;

struct hp_redirect {
	struct ftrace_ops ops; /* first: the handler finds the redirect from it */
	unsigned long entry;
	unsigned long target;
	struct module *mod; /* the entry's module, pinned while redirected; NULL: vmlinux */
};

/* A call site the opener patched: the bytes it had and the ones written. */
struct hp_call {
	unsigned long site; /* 0: slot free */
	unsigned long target;
	u8 orig[HOTPATH_CALL_LEN], now[HOTPATH_CALL_LEN];
	struct module *mod; /* the site's module, pinned while patched; NULL: vmlinux */
	bool stuck;         /* its bytes were changed by someone else: never undone, heap kept */
};

/* The one opener's state, under hp_lock. */
static DEFINE_MUTEX(hp_lock);
static bool hp_open_now;
static struct hp_heap hp_heaps[HOTPATH_HEAPS_MAX];
static struct hp_redirect *hp_redirects[HOTPATH_REDIRECTS_MAX];
static struct hp_call hp_calls[HOTPATH_CALLS_MAX];

/* The kernel's own functions this module needs but 6.1 does not export. */
static void *(*hp_text_poke_copy)(void *addr, const void *opcode, size_t len);
static void *(*hp_text_poke_set)(void *addr, int c, size_t len);
static void (*hp_text_poke_sync)(void);
int (*hp_core_kernel_text)(unsigned long addr);
struct module *(*hp_module_text_address)(unsigned long addr);
static unsigned long (*hp_ftrace_location)(unsigned long ip);
static void (*hp_text_poke_bp)(void *addr, const void *opcode, size_t len, const void *emulate);
static struct mutex *hp_text_mutex;
unsigned long (*hp_lookup_name)(const char *name);
static int (*hp_task_call_func)(struct task_struct *p, task_call_f func, void *arg);
static int (*hp_stack_save_reliable)(struct task_struct *tsk, unsigned long *store, unsigned int size);

/* Hold the module whose text holds addr (none for the core kernel's text)
 * so that it stays loaded while Hotpath has written into or redirected it:
 * *mod is the module held, or NULL; -ENOENT when it is on its way out. */
static int hp_hold_module(unsigned long addr, struct module **mod)
{
	int err = 0;

	preempt_disable();
	*mod = hp_module_text_address(addr);
	if (*mod && !try_module_get(*mod)) {
		*mod = NULL;
		err = -ENOENT;
	}
	preempt_enable();
	return err;
}

/* The address of a kernel function by name: a kprobe on it is placed and
 * removed again, and its address is where the kernel resolved the name. */
static unsigned long hp_lookup(const char *name)
{
	struct kprobe kp = { .symbol_name = name };
	unsigned long addr;

	if (register_kprobe(&kp) < 0)
		return 0;
	addr = (unsigned long)kp.addr;
	unregister_kprobe(&kp);
	return addr;
}

static struct hp_heap *hp_heap_of(unsigned long addr, unsigned long len)
{
	unsigned int i;

	for (i = 0; i < HOTPATH_HEAPS_MAX; i++) {
		struct hp_heap *h = &hp_heaps[i];

		if (h->addr && !h->draining && addr >= h->addr && len <= h->size && addr - h->addr <= h->size - len)
			return h;
	}
	return NULL;
}

/* Code Hotpath may send execution to: inside one of the opener's heaps,
 * sealed (read-only and executable). -ERANGE outside them, -EPERM unsealed. */
static int hp_sealed_target(unsigned long target)
{
	struct hp_heap *h = hp_heap_of(target, 1);

	if (!h)
		return -ERANGE;
	return h->sealed ? 0 : -EPERM;
}

/* Copy len bytes at addr into buf if all of them lie in the core kernel's
 * text, in one module's text, or (with heaps) in one of the opener's heaps;
 * -ERANGE otherwise. The module cannot go away while preemption is off. */
static int hp_text_copy(unsigned long addr, u32 len, void *buf, bool heaps)
{
	unsigned long last = addr + len - 1;
	struct module *mod;
	int err = -ERANGE;

	if (!len || last < addr)
		return -ERANGE;
	if (heaps && hp_heap_of(addr, len))
		return copy_from_kernel_nofault(buf, (void *)addr, len) ? -EFAULT : 0;
	preempt_disable();
	mod = hp_module_text_address(addr);
	if ((hp_core_kernel_text(addr) && hp_core_kernel_text(last)) || (mod && mod == hp_module_text_address(last)))
		err = copy_from_kernel_nofault(buf, (void *)addr, len) ? -EFAULT : 0;
	preempt_enable();
	return err;
}

static long hp_info(void __user *arg)
{
	struct hotpath_info info = {
		.abi_version = HOTPATH_ABI_VERSION,
		.read_max = HOTPATH_READ_MAX,
		.heap_max = HOTPATH_HEAP_MAX,
		.heaps_max = HOTPATH_HEAPS_MAX,
		.redirects_max = HOTPATH_REDIRECTS_MAX,
		.calls_max = HOTPATH_CALLS_MAX,
	};

	strscpy(info.release, utsname()->release, sizeof(info.release));
	return copy_to_user(arg, &info, sizeof(info)) ? -EFAULT : 0;
}

static long hp_read(void __user *arg)
{
	struct hotpath_read req;
	void *buf;
	long err;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags)
		return -EINVAL;
	if (req.len > HOTPATH_READ_MAX)
		return -E2BIG;
	if (!req.len)
		return -EINVAL;
	buf = kmalloc(req.len, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	err = hp_text_copy(req.addr, req.len, buf, true);
	if (!err && copy_to_user(u64_to_user_ptr(req.buf), buf, req.len))
		err = -EFAULT;
	kfree(buf);
	return err;
}

static long hp_heap_alloc(void __user *arg)
{
	struct hotpath_heap_alloc req;
	unsigned long size, addr, anchor = (unsigned long)hp_core_kernel_text;
	struct hp_heap *h = NULL;
	unsigned int i;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved || !req.size)
		return -EINVAL;
	if (req.size > HOTPATH_HEAP_MAX)
		return -E2BIG;
	for (i = 0; i < HOTPATH_HEAPS_MAX && !h; i++)
		if (!hp_heaps[i].addr)
			h = &hp_heaps[i];
	if (!h)
		return -ENOSPC;
	size = PAGE_ALIGN(req.size);
	/* Its slot of the area, int3 where nothing is written (hp_init, hp_heap_release). */
	addr = (unsigned long)hotpath_heap_area + (unsigned long)(h - hp_heaps) * HOTPATH_HEAP_MAX;
	/* Every byte within a rel32 of core kernel text (module space is). */
	if (addr + size - anchor > S32_MAX || (addr < anchor && anchor - addr > S32_MAX))
		return -ERANGE;
	req.id = h - hp_heaps;
	req.addr = addr;
	if (copy_to_user(arg, &req, sizeof(req)))
		return -EFAULT;
	h->addr = addr;
	h->size = size;
	h->sealed = false;
	return 0;
}

static struct hp_heap *hp_heap_by_id(u32 id)
{
	return id < HOTPATH_HEAPS_MAX && hp_heaps[id].addr && !hp_heaps[id].draining ? &hp_heaps[id] : NULL;
}

static long hp_heap_write(void __user *arg)
{
	struct hotpath_heap_write req;
	struct hp_heap *h;
	void *buf;
	int err;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || !req.len)
		return -EINVAL;
	h = hp_heap_by_id(req.id);
	if (!h)
		return -ENOENT;
	if (h->sealed)
		return -EPERM;
	if (req.len > h->size)
		return -E2BIG;
	if (req.offset > h->size - req.len)
		return -ERANGE;
	buf = kvmalloc(req.len, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	err = copy_from_user(buf, u64_to_user_ptr(req.buf), req.len) ? -EFAULT : 0;
	/* Module text is read-only: written the way BPF writes its programs' packs.
	 * No CPU runs this heap yet (a redirect or call needs it sealed). */
	if (!err)
		hp_text_poke_copy((void *)(h->addr + req.offset), buf, req.len);
	kvfree(buf);
	return err;
}

/* The heap a HOTPATH_HEAP_SEAL or HOTPATH_HEAP_FREE names, or an error. */
static struct hp_heap *hp_heap_named(void __user *arg)
{
	struct hotpath_heap_id req;
	struct hp_heap *h;

	if (copy_from_user(&req, arg, sizeof(req)))
		return ERR_PTR(-EFAULT);
	if (req.flags)
		return ERR_PTR(-EINVAL);
	h = hp_heap_by_id(req.id);
	return h ? h : ERR_PTR(-ENOENT);
}

static long hp_heap_seal(void __user *arg)
{
	struct hp_heap *h = hp_heap_named(arg);

	if (IS_ERR(h))
		return PTR_ERR(h);
	if (h->sealed)
		return -EPERM;
	/* Every CPU serialised before any can be sent here. */
	hp_text_poke_sync();
	h->sealed = true;
	return 0;
}

/* Every call of a redirected function's entry continues at its target: the
 * ftrace trampoline returns to the instruction pointer set here. */
static void notrace hp_redirect_handler(unsigned long ip, unsigned long parent_ip, struct ftrace_ops *ops,
					struct ftrace_regs *fregs)
{
	struct hp_redirect *r = container_of(ops, struct hp_redirect, ops);

	if (ip == r->entry)
		ftrace_instruction_pointer_set(fregs, r->target);
}

static struct hp_redirect **hp_redirect_slot(unsigned long entry)
{
	unsigned int i;

	for (i = 0; i < HOTPATH_REDIRECTS_MAX; i++)
		if (hp_redirects[i] && hp_redirects[i]->entry == entry)
			return &hp_redirects[i];
	return NULL;
}

static long hp_redirect(void __user *arg)
{
	u8 expect[HOTPATH_EXPECT_MAX], now[HOTPATH_EXPECT_MAX];
	struct hotpath_redirect req;
	struct hp_redirect **slot = NULL, *r;
	unsigned int i;
	int err;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || (req.expect_len && !req.expect))
		return -EINVAL;
	if (req.expect_len > HOTPATH_EXPECT_MAX)
		return -E2BIG;
	/* The entry in kernel text, and exactly an ftrace site (ftrace itself
	 * would take any address inside the 5-byte site, or a function's
	 * start when its site is further in). */
	err = hp_text_copy(req.entry, req.expect_len ? req.expect_len : 1, now, false);
	if (err)
		return err;
	if (hp_ftrace_location(req.entry) != req.entry)
		return -EINVAL;
	err = hp_sealed_target(req.target);
	if (err)
		return err;
	if (hp_redirect_slot(req.entry))
		return -EBUSY;
	for (i = 0; i < HOTPATH_REDIRECTS_MAX && !slot; i++)
		if (!hp_redirects[i])
			slot = &hp_redirects[i];
	if (!slot)
		return -ENOSPC;
	if (req.expect_len) {
		if (copy_from_user(expect, u64_to_user_ptr(req.expect), req.expect_len))
			return -EFAULT;
		if (memcmp(expect, now, req.expect_len))
			return -EBADMSG;
	}
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	/* A module's function: the module stays loaded while it is redirected
	 * (ftrace would otherwise keep the filter for its address, and apply
	 * it to whatever module is loaded there next). */
	err = hp_hold_module(req.entry, &r->mod);
	if (err) {
		kfree(r);
		return err;
	}
	r->entry = req.entry;
	r->target = req.target;
	r->ops.func = hp_redirect_handler;
	/* As livepatch: the handler changes the ip, needs the saved registers,
	 * and ftrace_enabled cannot be switched off under the redirect. */
	r->ops.flags = FTRACE_OPS_FL_SAVE_REGS | FTRACE_OPS_FL_IPMODIFY | FTRACE_OPS_FL_PERMANENT;
	err = ftrace_set_filter_ip(&r->ops, req.entry, 0, 0);
	if (!err) {
		err = register_ftrace_function(&r->ops);
		if (err)
			ftrace_free_filter(&r->ops);
	}
	if (err) {
		module_put(r->mod);
		kfree(r);
		return err;
	}
	*slot = r;
	return 0;
}

static void hp_redirect_remove(struct hp_redirect **slot)
{
	struct hp_redirect *r = *slot;
	int err = unregister_ftrace_function(&r->ops);

	/* ftrace has stopped calling the handler once this returns. */
	WARN_ON_ONCE(err);
	ftrace_free_filter(&r->ops);
	module_put(r->mod);
	kfree(r);
	*slot = NULL;
}

static long hp_undo(void __user *arg)
{
	struct hotpath_undo req;
	struct hp_redirect **slot;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved)
		return -EINVAL;
	slot = hp_redirect_slot(req.entry);
	if (!slot)
		return -ENOENT;
	hp_redirect_remove(slot);
	return 0;
}

/* The 5 bytes at site now, read under text_mutex by the caller. */
static int hp_call_bytes(unsigned long site, u8 *buf)
{
	return copy_from_kernel_nofault(buf, (void *)site, HOTPATH_CALL_LEN) ? -EFAULT : 0;
}

/* Write bytes over the call at site, whose bytes are now, with the kernel's
 * text poking: an int3 first (a CPU reaching the site meanwhile has the call
 * emulated by the kernel's int3 handler), then the displacement, then the
 * opcode, with every CPU synchronised between the steps. Under text_mutex,
 * so ftrace, jump labels, static calls and kprobes do not write at once.
 * -EBADMSG (nothing written) when the bytes are not now. */
static int hp_call_write(unsigned long site, const u8 *now, const u8 *bytes)
{
	u8 cur[HOTPATH_CALL_LEN];
	int err;

	mutex_lock(hp_text_mutex);
	err = hp_call_bytes(site, cur);
	if (!err && memcmp(cur, now, HOTPATH_CALL_LEN))
		err = -EBADMSG;
	if (!err)
		hp_text_poke_bp((void *)site, bytes, HOTPATH_CALL_LEN, NULL);
	mutex_unlock(hp_text_mutex);
	return err;
}

static struct hp_call *hp_call_at(unsigned long site)
{
	unsigned int i;

	for (i = 0; i < HOTPATH_CALLS_MAX; i++)
		if (hp_calls[i].site == site)
			return &hp_calls[i];
	return NULL;
}

static long hp_call_patch(void __user *arg)
{
	struct hotpath_call req;
	u8 now[HOTPATH_CALL_LEN];
	struct hp_call *c = NULL;
	unsigned int i;
	s64 rel;
	s32 rel32;
	int err;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved || req.pad[0] || req.pad[1] || req.pad[2] || req.expect[0] != 0xe8 || !req.site)
		return -EINVAL;
	/* All 5 bytes in the core kernel's text or one module's. */
	err = hp_text_copy(req.site, HOTPATH_CALL_LEN, now, false);
	if (err)
		return err;
	/* Not an ftrace site (those are ftrace's to write: REDIRECT). */
	for (i = 0; i < HOTPATH_CALL_LEN; i++)
		if (hp_ftrace_location(req.site + i))
			return -EINVAL;
	err = hp_sealed_target(req.target);
	if (err)
		return err;
	rel = (s64)(req.target - (req.site + HOTPATH_CALL_LEN));
	if (rel != (s32)rel)
		return -ERANGE;
	/* No byte of it patched already by the opener. */
	for (i = 0; i < HOTPATH_CALLS_MAX; i++) {
		unsigned long s = hp_calls[i].site;

		if (s && s < req.site + HOTPATH_CALL_LEN && req.site < s + HOTPATH_CALL_LEN)
			return -EBUSY;
		if (!s && !c)
			c = &hp_calls[i];
	}
	if (!c)
		return -ENOSPC;
	if (memcmp(now, req.expect, HOTPATH_CALL_LEN))
		return -EBADMSG;
	/* A module's call site: the module stays loaded while it is patched
	 * (the undo writes into its text). */
	err = hp_hold_module(req.site, &c->mod);
	if (err)
		return err;
	memcpy(c->orig, req.expect, HOTPATH_CALL_LEN);
	c->now[0] = 0xe8;
	rel32 = (s32)rel;
	memcpy(c->now + 1, &rel32, 4);
	err = hp_call_write(req.site, c->orig, c->now);
	if (err) {
		module_put(c->mod);
		c->mod = NULL;
		return err;
	}
	c->site = req.site;
	c->target = req.target;
	c->stuck = false;
	return 0;
}

/* Write a patched call site's original bytes back and free its slot. When
 * someone else has rewritten the site meanwhile (a kprobe's int3 on it, a
 * static call update) nothing is written: the site may still reach the heap,
 * so the record stays (stuck) and keeps its heap and module. */
static int hp_call_remove(struct hp_call *c)
{
	int err = hp_call_write(c->site, c->now, c->orig);

	if (err) {
		if (!c->stuck)
			pr_warn("hotpath: the call site at %pS was rewritten by someone else; left as it is, its code heap kept\n",
				(void *)c->site);
		c->stuck = true;
		return err;
	}
	module_put(c->mod);
	memset(c, 0, sizeof(*c));
	return 0;
}

static long hp_call_undo(void __user *arg)
{
	struct hotpath_call_undo req;
	struct hp_call *c;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags || req.reserved || !req.site)
		return -EINVAL;
	c = hp_call_at(req.site);
	if (!c)
		return -ENOENT;
	return hp_call_remove(c);
}

/* A heap's slot made int3 again for the next heap, its names and unwind
 * entries removed first. Only once no task can be inside it (hp_heap_retire). */
static void hp_heap_release(struct hp_heap *h)
{
	hp_unwind_drop(hp_heaps, HOTPATH_HEAPS_MAX, h);
	hp_text_poke_set((void *)h->addr, 0xcc, h->size);
	h->addr = 0;
	h->size = 0;
	h->sealed = false;
	h->draining = false;
}

/* Whether a redirect or a call site (undone or not) points into h. */
static bool hp_heap_referenced(struct hp_heap *h)
{
	unsigned int i;

	for (i = 0; i < HOTPATH_REDIRECTS_MAX; i++)
		if (hp_redirects[i] && hp_heap_of(hp_redirects[i]->target, 1) == h)
			return true;
	for (i = 0; i < HOTPATH_CALLS_MAX; i++)
		if (hp_calls[i].site && hp_heap_of(hp_calls[i].target, 1) == h)
			return true;
	return false;
}

/*
 * Which heaps a task may still be inside. An RCU-tasks grace period after the
 * last redirect and call into a heap was removed is not enough: it takes a
 * voluntary context switch as quiescent, so a task asleep in a copy (or with a
 * return address into one further down its stack) passes it and would wake up
 * to return into int3. So every task's kernel stack is looked at, as
 * livepatch's consistency model looks at it to switch a sleeping task:
 * - a task not on a CPU has its stack walked with stack_trace_save_tsk_reliable
 *   under task_call_func (its pi_lock and, while queued, its runqueue's lock,
 *   so it cannot start running meanwhile); a walk the unwinder does not call
 *   reliable (an address without ORC entry, a stack it cannot finish, more
 *   frames than hp_stack) makes every heap asked about busy; a reliable one
 *   makes busy each heap one of its addresses is inside;
 * - a task on a CPU (on_cpu: from switching in until fully switched out), not
 *   this one, cannot be walked now: it is looked at again from a work on its
 *   CPU (work_on_cpu_safe), which takes that CPU from it, so it is then
 *   usually walkable (a user-space task's stack ends at its user registers).
 *   Still running then (it moved, or more than HP_RUNNING_MAX ran), every
 *   heap asked about counts as busy. Without that second look a machine whose
 *   CPUs are always busy would never see a heap empty.
 * Idle tasks are not in the task list and not looked at: they never sleep, and
 * interrupts taken in the idle loop run on the interrupt stack. A task forked
 * later starts with an empty stack. Under hp_lock (hp_stack, the heaps).
 */
#define HP_RUNNING_MAX 64
static unsigned long hp_stack[100];
static struct task_struct *hp_running[HP_RUNNING_MAX]; /* found running (referenced) */

struct hp_walk {
	u32 ask;           /* heap ids asked about */
	u32 busy;          /* those a task may be inside */
	bool again;        /* the second look at a task found running: running is busy */
	unsigned int nrun; /* in hp_running */
	pid_t pid;         /* the task the log names, and why it made a heap busy */
	char comm[TASK_COMM_LEN];
	const char *why;
	bool inside; /* it has a return address inside a heap */
};

static int hp_task_walk(struct task_struct *t, void *arg)
{
	struct hp_walk *w = arg;
	const char *why = NULL;
	bool inside = false;
	u32 busy = 0;
	unsigned int j;
	int i, n = -1;

	if (t != current && READ_ONCE(t->on_cpu)) {
		if (!w->again && w->nrun < HP_RUNNING_MAX) {
			get_task_struct(t);
			hp_running[w->nrun++] = t;
			return 0;
		}
		busy = w->ask;
		why = "is running on a CPU";
	} else {
		n = hp_stack_save_reliable(t, hp_stack, ARRAY_SIZE(hp_stack));
		if (n < 0) {
			busy = w->ask;
			why = "has a stack the unwinder does not walk reliably";
		}
		for (i = 0; i < n; i++)
			for (j = 0; j < HOTPATH_HEAPS_MAX; j++)
				if ((w->ask & BIT(j)) && hp_stack[i] >= hp_heaps[j].addr &&
				    hp_stack[i] <= hp_heaps[j].addr + hp_heaps[j].size)
					busy |= BIT(j);
		if (busy && n >= 0) {
			why = "has a return address inside it";
			inside = true;
		}
	}
	/* The log names one task: the first one inside, else the first other. */
	if (busy && (!w->why || (inside && !w->inside))) {
		/* Read unlocked (no task_lock under the runqueue's): only for the log. */
		w->pid = task_pid_nr(t);
		strscpy(w->comm, t->comm, sizeof(w->comm));
		w->why = why;
		w->inside = inside;
	}
	w->busy |= busy;
	return 0;
}

struct hp_walk_there {
	struct hp_walk *w;
	struct task_struct *t;
};

static long hp_task_walk_there(void *arg)
{
	struct hp_walk_there *x = arg;

	return hp_task_call_func(x->t, hp_task_walk, x->w);
}

/* Every task looked at (not only until each heap is busy: the log names a
 * task inside one if there is one), those found running a second time. */
static void hp_heaps_busy(struct hp_walk *w)
{
	struct task_struct *g, *t;
	unsigned int i;

	w->again = false;
	w->nrun = 0;
	rcu_read_lock();
	for_each_process_thread(g, t)
		hp_task_call_func(t, hp_task_walk, w);
	rcu_read_unlock();
	w->again = true;
	for (i = 0; i < w->nrun; i++) {
		struct hp_walk_there x = { .w = w, .t = hp_running[i] };

		if (work_on_cpu_safe(task_cpu(x.t), hp_task_walk_there, &x) < 0)
			hp_task_call_func(x.t, hp_task_walk, w); /* its CPU went offline: looked at here */
		put_task_struct(x.t);
	}
}

/* Heaps their opener freed that a task may still be inside: their slots,
 * names and unwind entries stay (a sleeper's stack walks reliably only with
 * them, so the drain can see it leave), hp_drain_work re-checks them every
 * second, and the module holds a reference on itself while any drains, so
 * rmmod is refused rather than freeing text a task will return into.
 * /sys/module/hotpath/parameters/draining counts them. */
static unsigned int hp_draining;
module_param_named(draining, hp_draining, uint, 0444);
MODULE_PARM_DESC(draining, "code heaps freed by their opener that a task may still be inside (read-only)");

static void hp_drain(struct work_struct *work);
static DECLARE_DELAYED_WORK(hp_drain_work, hp_drain);

static void hp_drain_end(struct hp_heap *h)
{
	pr_info("hotpath: heap %u drained: no task is inside it any more, its slot released\n",
		(unsigned int)(h - hp_heaps));
	hp_heap_release(h);
	if (!--hp_draining)
		module_put(THIS_MODULE);
}

static void hp_drain(struct work_struct *work)
{
	struct hp_walk w = {};
	unsigned int i;

	mutex_lock(&hp_lock);
	for (i = 0; i < HOTPATH_HEAPS_MAX; i++)
		if (hp_heaps[i].draining)
			w.ask |= BIT(i);
	if (w.ask)
		hp_heaps_busy(&w);
	for (i = 0; i < HOTPATH_HEAPS_MAX; i++)
		if ((w.ask & ~w.busy) & BIT(i))
			hp_drain_end(&hp_heaps[i]);
	if (hp_draining)
		schedule_delayed_work(&hp_drain_work, HZ);
	mutex_unlock(&hp_lock);
}

/* Free the heaps in ask (their opener is done with them: no redirect or call
 * site points into them) after one RCU-tasks grace period: each released now
 * if no task is inside it, or left draining. */
static void hp_heaps_retire(u32 ask)
{
	struct hp_walk w = { .ask = ask };
	unsigned int i;

	if (!ask)
		return;
	synchronize_rcu_tasks();
	hp_heaps_busy(&w);
	for (i = 0; i < HOTPATH_HEAPS_MAX; i++) {
		struct hp_heap *h = &hp_heaps[i];

		if (!(ask & BIT(i)))
			continue;
		if (!(w.busy & BIT(i))) {
			hp_heap_release(h);
			continue;
		}
		pr_info("hotpath: heap %u drains: %s:%d %s; released once no task is inside it\n", i, w.comm, w.pid,
			w.why);
		h->draining = true;
		if (!hp_draining++)
			__module_get(THIS_MODULE);
	}
	if (hp_draining)
		schedule_delayed_work(&hp_drain_work, HZ);
}

static long hp_heap_free(void __user *arg)
{
	struct hp_heap *h = hp_heap_named(arg);

	if (IS_ERR(h))
		return PTR_ERR(h);
	if (hp_heap_referenced(h))
		return -EBUSY;
	hp_heaps_retire(BIT(h - hp_heaps));
	return 0;
}

/* Everything the opener left, in the safe order: call sites (so nothing
 * calls the copies directly any more), then redirects, then heaps. A heap a
 * stuck call site may still reach is never freed (nor forgotten: its slot
 * stays taken until rmmod, which leaves it allocated). */
static void hp_undo_all(void)
{
	u32 ask = 0;
	unsigned int i;

	for (i = 0; i < HOTPATH_CALLS_MAX; i++)
		if (hp_calls[i].site)
			hp_call_remove(&hp_calls[i]);
	for (i = 0; i < HOTPATH_REDIRECTS_MAX; i++)
		if (hp_redirects[i])
			hp_redirect_remove(&hp_redirects[i]);
	for (i = 0; i < HOTPATH_HEAPS_MAX; i++)
		if (hp_heaps[i].addr && !hp_heaps[i].draining && !hp_heap_referenced(&hp_heaps[i]))
			ask |= BIT(i);
	hp_heaps_retire(ask);
}

static int hp_open(struct inode *inode, struct file *file)
{
	int err = 0;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	mutex_lock(&hp_lock);
	if (hp_open_now)
		err = -EBUSY;
	else
		hp_open_now = true;
	mutex_unlock(&hp_lock);
	return err;
}

static int hp_release(struct inode *inode, struct file *file)
{
	mutex_lock(&hp_lock);
	hp_undo_all();
	hp_open_now = false;
	mutex_unlock(&hp_lock);
	return 0;
}

static long hp_heap_unwind(void __user *arg)
{
	struct hotpath_heap_unwind req;
	struct hp_heap *h;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (req.flags)
		return -EINVAL;
	h = hp_heap_by_id(req.id);
	if (!h)
		return -ENOENT;
	/* The map is read from the heap as sealed: the bytes the plan's approval covers. */
	if (!h->sealed)
		return -EPERM;
	if (h->uw)
		return -EEXIST;
	if (!req.len || req.len > HOTPATH_MAP_MAX || req.offset > h->size || req.len > h->size - req.offset)
		return -ERANGE;
	return hp_unwind_set(hp_heaps, HOTPATH_HEAPS_MAX, h, req.offset, req.len);
}

static long hp_heap_unwind_drop(void __user *arg)
{
	struct hp_heap *h = hp_heap_named(arg);

	if (IS_ERR(h))
		return PTR_ERR(h);
	if (!h->uw)
		return -ENOENT;
	hp_unwind_drop(hp_heaps, HOTPATH_HEAPS_MAX, h);
	return 0;
}

static const struct {
	unsigned int cmd;
	long (*fn)(void __user *arg);
} hp_requests[] = {
	{ HOTPATH_INFO, hp_info },
	{ HOTPATH_READ, hp_read },
	{ HOTPATH_HEAP_ALLOC, hp_heap_alloc },
	{ HOTPATH_HEAP_WRITE, hp_heap_write },
	{ HOTPATH_HEAP_SEAL, hp_heap_seal },
	{ HOTPATH_REDIRECT, hp_redirect },
	{ HOTPATH_UNDO, hp_undo },
	{ HOTPATH_HEAP_FREE, hp_heap_free },
	{ HOTPATH_CALL_PATCH, hp_call_patch },
	{ HOTPATH_CALL_UNDO, hp_call_undo },
	{ HOTPATH_HEAP_UNWIND, hp_heap_unwind },
	{ HOTPATH_HEAP_UNWIND_DROP, hp_heap_unwind_drop },
};

static long hp_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	long err = -ENOTTY;
	unsigned int i;

	mutex_lock(&hp_lock);
	for (i = 0; i < ARRAY_SIZE(hp_requests); i++)
		if (hp_requests[i].cmd == cmd)
			err = hp_requests[i].fn((void __user *)arg);
	mutex_unlock(&hp_lock);
	return err;
}

static const struct file_operations hp_fops = {
	.owner = THIS_MODULE,
	.open = hp_open,
	.release = hp_release,
	.unlocked_ioctl = hp_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice hp_dev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "hotpath",
	.fops = &hp_fops,
	.mode = 0600,
};

static int __init hp_init(void)
{
	static const char *const names[] = { "core_kernel_text", "__module_text_address", "ftrace_location",
					     "text_poke_bp", "kallsyms_lookup_name" };
	unsigned long addr[ARRAY_SIZE(names)];
	unsigned int i;
	int err;

	for (i = 0; i < ARRAY_SIZE(names); i++) {
		addr[i] = hp_lookup(names[i]);
		if (!addr[i]) {
			pr_err("hotpath: cannot find %s (register_kprobe refused it)\n", names[i]);
			return -ENOENT;
		}
	}
	hp_core_kernel_text = (void *)addr[0];
	hp_module_text_address = (void *)addr[1];
	hp_ftrace_location = (void *)addr[2];
	hp_text_poke_bp = (void *)addr[3];
	hp_lookup_name = (void *)addr[4];
	/* text_mutex is data, where no kprobe goes, and the text pokers are
	 * found by kallsyms too (no kprobe on code that writes text). */
	hp_text_mutex = (struct mutex *)hp_lookup_name("text_mutex");
	hp_text_poke_copy = (void *)hp_lookup_name("text_poke_copy");
	hp_text_poke_set = (void *)hp_lookup_name("text_poke_set");
	hp_text_poke_sync = (void *)hp_lookup_name("text_poke_sync");
	/* A heap's drain walks tasks' stacks as livepatch does (hp_heaps_busy). */
	hp_task_call_func = (void *)hp_lookup_name("task_call_func");
	hp_stack_save_reliable = (void *)hp_lookup_name("stack_trace_save_tsk_reliable");
	if (!hp_text_mutex || !hp_text_poke_copy || !hp_text_poke_set || !hp_text_poke_sync || !hp_task_call_func ||
	    !hp_stack_save_reliable) {
		pr_err("hotpath: cannot find text_mutex, text_poke_copy, text_poke_set, text_poke_sync, task_call_func or stack_trace_save_tsk_reliable (kallsyms_lookup_name)\n");
		return -ENOENT;
	}
	if (hotpath_heap_area_bytes != (u64)HOTPATH_HEAPS_MAX * HOTPATH_HEAP_MAX || !PAGE_ALIGNED(hotpath_heap_area)) {
		pr_err("hotpath: the heaps' area is not HOTPATH_HEAPS_MAX x HOTPATH_HEAP_MAX page-aligned bytes\n");
		return -EINVAL;
	}
	hp_text_poke_set(hotpath_heap_area, 0xcc, hotpath_heap_area_bytes);
	err = hp_unwind_init();
	if (err)
		return err;
	err = misc_register(&hp_dev);
	if (err)
		hp_unwind_exit();
	return err;
}

static void __exit hp_exit(void)
{
	misc_deregister(&hp_dev);
	/* No heap drains (each holds the module), so the work is not queued;
	 * cancelled anyway, and waited for if it is just ending (its last
	 * module_put let this rmmod start). */
	cancel_delayed_work_sync(&hp_drain_work);
	/* Nothing is left: the device cannot be open during rmmod, and closing
	 * it undid everything. Kept for the order's sake. */
	mutex_lock(&hp_lock);
	hp_undo_all();
	mutex_unlock(&hp_lock);
	hp_unwind_exit();
}

module_init(hp_init);
module_exit(hp_exit);
MODULE_LICENSE("GPL");
/* modinfo's version: the ABI version, which is also its DKMS package's (deploy/dkms). */
MODULE_VERSION(__stringify(HOTPATH_ABI_VERSION));
MODULE_DESCRIPTION(
	"Hotpath: kernel code heaps, entry redirection through ftrace and call-site patching for the agent's kernel target");
