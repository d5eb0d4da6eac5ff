// SPDX-License-Identifier: GPL-2.0
/*
 * hotpath_lane: the kernel lane's test module. It gives the lane loaded
 * module code whose behaviour is known exactly, so measurements on it can be
 * checked against a number rather than a guess.
 *
 * /proc/hotpath_lane
 *   read()   returns one byte and runs lane_step(n) with n = the number of
 *            reads made before on the same open file: every fourth call
 *            (n % 4 == 0) takes lane_step's first branch, the others the
 *            second, so N reads on one open split ceil(N/4) : N - ceil(N/4).
 *   write()  "nap MS": lane_nap() sleeps MS milliseconds in the calling
 *            thread (1..1000), so a wall timer on lane_nap sees the sleep and
 *            a virtualized timer does not.
 *            "mix N": lane_mix(N), a function with a few branches for the
 *            kernel target's proofs: its result goes to the module parameter
 *            mix_result, and where lane_mix ran (the return address of its
 *            call of lane_here, inside lane_mix or inside a copy of it) to
 *            mix_where, both under /sys/module/hotpath_lane/parameters/.
 *            "keyed N": lane_keyed(N), a function with two jump labels
 *            (static keys) whose result depends on both keys: its result
 *            to keyed_result, where it ran to keyed_where (as for mix).
 *            "keys A B": lane_key_a on when A is 1, off when 0 (a false key
 *            tested with static_branch_unlikely: its entry's branch bit 0),
 *            lane_key_b likewise (a true key tested with
 *            static_branch_likely: branch bit 1); the kernel patches every
 *            site of each key it flips, here and in nothing else.
 *            "scall N": lane_scall(N), a function with a static call site
 *            and a static tail-call site of the static call lane_sc: its
 *            result to scall_result, where it ran to scall_where.
 *            "sctarget K": static_call_update of lane_sc to lane_sc_one
 *            (K = 0, its initial target), lane_sc_two (1) or the kernel's
 *            __static_call_return0 (2); the kernel rewrites lane_sc's
 *            trampoline and both sites (a call, a jump, or for 2 the
 *            site's "xor eax, eax").
 *            "mixhold N": lane_mix(N) as "mix N", but its call of lane_here
 *            puts the writing task to sleep (lane_hold_wait: a killable
 *            wait, which the hung-task watchdog and livepatch's fake
 *            signals leave asleep) until "release": a task asleep inside
 *            lane_mix, or inside a copy of it, for as long as a test wants.
 *            held counts the tasks asleep there. "release" wakes them all.
 *            Any other task's call of lane_mix runs through as before.
 *            "kprobe MOD:SYM": a kprobe (register_kprobe, the kernel's own
 *            API, as a module uses it) on MOD:SYM, e.g. hotpath:lane_mix, a
 *            copy in hotpath.ko's heap; its hits go to kprobe_hits, and the
 *            first hit saves its stack trace (stack_trace_save: the ORC
 *            unwinder from inside the probe). "kprobe off" removes it and
 *            prints that trace to the kernel log, a line per frame:
 *            "hotpath_lane: kstack lane_mix+0x0/0x50 [hotpath]".
 *
 * Both paths call into vmlinux (ktime_get_ns, msleep), so the module's
 * functions have callees outside the module.
 */
#include <linux/delay.h>
#include <linux/kprobes.h>
#include <linux/stacktrace.h>
#include <linux/fs.h>
#include <linux/jump_label.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/static_call.h>
#include <linux/timekeeping.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

static u64 lane_quarter_calls, lane_other_calls, lane_stamp;

/* The function with the known branch split. */
static noinline u64 lane_step(u64 n)
{
	if (n % 4 == 0) {
		WRITE_ONCE(lane_quarter_calls, lane_quarter_calls + 1);
		WRITE_ONCE(lane_stamp, ktime_get_ns());
		return 1;
	}
	WRITE_ONCE(lane_other_calls, lane_other_calls + 1);
	return 0;
}

static unsigned long lane_mix_result, lane_mix_where, lane_mix_salt = 0x5bd1e995;
module_param_named(mix_result, lane_mix_result, ulong, 0400);
module_param_named(mix_where, lane_mix_where, ulong, 0400);

/* "mixhold N": the task lane_here holds, the tasks held, the releases made. */
static struct task_struct *lane_holder;
static unsigned long lane_held, lane_releases;
module_param_named(held, lane_held, ulong, 0400);
static DECLARE_WAIT_QUEUE_HEAD(lane_hold_wq);
static DEFINE_SPINLOCK(lane_hold_lock);

/* Sleep until the next "release"; a fatal signal ends it early. */
static noinline void lane_hold_wait(void)
{
	unsigned long seen;

	spin_lock(&lane_hold_lock);
	seen = lane_releases;
	lane_held++;
	spin_unlock(&lane_hold_lock);
	wait_event_killable(lane_hold_wq, READ_ONCE(lane_releases) != seen);
	spin_lock(&lane_hold_lock);
	lane_held--;
	spin_unlock(&lane_hold_lock);
}

static void lane_release(void)
{
	spin_lock(&lane_hold_lock);
	lane_releases++;
	spin_unlock(&lane_hold_lock);
	wake_up_all(&lane_hold_wq);
}

/* Where its caller runs: the original lane_mix, or a copy of it. The task
 * "mixhold" named sleeps here, with its caller's frame on its stack. */
static noinline void lane_here(void)
{
	WRITE_ONCE(lane_mix_where, (unsigned long)__builtin_return_address(0));
	if (unlikely(READ_ONCE(lane_holder) == current))
		lane_hold_wait();
}

/* A few branches on n, a result that depends on which ran. */
static noinline u64 lane_mix(u64 n)
{
	u64 r = n * 2654435761u;

	lane_here();
	if (n & 1)
		r ^= r >> 7;
	else
		r += 0x9e37;
	if (n % 3 == 0)
		r = ~r;
	else if (n % 5 == 0)
		r -= n << 3;
	else
		r = r * 31 + READ_ONCE(lane_mix_salt); /* a RIP-relative load the copy must keep reaching */
	return r & 0xffffffff;
}

static unsigned long lane_keyed_result, lane_keyed_where, lane_keyed_mid;
module_param_named(keyed_result, lane_keyed_result, ulong, 0400);
module_param_named(keyed_where, lane_keyed_where, ulong, 0400);
static DEFINE_STATIC_KEY_FALSE(lane_key_a);
static DEFINE_STATIC_KEY_TRUE(lane_key_b);

/* Where lane_keyed runs (its call's return address), as lane_here. */
static noinline void lane_keyed_here(void)
{
	WRITE_ONCE(lane_keyed_where, (unsigned long)__builtin_return_address(0));
}

/* Two jump labels, a result that depends on which way each goes: a copy
 * that froze a site would give another result once its key flips. */
static noinline u64 lane_keyed(u64 n)
{
	u64 r = n * 2246822519u;

	lane_keyed_here();
	if (static_branch_unlikely(&lane_key_a))
		r = (r ^ (r >> 13)) + 0x51ed27;
	else
		r += n << 5;
	WRITE_ONCE(lane_keyed_mid, r); /* an instruction before the second site in its block */
	if (static_branch_likely(&lane_key_b))
		r ^= 0xa5a5a5;
	else
		r = r * 7 + n;
	return r & 0xffffffff;
}

static unsigned long lane_scall_result, lane_scall_where;
module_param_named(scall_result, lane_scall_result, ulong, 0400);
module_param_named(scall_where, lane_scall_where, ulong, 0400);

/* The static call's targets: each gives other results. */
static noinline u64 lane_sc_one(u64 n)
{
	return (n * 3 + 1) & 0xffffffff;
}

static noinline u64 lane_sc_two(u64 n)
{
	return ((n ^ 0x5a5a5a) + 7) & 0xffffffff;
}

DEFINE_STATIC_CALL(lane_sc, lane_sc_one);

/* Where lane_scall runs (its call's return address), as lane_here. */
static noinline void lane_scall_here(void)
{
	WRITE_ONCE(lane_scall_where, (unsigned long)__builtin_return_address(0));
}

/* A static call site and a static tail-call site: a copy that kept either
 * calling the target it had when copied would give that target's results
 * once the call is updated. */
static noinline u64 lane_scall(u64 n)
{
	u64 r;

	lane_scall_here();
	r = static_call(lane_sc)(n);
	if (n & 1)
		return static_call(lane_sc)(r + n); /* a tail call: a jump to the trampoline */
	return (r * 5 + n) & 0xffffffff;
}

/* The function whose caller sleeps inside it. */
static noinline void lane_nap(unsigned int ms)
{
	msleep(ms);
}

/* "kprobe MOD:SYM" / "kprobe off": one probe at a time, under lane_probe_lock. */
static DEFINE_MUTEX(lane_probe_lock);
static struct kprobe lane_probe;
static char lane_probe_name[64];
static bool lane_probe_on;
static unsigned long lane_kprobe_hits;
module_param_named(kprobe_hits, lane_kprobe_hits, ulong, 0400);
static unsigned long lane_stack[32];
static unsigned int lane_stack_n;
static atomic_t lane_stack_taken;

static int lane_probe_hit(struct kprobe *p, struct pt_regs *regs)
{
	WRITE_ONCE(lane_kprobe_hits, lane_kprobe_hits + 1);
	if (atomic_cmpxchg(&lane_stack_taken, 0, 1) == 0)
		lane_stack_n = stack_trace_save(lane_stack, ARRAY_SIZE(lane_stack), 0);
	return 0;
}

static int lane_kprobe(const char *what)
{
	int err = 0;
	unsigned int i;

	mutex_lock(&lane_probe_lock);
	if (!strcmp(what, "off")) {
		if (lane_probe_on) {
			unregister_kprobe(&lane_probe);
			lane_probe_on = false;
			for (i = 0; i < lane_stack_n && atomic_read(&lane_stack_taken); i++)
				pr_info("hotpath_lane: kstack %pS\n", (void *)lane_stack[i]);
			pr_info("hotpath_lane: kstack end (%u frames, %lu hits)\n", lane_stack_n, lane_kprobe_hits);
		} else {
			err = -ENOENT;
		}
	} else if (lane_probe_on) {
		err = -EBUSY;
	} else {
		strscpy(lane_probe_name, what, sizeof(lane_probe_name));
		memset(&lane_probe, 0, sizeof(lane_probe));
		lane_probe.symbol_name = lane_probe_name;
		lane_probe.pre_handler = lane_probe_hit;
		WRITE_ONCE(lane_kprobe_hits, 0);
		lane_stack_n = 0;
		atomic_set(&lane_stack_taken, 0);
		err = register_kprobe(&lane_probe);
		lane_probe_on = !err;
	}
	mutex_unlock(&lane_probe_lock);
	return err;
}

static int lane_open(struct inode *inode, struct file *file)
{
	file->private_data = (void *)0UL; /* reads made on this open file */
	return 0;
}

static ssize_t lane_read(struct file *file, char __user *buf, size_t len, loff_t *pos)
{
	unsigned long n = (unsigned long)file->private_data;
	char c = lane_step(n) ? 'q' : 'o';

	file->private_data = (void *)(n + 1);
	if (!len)
		return 0;
	if (put_user(c, buf))
		return -EFAULT;
	return 1;
}

static ssize_t lane_write(struct file *file, const char __user *buf, size_t len, loff_t *pos)
{
	char cmd[80], probe[64];
	unsigned int ms, a, b;
	unsigned long long n;

	if (len >= sizeof(cmd))
		return -EINVAL;
	if (copy_from_user(cmd, buf, len))
		return -EFAULT;
	cmd[len] = '\0';
	if (sscanf(cmd, "mixhold %llu", &n) == 1) {
		WRITE_ONCE(lane_holder, current);
		WRITE_ONCE(lane_mix_result, lane_mix(n));
		WRITE_ONCE(lane_holder, NULL);
		return len;
	}
	if (!strcmp(cmd, "release") || !strcmp(cmd, "release\n")) {
		lane_release();
		return len;
	}
	if (sscanf(cmd, "mix %llu", &n) == 1) {
		WRITE_ONCE(lane_mix_result, lane_mix(n));
		return len;
	}
	if (sscanf(cmd, "keyed %llu", &n) == 1) {
		WRITE_ONCE(lane_keyed_result, lane_keyed(n));
		return len;
	}
	if (sscanf(cmd, "keys %u %u", &a, &b) == 2 && a <= 1 && b <= 1) {
		if (a)
			static_branch_enable(&lane_key_a);
		else
			static_branch_disable(&lane_key_a);
		if (b)
			static_branch_enable(&lane_key_b);
		else
			static_branch_disable(&lane_key_b);
		return len;
	}
	if (sscanf(cmd, "scall %llu", &n) == 1) {
		WRITE_ONCE(lane_scall_result, lane_scall(n));
		return len;
	}
	if (sscanf(cmd, "sctarget %u", &a) == 1 && a <= 2) {
		if (a == 0)
			static_call_update(lane_sc, &lane_sc_one);
		else if (a == 1)
			static_call_update(lane_sc, &lane_sc_two);
		else
			static_call_update(lane_sc, (void *)&__static_call_return0);
		return len;
	}
	if (sscanf(cmd, "kprobe %63s", probe) == 1) {
		int err = lane_kprobe(probe);

		return err ? err : len;
	}
	if (sscanf(cmd, "nap %u", &ms) != 1 || ms < 1 || ms > 1000)
		return -EINVAL;
	lane_nap(ms);
	return len;
}

static const struct proc_ops lane_ops = {
	.proc_open = lane_open,
	.proc_read = lane_read,
	.proc_write = lane_write,
	.proc_lseek = noop_llseek,
};

static struct proc_dir_entry *lane_entry;

static int __init lane_init(void)
{
	lane_entry = proc_create("hotpath_lane", 0600, NULL, &lane_ops);
	return lane_entry ? 0 : -ENOMEM;
}

static void __exit lane_exit(void)
{
	/* proc_remove stays last (a tail call, as before the probe): the lane compares this function's bytes
	 * as the agent reads them with the .ko's, and a final return is padded by the kernel's return thunk
	 * patching. */
	if (lane_probe_on)
		unregister_kprobe(&lane_probe);
	proc_remove(lane_entry);
}

module_init(lane_init);
module_exit(lane_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Hotpath kernel lane: module code with known call counts and branch split");
