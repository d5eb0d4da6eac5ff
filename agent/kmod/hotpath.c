// SPDX-License-Identifier: GPL-2.0
/*
 * hotpath.ko, first slice: the kernel side of Hotpath's target interface
 * (agent/src/replace/patch_target.h) behind a root-only misc device,
 * /dev/hotpath, one opener at a time. Its requests (hotpath_uapi.h, README.md):
 *
 *   INFO        ABI version, limits, kernel release
 *   READ        bytes of kernel text (core kernel, one module, or an own heap)
 *   HEAP_ALLOC  a code heap in module space, within rel32 reach of kernel text
 *   HEAP_WRITE  bytes into a heap that is not sealed yet
 *   HEAP_SEAL   the heap read-only and executable; no write after this
 *   REDIRECT    calls of a traceable function go to a sealed heap of the
 *               opener, through an ftrace_ops with IPMODIFY (livepatch's way)
 *   UNDO        one redirect removed
 *   HEAP_FREE   a heap no redirect points into, freed after an RCU-tasks
 *               grace period
 *
 * Closing the device undoes everything the opener did, redirects first, then
 * heaps (and rmmod cannot happen while it is open). Call-site patching is a
 * later slice.
 *
 * module_alloc, set_memory_ro/x, core_kernel_text, __module_text_address and
 * ftrace_location are not exported by 6.1: their addresses come from register_kprobe on
 * their names at load time (docs/decisions.md).
 */
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/ftrace.h>
#include <linux/kprobes.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/utsname.h>
#include <linux/vmalloc.h>

#include "hotpath_uapi.h"

struct hp_heap {
	unsigned long addr; /* 0: slot free */
	unsigned long size; /* bytes, whole pages */
	bool sealed;
};

struct hp_redirect {
	struct ftrace_ops ops; /* first: the handler finds the redirect from it */
	unsigned long entry;
	unsigned long target;
	struct module *mod; /* the entry's module, pinned while redirected; NULL: vmlinux */
};

/* The one opener's state, under hp_lock. */
static DEFINE_MUTEX(hp_lock);
static bool hp_open_now;
static struct hp_heap hp_heaps[HOTPATH_HEAPS_MAX];
static struct hp_redirect *hp_redirects[HOTPATH_REDIRECTS_MAX];

/* The kernel's own functions this module needs but 6.1 does not export. */
static void *(*hp_module_alloc)(unsigned long size);
static int (*hp_set_memory_ro)(unsigned long addr, int numpages);
static int (*hp_set_memory_x)(unsigned long addr, int numpages);
static int (*hp_core_kernel_text)(unsigned long addr);
static struct module *(*hp_module_text_address)(unsigned long addr);
static unsigned long (*hp_ftrace_location)(unsigned long ip);

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

		if (h->addr && addr >= h->addr && len <= h->size && addr - h->addr <= h->size - len)
			return h;
	}
	return NULL;
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
	unsigned long size, addr, anchor = (unsigned long)hp_module_alloc;
	struct hp_heap *h = NULL;
	unsigned int i;
	void *p;

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
	p = hp_module_alloc(size);
	if (!p)
		return -ENOMEM;
	addr = (unsigned long)p;
	/* Module space, and every byte within a rel32 of core kernel text. */
	if (addr < MODULES_VADDR || addr + size > MODULES_END || addr + size - anchor > S32_MAX ||
	    (addr < anchor && anchor - addr > S32_MAX)) {
		vfree(p);
		return -ERANGE;
	}
	memset(p, 0xcc, size); /* int3 where nothing is written */
	req.id = h - hp_heaps;
	req.addr = addr;
	if (copy_to_user(arg, &req, sizeof(req))) {
		vfree(p);
		return -EFAULT;
	}
	h->addr = addr;
	h->size = size;
	h->sealed = false;
	return 0;
}

static struct hp_heap *hp_heap_by_id(u32 id)
{
	return id < HOTPATH_HEAPS_MAX && hp_heaps[id].addr ? &hp_heaps[id] : NULL;
}

static long hp_heap_write(void __user *arg)
{
	struct hotpath_heap_write req;
	struct hp_heap *h;

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
	return copy_from_user((void *)(h->addr + req.offset), u64_to_user_ptr(req.buf), req.len) ? -EFAULT : 0;
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
	int err;

	if (IS_ERR(h))
		return PTR_ERR(h);
	if (h->sealed)
		return -EPERM;
	err = hp_set_memory_ro(h->addr, h->size >> PAGE_SHIFT);
	if (!err)
		err = hp_set_memory_x(h->addr, h->size >> PAGE_SHIFT);
	if (err)
		return err;
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
	struct hp_heap *h;
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
	h = hp_heap_of(req.target, 1);
	if (!h)
		return -ERANGE;
	if (!h->sealed)
		return -EPERM;
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
	preempt_disable();
	r->mod = hp_module_text_address(req.entry);
	if (r->mod && !try_module_get(r->mod))
		err = -ENOENT;
	preempt_enable();
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

/* Heaps are freed once no task can be inside them: after an RCU-tasks grace
 * period every task has passed a voluntary context switch since the last
 * redirect into them was removed (the rule of kprobes' and ftrace's own
 * trampolines). vfree is module_memfree here; module_alloc's
 * VM_FLUSH_RESET_PERMS makes it restore the pages' permissions. */
static void hp_heap_release(struct hp_heap *h)
{
	vfree((void *)h->addr);
	h->addr = 0;
	h->size = 0;
	h->sealed = false;
}

static long hp_heap_free(void __user *arg)
{
	struct hp_heap *h = hp_heap_named(arg);
	unsigned int i;

	if (IS_ERR(h))
		return PTR_ERR(h);
	for (i = 0; i < HOTPATH_REDIRECTS_MAX; i++)
		if (hp_redirects[i] && hp_heap_of(hp_redirects[i]->target, 1) == h)
			return -EBUSY;
	synchronize_rcu_tasks();
	hp_heap_release(h);
	return 0;
}

/* Everything the opener left, in the safe order: redirects, then heaps. */
static void hp_undo_all(void)
{
	bool heaps = false;
	unsigned int i;

	for (i = 0; i < HOTPATH_REDIRECTS_MAX; i++)
		if (hp_redirects[i])
			hp_redirect_remove(&hp_redirects[i]);
	for (i = 0; i < HOTPATH_HEAPS_MAX; i++)
		heaps |= hp_heaps[i].addr != 0;
	if (!heaps)
		return;
	synchronize_rcu_tasks();
	for (i = 0; i < HOTPATH_HEAPS_MAX; i++)
		if (hp_heaps[i].addr)
			hp_heap_release(&hp_heaps[i]);
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
	static const char *const names[] = { "module_alloc",     "set_memory_ro",         "set_memory_x",
					     "core_kernel_text", "__module_text_address", "ftrace_location" };
	unsigned long addr[ARRAY_SIZE(names)];
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(names); i++) {
		addr[i] = hp_lookup(names[i]);
		if (!addr[i]) {
			pr_err("hotpath: cannot find %s (register_kprobe refused it)\n", names[i]);
			return -ENOENT;
		}
	}
	hp_module_alloc = (void *)addr[0];
	hp_set_memory_ro = (void *)addr[1];
	hp_set_memory_x = (void *)addr[2];
	hp_core_kernel_text = (void *)addr[3];
	hp_module_text_address = (void *)addr[4];
	hp_ftrace_location = (void *)addr[5];
	return misc_register(&hp_dev);
}

static void __exit hp_exit(void)
{
	misc_deregister(&hp_dev);
	/* Nothing is left: the device cannot be open during rmmod, and closing
	 * it undid everything. Kept for the order's sake. */
	mutex_lock(&hp_lock);
	hp_undo_all();
	mutex_unlock(&hp_lock);
}

module_init(hp_init);
module_exit(hp_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Hotpath: kernel code heaps and entry redirection through ftrace for the agent's kernel target");
