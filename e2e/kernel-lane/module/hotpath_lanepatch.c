// SPDX-License-Identifier: GPL-2.0
/*
 * hotpath_lanepatch: the kernel lane's livepatch. Loading it asks the
 * kernel's livepatch core to replace cmdline_proc_show (what a read of
 * /proc/cmdline runs) with lanepatch_cmdline_show, which prints a line of its
 * own, so the lane can see that the patch took. The patch switches each task
 * only once that task's stack walks reliably (the ORC unwinder, from its saved
 * registers to its user-mode entry frame) and holds no address inside the
 * replaced function: /sys/kernel/livepatch/hotpath_lanepatch/transition reads
 * 1 until every task has switched, 0 after. The lane
 * (guest/klivepatch.sh) loads it while a task sleeps inside a kernel copy that
 * hotpath.ko installed, so the transition ends only if the stack walk through
 * the copy is reliable. Writing 0 to .../enabled reverts the patch (another
 * transition), after which the module can be unloaded.
 *
 * The replaced function is on no task's stack in the lane (nothing reads
 * /proc/cmdline meanwhile) and is not the copied one: livepatch checks a stack
 * against the patched function's own address range, which a copy elsewhere in
 * module text is not in (docs/decisions.md, "Livepatch's reliable-stack check
 * through a kernel copy").
 */
#include <linux/livepatch.h>
#include <linux/module.h>
#include <linux/seq_file.h>

static int lanepatch_cmdline_show(struct seq_file *m, void *v)
{
	seq_puts(m, "hotpath_lanepatch: /proc/cmdline as the lane's livepatch prints it\n");
	return 0;
}

static struct klp_func lanepatch_funcs[] = {
	{ .old_name = "cmdline_proc_show", .new_func = lanepatch_cmdline_show },
	{}
};

/* A NULL name: the functions are vmlinux's. */
static struct klp_object lanepatch_objects[] = {
	{ .funcs = lanepatch_funcs },
	{}
};

static struct klp_patch lanepatch = {
	.mod = THIS_MODULE,
	.objs = lanepatch_objects,
};

static int __init lanepatch_init(void)
{
	return klp_enable_patch(&lanepatch);
}

static void __exit lanepatch_exit(void)
{
}

module_init(lanepatch_init);
module_exit(lanepatch_exit);
MODULE_LICENSE("GPL");
MODULE_INFO(livepatch, "Y");
MODULE_DESCRIPTION("Hotpath kernel lane: a livepatch of cmdline_proc_show, loaded while a task sleeps in a kernel copy");
