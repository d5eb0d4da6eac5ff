// SPDX-License-Identifier: Apache-2.0
/*
 * x86-64 injection (inject.h). The trampolines are assembled here as data
 * (they never run in the agent) and copied into the target's scratch
 * bytes with their argument slots filled. Both step over the interrupted
 * code's red zone, save every register they or the call clobber (flags,
 * rax, rcx, rdx, rsi, rdi, r8-r11; a function call also saves the extended
 * state with xsave64 into the call area), and end with an indirect jump to
 * the thread's own program counter, kept in the last slot.
 */
#include <cpuid.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"
#include "replace/inject.h"

/* Offsets are taken from the labels; slots are 8-byte words after the code. */
__asm__(".pushsection .rodata.hp_tramp, \"a\"\n"
	".balign 16\n"
	"hp_tramp_start:\n"
	/* A system call: nr and six arguments from the slots. */
	"hp_tramp_sys:\n"
	"  lea -128(%rsp), %rsp\n"
	"  pushfq\n"
	"  push %rax\n  push %rcx\n  push %rdx\n  push %rsi\n  push %rdi\n"
	"  push %r8\n  push %r9\n  push %r10\n  push %r11\n"
	"  mov hp_slot_nr(%rip), %rax\n"
	"  mov hp_slot_a1(%rip), %rdi\n"
	"  mov hp_slot_a2(%rip), %rsi\n"
	"  mov hp_slot_a3(%rip), %rdx\n"
	"  mov hp_slot_a4(%rip), %r10\n"
	"  mov hp_slot_a5(%rip), %r8\n"
	"  mov hp_slot_a6(%rip), %r9\n"
	"  syscall\n"
	"hp_tramp_sys_after:\n"
	"  pop %r11\n  pop %r10\n  pop %r9\n  pop %r8\n"
	"  pop %rdi\n  pop %rsi\n  pop %rdx\n  pop %rcx\n  pop %rax\n"
	"  popfq\n"
	"  lea 128(%rsp), %rsp\n"
	"  jmp *hp_slot_resume(%rip)\n"
	/* A function call fn(a1, a2) with the extended state saved in the area. */
	"hp_tramp_call:\n"
	"  lea -128(%rsp), %rsp\n"
	"  pushfq\n"
	"  push %rax\n  push %rcx\n  push %rdx\n  push %rsi\n  push %rdi\n"
	"  push %r8\n  push %r9\n  push %r10\n  push %r11\n"
	"  push %rbp\n"
	"  mov %rsp, %rbp\n"
	"  cld\n"
	"  mov hp_slot_area(%rip), %r11\n"
	"  mov $-1, %eax\n  mov $-1, %edx\n"
	"  xsave64 64(%r11)\n"
	"  and $-16, %rsp\n"
	"  mov hp_slot_a1(%rip), %rdi\n"
	"  mov hp_slot_a2(%rip), %rsi\n"
	"  call *hp_slot_fn(%rip)\n"
	"  mov hp_slot_area(%rip), %r11\n"
	"  mov %rax, 8(%r11)\n"
	"  movq $1, (%r11)\n"
	"  mov $-1, %eax\n  mov $-1, %edx\n"
	"  xrstor64 64(%r11)\n"
	"  mov $39, %eax\n" /* getpid: the marker the agent stops at */
	"  syscall\n"
	"hp_tramp_call_marker:\n"
	"  mov %rbp, %rsp\n"
	"  pop %rbp\n"
	"  pop %r11\n  pop %r10\n  pop %r9\n  pop %r8\n"
	"  pop %rdi\n  pop %rsi\n  pop %rdx\n  pop %rcx\n  pop %rax\n"
	"  popfq\n"
	"  lea 128(%rsp), %rsp\n"
	"  jmp *hp_slot_resume(%rip)\n"
	".balign 8\n"
	"hp_slot_nr: .quad 0\n"
	"hp_slot_a1: .quad 0\n"
	"hp_slot_a2: .quad 0\n"
	"hp_slot_a3: .quad 0\n"
	"hp_slot_a4: .quad 0\n"
	"hp_slot_a5: .quad 0\n"
	"hp_slot_a6: .quad 0\n"
	"hp_slot_fn: .quad 0\n"
	"hp_slot_area: .quad 0\n"
	"hp_slot_resume: .quad 0\n"
	"hp_tramp_end:\n"
	".globl hp_tramp_blob\n"
	".set hp_tramp_blob, hp_tramp_start\n"
	".balign 4\n"
	".globl hp_tramp_offsets\n"
	"hp_tramp_offsets:\n"
	"  .long hp_tramp_sys_after - hp_tramp_start\n"
	"  .long hp_tramp_call - hp_tramp_start\n"
	"  .long hp_tramp_call_marker - hp_tramp_start\n"
	"  .long hp_slot_nr - hp_tramp_start\n"
	"  .long hp_tramp_end - hp_tramp_start\n"
	".popsection\n");

extern const uint8_t hp_tramp_blob[];
extern const uint32_t hp_tramp_offsets[5];
#define OFF(s) ((size_t)hp_tramp_offsets[s])
enum { hp_tramp_off_sys_after, hp_tramp_off_call, hp_tramp_off_marker, hp_tramp_off_slots, hp_tramp_size };

enum { SLOT_NR, SLOT_A1, SLOT_A2, SLOT_A3, SLOT_A4, SLOT_A5, SLOT_A6, SLOT_FN, SLOT_AREA, SLOT_RESUME, NSLOTS };

size_t hp_inject_call_area(void)
{
	unsigned a = 0, b = 0, c = 0, d = 0;

	/* CPUID 0xD, 0: ebx = the xsave area size for the features enabled now. */
	if (!__get_cpuid_count(0xd, 0, &a, &b, &c, &d) || b < 576)
		b = 4096;
	return (64 + (size_t)b + 4095) & ~(size_t)4095;
}

/* A system call the stop interrupted, wound back so it runs again (what the
 * kernel does on resume when no signal handler runs). */
static void normalize(struct user_regs_struct *r)
{
	long ax = (long)r->rax;

	if ((long)r->orig_rax < 0)
		return;
	if (ax == -512 || ax == -513 || ax == -514) { /* ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND */
		r->rax = r->orig_rax;
		r->rip -= 2;
	} else if (ax == -516) { /* ERESTART_RESTARTBLOCK */
		r->rax = 219;    /* restart_syscall */
		r->rip -= 2;
	}
	r->orig_rax = (unsigned long long)-1;
}

int hp_inject_begin(struct hp_injector *ij, struct hp_world *w, uint64_t scratch, char *err, size_t errlen)
{
	size_t size = OFF(hp_tramp_size);
	int r;

	memset(ij, 0, sizeof(*ij));
	ij->w = w;
	ij->scratch = scratch;
	if (size > HP_INJECT_SCRATCH) {
		snprintf(err, errlen, "the injection trampolines take %zu bytes, more than %d", size,
			 HP_INJECT_SCRATCH);
		return -E2BIG;
	}
	/* A thread that is not busy with an earlier call, preferably one
	 * waiting in a system call (it holds no lock mid-update). */
	size_t pick = w->n;
	for (size_t i = 0; i < w->n; i++)
		if (!w->t[i].busy && (pick == w->n || ((long)w->t[i].regs.orig_rax >= 0 && !w->t[i].dirty &&
						       (long)w->t[pick].regs.orig_rax < 0)))
			pick = i;
	if (pick == w->n) {
		snprintf(err, errlen, "no thread of process %d can run injected code", w->pid);
		return -EBUSY;
	}
	if ((r = hp_world_write(w, scratch, hp_tramp_blob, size)) < 0) {
		snprintf(err, errlen, "cannot write the trampolines at 0x%lx: %s", (unsigned long)scratch,
			 strerror(-r));
		return r;
	}
	ij->written = true;
	ij->tid = w->t[pick].tid;
	struct hp_thread *t = &w->t[pick];
	if (!t->dirty) {
		normalize(&t->regs);
		t->dirty = true;
	}
	return 0;
}

static int write_slots(struct hp_injector *ij, const uint64_t *slots)
{
	return hp_world_write(ij->w, ij->scratch + OFF(hp_tramp_off_slots), slots, NSLOTS * sizeof(uint64_t));
}

/* Wait for the next stop of the borrowed thread: the stop signal (with
 * 0x80 for system-call stops), 0 when the process is gone. Signals for the
 * process are kept and delivered at release. */
static struct hp_thread *borrowed(struct hp_injector *ij)
{
	ssize_t i = hp_world_index(ij->w, ij->tid);
	return i < 0 ? NULL : &ij->w->t[i];
}

static int next_stop(struct hp_injector *ij, int timeout_ms, bool others_run)
{
	struct hp_thread *t = borrowed(ij);
	double t0 = hp_now();

	if (!t)
		return 0;

	for (;;) {
		int st;
		pid_t r = waitpid(t->tid, &st, __WALL | WNOHANG);
		if (r < 0)
			return errno == ECHILD ? 0 : -errno;
		if (r == 0) {
			if (others_run)
				hp_world_poll_others(ij->w, (size_t)hp_world_index(ij->w, ij->tid));
			if ((hp_now() - t0) * 1000 > timeout_ms)
				return -ETIMEDOUT;
			struct timespec ts = { 0, 20000 };
			nanosleep(&ts, NULL);
			continue;
		}
		if (WIFEXITED(st) || WIFSIGNALED(st))
			return 0;
		int sig = WSTOPSIG(st);
		if (sig == (SIGTRAP | 0x80))
			return sig;
		if ((st >> 16) == PTRACE_EVENT_STOP || sig == SIGTRAP || sig == SIGSTOP) {
			/* An interrupt or event stop: run on. */
			if (ptrace(PTRACE_SYSCALL, t->tid, 0, 0) < 0)
				return -errno;
			continue;
		}
		/* The process's own signal: hold it for release, run on. */
		t->sig = sig;
		if (ptrace(PTRACE_SYSCALL, t->tid, 0, 0) < 0)
			return -errno;
	}
}

int hp_inject_syscall(struct hp_injector *ij, long nr, const uint64_t *args, int nargs, int64_t *ret, char *err,
		      size_t errlen)
{
	struct hp_thread *t = borrowed(ij);
	uint64_t slots[NSLOTS] = { 0 };
	struct user_regs_struct r;
	int s;

	if (!t) {
		snprintf(err, errlen, "the borrowed thread exited");
		return -ESRCH;
	}
	r = t->regs;

	slots[SLOT_NR] = (uint64_t)nr;
	for (int i = 0; i < nargs && i < 6; i++)
		slots[SLOT_A1 + i] = args[i];
	slots[SLOT_RESUME] = t->regs.rip;
	if (write_slots(ij, slots) < 0) {
		snprintf(err, errlen, "cannot write the system call's arguments");
		return -EIO;
	}
	r.rip = ij->scratch;
	r.orig_rax = (unsigned long long)-1;
	if (ptrace(PTRACE_SETREGS, t->tid, 0, &r) < 0 || ptrace(PTRACE_SYSCALL, t->tid, 0, 0) < 0) {
		snprintf(err, errlen, "ptrace on thread %d: %s", t->tid, strerror(errno));
		return -errno;
	}
	t->in_syscall_stop = false;
	/* Until the exit stop of our system call: a stop left over from an
	 * earlier injection (the exit of a skipped one) comes first. */
	for (int stops = 0;; stops++) {
		struct __ptrace_syscall_info si;
		if ((s = next_stop(ij, 5000, false)) <= 0 || stops > 16) {
			snprintf(err, errlen, "process %d %s during an injected system call", ij->w->pid,
				 s == 0 ? "exited" : "did not answer");
			if (s == -ETIMEDOUT)
				t->busy = true;
			return s == 0 ? -ESRCH : s < 0 ? s : -EIO;
		}
		memset(&si, 0, sizeof(si));
		if (ptrace(PTRACE_GET_SYSCALL_INFO, t->tid, sizeof(si), &si) > 0 && si.op == PTRACE_SYSCALL_INFO_EXIT &&
		    si.instruction_pointer == ij->scratch + OFF(hp_tramp_off_sys_after))
			break;
		if (ptrace(PTRACE_SYSCALL, t->tid, 0, 0) < 0)
			return -errno;
	}
	if (ptrace(PTRACE_GETREGS, t->tid, 0, &r) < 0)
		return -errno;
	*ret = (int64_t)r.rax;
	/* Back where it was: it stays in this exit stop until released. */
	if (ptrace(PTRACE_SETREGS, t->tid, 0, &t->regs) < 0)
		return -errno;
	t->in_syscall_stop = true;
	return 0;
}

int hp_inject_call(struct hp_injector *ij, uint64_t fn, uint64_t a1, uint64_t a2, uint64_t area, int timeout_ms,
		   uint64_t *ret, char *err, size_t errlen)
{
	struct hp_thread *t = borrowed(ij);
	uint64_t slots[NSLOTS] = { 0 };
	struct user_regs_struct r;
	double t0 = hp_now();
	int rc = 0;

	if (!t) {
		snprintf(err, errlen, "the borrowed thread exited");
		return -ESRCH;
	}
	r = t->regs;

	slots[SLOT_FN] = fn;
	slots[SLOT_A1] = a1;
	slots[SLOT_A2] = a2;
	slots[SLOT_AREA] = area;
	slots[SLOT_RESUME] = t->regs.rip;
	if (write_slots(ij, slots) < 0) {
		snprintf(err, errlen, "cannot write the call's arguments");
		return -EIO;
	}
	r.rip = ij->scratch + OFF(hp_tramp_off_call);
	r.orig_rax = (unsigned long long)-1;
	if (ptrace(PTRACE_SETREGS, t->tid, 0, &r) < 0 || ptrace(PTRACE_SYSCALL, t->tid, 0, 0) < 0) {
		snprintf(err, errlen, "ptrace on thread %d: %s", t->tid, strerror(errno));
		return -errno;
	}
	t->in_syscall_stop = false;
	/* Test hook: the agent dies while the call runs; the thread finishes it alone. */
	if (getenv("HOTPATH_TEST_KILL_IN_CALL"))
		raise(SIGKILL);
	hp_world_run_others(ij->w, (size_t)hp_world_index(ij->w, ij->tid));
	for (;;) {
		int left = timeout_ms - (int)((hp_now() - t0) * 1000);
		int s = next_stop(ij, left > 0 ? left : 0, true);
		t = borrowed(ij);
		if (s <= 0 || !t) {
			if (s == -ETIMEDOUT && t)
				t->busy = true; /* it finishes the call and returns on its own */
			snprintf(err, errlen, "the injected call in process %d %s", ij->w->pid,
				 s == 0 || !t ? "ended with the process" :
						"did not return in time; it is left to finish");
			rc = s == 0 || !t ? -ESRCH : s;
			break;
		}
		if (ptrace(PTRACE_GETREGS, t->tid, 0, &r) < 0) {
			rc = -errno;
			break;
		}
		if (r.rip == ij->scratch + OFF(hp_tramp_off_marker) && (long)r.orig_rax == 39)
			break;
		/* A system call the function makes: on to its next stop. */
		if (ptrace(PTRACE_SYSCALL, t->tid, 0, 0) < 0) {
			rc = -errno;
			break;
		}
	}
	char e2[256];
	ssize_t keep = hp_world_index(ij->w, ij->tid);
	if (hp_world_stop_others(ij->w, keep < 0 ? ij->w->n : (size_t)keep, e2, sizeof(e2)) < 0 && !rc) {
		snprintf(err, errlen, "%s", e2);
		rc = -ESRCH;
	}
	if (rc)
		return rc;
	t = borrowed(ij);
	uint64_t res[2] = { 0, 0 };
	hp_world_read(ij->w, area, res, sizeof(res));
	*ret = res[1];
	/* At the marker's entry stop: skip it and put every register back (the
	 * trampoline has restored the extended state already). */
	if (ptrace(PTRACE_SETREGS, t->tid, 0, &t->regs) < 0)
		return -errno;
	t->in_syscall_stop = true;
	if (res[0] != 1) {
		snprintf(err, errlen, "the injected call did not record its return");
		return -EIO;
	}
	return 0;
}
