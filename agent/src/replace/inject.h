/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running a system call or a function call inside a stopped process, so
 * that the process survives the agent dying at any instant. One thread is
 * borrowed. Its registers are first restart-normalized (a system call the
 * stop interrupted is wound back to its syscall instruction, as the kernel
 * would restart it). Then only its program counter moves: to a trampoline
 * the agent wrote into scratch bytes no code of the process runs (the
 * unused tail of an executable file mapping). The trampoline saves what it
 * clobbers, makes the call, puts everything back and jumps to where the
 * thread was. The agent watches with PTRACE_SYSCALL, reads the result at
 * the system call's exit stop (or at a marker system call after a function
 * call), and puts the thread's registers back itself. If the agent dies
 * instead, the thread finishes the trampoline on its own and carries on.
 * (An int3 or a bare syscall gadget would kill or derail it.)
 */
#ifndef HOTPATH_REPLACE_INJECT_H
#define HOTPATH_REPLACE_INJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replace/world.h"

/* Bytes of scratch the trampolines need. */
#define HP_INJECT_SCRATCH 384
/* The data area a function call needs (writable): a done flag and result,
 * then the save area of the extended registers (64-byte aligned). */
size_t hp_inject_call_area(void);

struct hp_injector {
	struct hp_world *w;
	pid_t tid; /* the borrowed thread */
	uint64_t scratch;
	bool written; /* the trampolines are in the scratch bytes */
	char why[256];
};

/* Borrow a thread of w (stopped) and write the trampolines at scratch
 * (HP_INJECT_SCRATCH bytes the caller journaled). */
int hp_inject_begin(struct hp_injector *ij, struct hp_world *w, uint64_t scratch, char *err, size_t errlen);
/* Run system call nr with up to six arguments; *ret is its result (a
 * negative errno on failure). Returns 0, or a negative errno when the
 * injection itself failed (err says why; the process exited: -ESRCH). */
int hp_inject_syscall(struct hp_injector *ij, long nr, const uint64_t *args, int nargs, int64_t *ret, char *err,
		      size_t errlen);
/*
 * Call fn(a1, a2) in the process with area (hp_inject_call_area() bytes,
 * writable, zeroed) as its save and result area; waits up to timeout_ms.
 * The other threads run meanwhile (the call may wait for a lock one of
 * them holds) and are stopped again after it.
 * On return area+0 holds 1 and area+8 the result, also in *ret. A call that
 * does not come back in time is left to finish on its own (-ETIMEDOUT: the
 * thread is not touched again; area+0 tells later whether it finished).
 */
int hp_inject_call(struct hp_injector *ij, uint64_t fn, uint64_t a1, uint64_t a2, uint64_t area, int timeout_ms,
		   uint64_t *ret, char *err, size_t errlen);

#endif
