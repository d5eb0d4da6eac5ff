/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Installing a plan's code into a running target and reverting it
 * (KernInst section 3), on the target interface (patch_target.h):
 *
 *   install: check the plan (code hash, approval, build id, the original
 *     bytes it was made from) -> journal -> quiesce -> code heap within
 *     reach of every reference -> copy re-based, unwind data registered ->
 *     root's entry spliced to jump to the copy -> the root's static call
 *     sites call the copy -> resume. A hot-set plan (options.hot_set) has
 *     every member's entry spliced and every member's call sites redirected.
 *   revert: call sites restored first, then the entry, so the copy stays
 *     reachable until the end; the heap is freed only when no thread can be
 *     inside it (else left mapped, and the record says so).
 *
 * Every change is journaled (journal.h) before it is made; a failed install
 * is reverted before the error is returned, and a journal left by an agent
 * that died is read back by hp_installed_list and finished by hp_revert.
 * The layer's interface, implemented by install_engine.c (installing),
 * revert.c, installed.c (the listing, moved code, patches) and plan_file.c
 * (the plan file), over install_op.c and journal_state.c.
 */
#ifndef HOTPATH_REPLACE_INSTALL_H
#define HOTPATH_REPLACE_INSTALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "measure/moved.h"
#include "model/model.h"
#include "plan/plan.h"
#include "target/target.h"

/* A plan as its JSON (`hotpathd plan --json`) gives it to an installer. */
struct hp_iblock {
	uint32_t offset, size;
	uint64_t new_addr; /* in the plan's layout */
	uint32_t new_size; /* 0: the layout emptied it */
};

struct hp_imember {
	char *name, *module;
	uint64_t addr; /* original entry, as planned */
	uint32_t size;
	uint64_t new_addr; /* the copy's entry, in the plan's layout */
	char digest[65];   /* SHA-256 of the original bytes */
	struct hp_iblock *blocks;
	size_t nblocks;
	/* Its jump-label sites (kernel), sorted, in the planned addresses (key
	 * unused): read in their JMP form for the digest, as the planner did. */
	struct hp_static_branch *jump_labels;
	size_t njump_labels;
	/* Its static call sites (kernel), sorted, in the planned addresses
	 * (key and trampoline unused): read in their canonical form for the
	 * digest, as the planner did. */
	struct hp_static_call *static_calls;
	size_t nstatic_calls;
};

struct hp_iplan {
	char *root;
	char kind[8]; /* "pid" or "elf" */
	int pid;
	uint64_t start_time;
	char *module;
	uint64_t module_base; /* the module's load bias in the planned addresses */
	uint64_t kernel_text; /* a kernel plan's: vmlinux's _text when it was made (0: not stated) */
	char build_id[65];
	uint64_t base;
	uint8_t *code, *unwind;
	size_t code_len, unwind_len;
	uint32_t unwind_off;
	struct hp_reloc *relocs;
	size_t nrelocs;
	struct hp_imember *members;
	size_t nmembers;
	bool hot_set;      /* options.hot_set: every member's entry is spliced, not only the root's */
	char hash[65];     /* code.sha256 as the plan states it */
	char computed[65]; /* recomputed from the code */
	char *text;        /* the JSON itself */
	size_t text_len;
	/* An instrumented copy's counter area (plan/instrument.h), set by its
	 * maker, not read from JSON: counters_len bytes at counters_off from the
	 * copy's start, mapped read+write with the code heap (the code stays
	 * read+exec); 0: none. */
	uint64_t counters_off;
	size_t counters_len;
};

/* Whether a kernel plan fits where its module now lies delta bytes from where it
 * was planned (another boot or another host of the build: KASLR and the module
 * loader place vmlinux and each module independently). The engine places the
 * members and every relocation target by delta: right for the plan's module,
 * and for what lies outside it (vmlinux's code and data, another module's)
 * only when that moved by delta too. A vmlinux plan reaches nothing outside
 * vmlinux. live_text is vmlinux's _text now; mod_addr and mod_size the
 * module's extent now (/proc/modules; 0 when unknown). 0, or -ESTALE with the
 * reason: a plan reaching outside its module, where vmlinux moved by another
 * distance (or the plan does not say where vmlinux was), is refused rather
 * than installed with references into the wrong code. */
int hp_iplan_kernel_moved(const struct hp_iplan *p, int64_t delta, uint64_t live_text, uint64_t mod_addr,
			  uint64_t mod_size, char *err, size_t errlen);

/* Parse a plan's JSON; refuses plans that are not ok and verified. */
int hp_iplan_parse(const char *text, size_t len, struct hp_iplan *p, char *err, size_t errlen);
/* Read a plan file (at most 256 MiB, as `hotpathd install` takes) and parse it:
 * 0, a negative errno with err saying why. */
int hp_iplan_read(const char *path, struct hp_iplan *p, char *err, size_t errlen);
void hp_iplan_free(struct hp_iplan *p);

/* The approval hook: 0 when the plan with this code hash for this build
 * may be installed, else a negative errno with err saying why. */
typedef int (*hp_approve_fn)(void *ctx, const struct hp_iplan *p, char *err, size_t errlen);

#define HP_INSTALL_ID_MAX 48

/* Whether s names an install: 1 to HP_INSTALL_ID_MAX letters, digits, '-'
 * or '_' (so it can be part of a file name); false for NULL. */
bool hp_install_id_valid(const char *s);

/* Steps of an install and a revert, for progress and for tests that stop
 * the agent between two of them. */
enum hp_install_step {
	HP_STEP_CHECKED = 1,
	HP_STEP_JOURNALED,
	HP_STEP_STOPPED,
	HP_STEP_SCRATCH,
	HP_STEP_HEAP,
	HP_STEP_UNWIND,
	HP_STEP_ENTRY,
	HP_STEP_CALLS,
	HP_STEP_INSTALLED,
	HP_STEP_REVERT_CALLS,
	HP_STEP_REVERT_ENTRY,
	HP_STEP_REVERT_HEAP,
	HP_STEP_REVERTED,
};
const char *hp_install_step_name(enum hp_install_step s);

struct hp_install_opts {
	const char *state_dir;    /* journals and saved plans (STATE_DIR/replace) */
	int pid;                  /* 0: the plan's process */
	bool patch_calls;         /* also make the root's static call sites call the copy */
	const struct hp_model *m; /* the target's model (call sites); NULL: entry only */
	/* The original bytes under the caller's own installs' patches in this
	 * process (hp_installed_patches), as the model the plan was made from
	 * read them: the members' code is checked against the plan with these
	 * in place of the patched bytes. */
	const struct hp_byte_patch *orig;
	size_t norig;
	const char *approved_hash; /* if set, the code hash must be this */
	hp_approve_fn approve;     /* if set, asked before anything is written */
	void *approve_ctx;
	bool replace; /* the root is installed already: revert it first (a second pass) */
	/* The install's name (journal, heap): 1 to HP_INSTALL_ID_MAX letters,
	 * digits, '-' or '_' (the daemon passes the plan's id); NULL:
	 * hotpath-PID-ROOT-RANDOM. */
	const char *id;
	void (*progress)(void *ctx, enum hp_install_step s, const char *detail);
	void *progress_ctx;
};

struct hp_install_result {
	char id[64]; /* the install's name: journal, heap */
	char journal[4096];
	uint64_t heap, heap_len, new_entry, entry;
	size_t call_sites, call_sites_skipped;
	size_t entries; /* entries spliced: 1, or a hot set's members */
	bool unwind_registered;
	char unwind_note[200];
	double check_ms, entry_us, calls_ms, total_ms, stopped_ms;
	double revert_calls_ms, revert_entry_us, revert_total_ms;
	bool heap_kept;
	char heap_note[400];
	/* Heaps earlier reverts kept (a thread could still be in the copy),
	 * asked again by this install or revert: released now, still waiting. */
	size_t kept_released, kept_waiting;
	unsigned pcs_moved, waits; /* threads inside bytes being written: moved to the copy, or waited for */
};

/* Install. Returns 0, or a negative errno with err saying why and nothing
 * left changed in the target (-ESTALE: the target or binary changed since
 * planning; -EBADMSG: the plan was altered; -EACCES: not approved; -ESRCH:
 * the process exited; -EPERM: ptrace refused; -ENOSPC: the journal's disk
 * is full; -EEXIST: the root is installed already). */
int hp_install(const struct hp_iplan *plan, const struct hp_install_opts *o, struct hp_install_result *res, char *err,
	       size_t errlen);

/* What the journals in state_dir say is installed. */
struct hp_installed {
	char id[64];
	char journal[4096];
	char plan_path[4200];
	int pid; /* a kernel install's: the process holding it (its /dev/hotpath) */
	uint64_t start_time;
	char target[16]; /* "process" or "kernel" */
	char root[128];
	char module[512];
	char hash[65];
	char state[24]; /* installed, installing, reverting, heap_kept, process_gone */
	uint64_t entry, new_entry, heap, heap_len, base;
	size_t writes_made, writes;
	size_t calls; /* call sites the install redirected (0: its entries only) */
	char detail[512];
};
int hp_installed_list(const char *state_dir, struct hp_installed **out, size_t *n, char *err, size_t errlen);

/* Revert the install(s) of process pid (root NULL: every one), finishing
 * interrupted installs and reverts from their journals, in any order: bytes
 * another install wrote over since are left to it, and bytes this one wrote
 * over another's go back to that install's. Then the process's kept heaps
 * are asked again (hp_release_kept). */
int hp_revert(const char *state_dir, int pid, const char *root, struct hp_install_result *res,
	      void (*progress)(void *ctx, enum hp_install_step s, const char *detail), void *ctx, char *err,
	      size_t errlen);

/* Ask again about the heaps that reverts kept mapped (a thread could still
 * be in the copy: its PC, or a word on its stack, in the heap): of process
 * pid (0: every process), all but the journal except (may be NULL). One look
 * each, no waiting; a heap no thread can be in now is released and its
 * journal removed (as is the journal of a process that exited). Counts
 * into *released and *waiting. hp_install and the reverts call it for their
 * process; the daemon calls it periodically. 0, or -EIO when the journals
 * cannot be listed. */
int hp_release_kept(const char *state_dir, int pid, const char *except, size_t *released, size_t *waiting);

/* Revert the install named id (hp_install_opts.id), finishing it if it was
 * interrupted; *pid gets its process. -ENOENT when no journal has that id. */
int hp_revert_id(const char *state_dir, const char *id, int *pid, struct hp_install_result *res,
		 void (*progress)(void *ctx, enum hp_install_step s, const char *detail), void *ctx, char *err,
		 size_t errlen);

/*
 * Start-up recovery (the daemon runs it before it takes commands): every
 * journal an agent left unfinished is brought to a consistent state.
 * Installs interrupted midway ("installing") are reverted from their
 * journal, as are interrupted reverts ("reverting"); a heap a revert had to
 * keep is released if no thread is inside it now; journals of processes
 * that exited are removed. Complete installs stay installed. report (may
 * be NULL) is called per journal acted on, with what it was, the outcome
 * (0, or a negative errno) and err. Returns how many were acted on.
 */
int hp_replace_recover(const char *state_dir,
		       void (*report)(void *ctx, const struct hp_installed *h, int r, const char *err), void *ctx);

/* Installed code as measurable code (measure/moved.h): where each block
 * of each member of every install in process pid runs now. */
int hp_moved_code_of(const char *state_dir, int pid, struct hp_moved_code **out, size_t *n, char *err, size_t errlen);
/* The same for every kernel install in the state directory (whichever
 * process holds it): where the kernel's copied blocks run now. */
int hp_moved_kernel_code(const char *state_dir, struct hp_moved_code **out, size_t *n, char *err, size_t errlen);

/* Byte patches the installs in process pid made (for reading its original
 * code: the second pass plans from the bytes the plan was made from). */
int hp_installed_patches(const char *state_dir, int pid, struct hp_byte_patch **out, size_t *n);

/* Process pid's model with its code as its binary has it: the bytes under the
 * patches of the installs journalled in state_dir (NULL or "": none) read as
 * the bytes they replaced, so its catalogs, plans and call sites are those of
 * the original code. o: the other options (NULL: quiet; its overlay is
 * ignored). An unreadable journal leaves the patched bytes in the model. The
 * result is hp_model_open_pid's. */
int hp_model_open_pid_unpatched(const char *state_dir, int pid, const struct hp_open_opts *o, struct hp_model **out,
				char *err, size_t errlen);

/* Whether every member of plan p reads, in its target, as the code the plan
 * was made from (the install's own check: each member's bytes, with other
 * installs' writes read as the original, hash to the plan's digest). 0, or a
 * negative errno with err saying why (-ESTALE: a member differs). */
int hp_install_members_original(const struct hp_iplan *p, const struct hp_install_opts *o, char *err, size_t errlen);

/*
 * Install/revert cycles in one process (`hotpathd install PLAN --cycles N`):
 * the same hp_install and revert as one install and one `hotpathd revert`,
 * with the model (o->m, the call sites) opened once by the caller. Each
 * cycle: install (journal first), check (installed), revert by the install's
 * id (call sites, then entries, then the heap), then every byte the install
 * wrote (its journal's entry and call-site records) is read back as the
 * original, every member hashes as planned, and check (reverted).
 */
struct hp_cycle {
	unsigned n;        /* 1-based */
	double install_ms; /* hp_install, checks included */
	double check_ms, entry_us, calls_ms;
	double revert_ms, revert_entry_us, revert_calls_ms;
	size_t entries, call_sites;
	uint64_t heap, heap_len;
	bool heap_kept;      /* the revert kept the heap (a thread could be in the copy) */
	int check_installed; /* the caller's check: 0 ok, 1 failed, -1 not run */
	int check_reverted;
	size_t bytes_checked;  /* bytes the install wrote, read back after the revert */
	size_t bytes_wrong;    /* of them, not the original */
	bool members_original; /* every member hashes as planned after the revert */
	char why[256];         /* the first thing that was wrong, "" */
};

struct hp_cycles_opts {
	unsigned cycles;
	/* Called while installed (installed true, res the install's) and once
	 * reverted: 0 when the target behaves as it should, else non-zero with
	 * why filled. NULL: no check. */
	int (*check)(void *ctx, const struct hp_cycle *c, bool installed, const struct hp_install_result *res,
		     char *why, size_t wl);
	/* After each cycle (its figures), NULL: none. */
	void (*done)(void *ctx, const struct hp_cycle *c);
	/* Asked before each cycle: true ends the loop there (nothing installed). */
	bool (*stop)(void *ctx);
	void *ctx;
};

struct hp_cycles_result {
	unsigned done;  /* cycles installed and reverted */
	unsigned wrong; /* of them, with a failed check, a byte not restored or a member not original */
	bool stopped;   /* ended early by stop() */
	double install_ms, revert_ms, entry_us, calls_ms, revert_entry_us, revert_calls_ms; /* sums */
	size_t entries, call_sites, heaps_kept;                                             /* sums */
	double install_us_per_entry; /* mean over cycles of install_ms * 1000 / entries */
	double wall_s;
};

/* Run co->cycles cycles of p. 0 when every install and revert succeeded
 * (res->wrong may still count cycles whose checks failed), or the install's
 * or the revert's negative errno with err saying why: the loop stops there,
 * a failed install having undone itself, and a failed revert's journal left
 * for `hotpathd revert`. */
int hp_install_cycles(const struct hp_iplan *p, const struct hp_install_opts *o, const struct hp_cycles_opts *co,
		      struct hp_cycles_result *res, char *err, size_t errlen);

#endif
