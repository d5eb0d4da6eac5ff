/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Targets: the three places code can live, each opened as one code model.
 * The live kernel (/proc/kallsyms and kernel text read through BPF), an ELF
 * file on disk, and a running process (its mapped ELF files, bytes from
 * /proc/PID/mem). Everything above this layer works on struct hp_model and
 * does not care which target produced it.
 */
#ifndef HOTPATH_TARGET_H
#define HOTPATH_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "target/static_branch.h"

/* Bytes to read in place of what a process holds now: the original code
 * under a patch the agent made (an installed copy's entry jump), so a
 * model shows the code as it was planned. */
struct hp_byte_patch {
	uint64_t addr;
	uint8_t len;
	uint8_t bytes[16];
};

/* Put the bytes of patches p[0..n) into what was read of [addr, addr+len). */
void hp_byte_patches_apply(const struct hp_byte_patch *p, size_t n, uint64_t addr, void *buf, size_t len);

/* Options for opening a model. */
struct hp_open_opts {
	const char *only_function; /* parse just this function (fast CLI path); NULL = all */
	/* Kernel: parse just the function holding this address (the one
	 * only_function would name); 0 = none. An address in no function asks
	 * for nothing: with nothing else asked for, all are parsed. */
	uint64_t only_address;
	/* Kernel: more functions to parse just those of, with only_function
	 * and only_address: each name as only_function (an alias, module:name,
	 * every function of the name), each address as only_address. Each
	 * one's blocks are the whole parse's; a name that finds nothing is
	 * left to the caller to report (as only_function's). */
	const char *const *only_functions;
	size_t nonly_functions;
	const uint64_t *only_addresses;
	size_t nonly_addresses;
	int threads; /* decode threads; 0 = number of online CPUs */
	bool quiet;  /* no progress on stderr */
	/* Kernel: parse the modules only, not vmlinux (its functions are in
	 * the model, unparsed; modules know its noreturn functions by name
	 * only). For the callers of module code: vmlinux holds no direct call
	 * of a module's function (its static-call sites, which the kernel may
	 * point at one, are read in their canonical form anyway). */
	bool modules_only;
	/* Kernel: the folder of the noreturn cache (kernel_cache.h); NULL is
	 * HP_KERNEL_CACHE_DIR, "" none. A whole parse writes it; a parse of
	 * some functions reads it and then parses no callee. */
	const char *kernel_cache_dir;
	/* Process targets: reads see these bytes instead (copied at open). */
	const struct hp_byte_patch *overlay;
	size_t noverlay;
};

/*
 * Open a model. Each returns 0 and fills *out, or a negative errno and writes a
 * one-line human-readable reason into err (e.g. the missing capability).
 */
int hp_model_open_kernel(const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen);
int hp_model_open_elf(const char *path, const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen);
int hp_model_open_pid(int pid, const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen);

/* A process model's overlay replaced by p[0..n) (copied): for a caller that
 * patches the process while it plans from the model (inline counters install
 * one copy after another), so later reads still give the original code.
 * 0, -ENOMEM; 0 and nothing done for the kernel and ELF targets. */
int hp_model_set_overlay(struct hp_model *m, const struct hp_byte_patch *p, size_t n);

/* Where breakpoints sit in [addr, addr+len) of a process target's code: a
 * uprobe (a running measurement's, or another tool's) or a debugger's int3,
 * which the model's reader hides (it reads the program's own bytes, see
 * hp_unprobe_bytes). Up to max addresses into sites; how many, or a negative
 * errno. 0 for the kernel and ELF targets. */
int hp_model_probe_sites(struct hp_model *m, uint64_t addr, size_t len, uint64_t *sites, size_t max);

/* Markers in vmlinux's /proc/kallsyms the kernel target reads. */
enum hp_kernel_marker {
	HP_KMARK_BUG_START,
	HP_KMARK_BUG_STOP,
	HP_KMARK_EX_START,
	HP_KMARK_EX_STOP,
	HP_KMARK_NOINSTR_START,
	HP_KMARK_NOINSTR_END,
	HP_KMARK_ENTRY_START,
	HP_KMARK_ENTRY_END,
	HP_KMARK_IRQENTRY_START,
	HP_KMARK_IRQENTRY_END,
	HP_KMARK_SOFTIRQ_START,
	HP_KMARK_SOFTIRQ_END,
	HP_KMARK_SCHED_START,
	HP_KMARK_SCHED_END,
	HP_KMARK_LOCK_START,
	HP_KMARK_LOCK_END,
	HP_KMARK_CPUIDLE_START,
	HP_KMARK_CPUIDLE_END,
	HP_KMARK_KPROBES_START,
	HP_KMARK_KPROBES_END,
	HP_KMARK_KPROBE_BL_START,
	HP_KMARK_KPROBE_BL_STOP,
	HP_KMARK_FENTRY,
	HP_KMARK_JUMP_START,
	HP_KMARK_JUMP_STOP,
	HP_KMARK_SCALL_START,
	HP_KMARK_SCALL_STOP,
	HP_KMARK_COUNT
};

/* Code the running kernel finds by address, which must stay where it is. */
struct hp_pinned_range {
	uint64_t lo, hi;  /* [lo, hi) */
	const char *rule; /* e.g. "exception table entry", "noinstr text" */
};

struct hp_kernel_facts {
	struct hp_pinned_range *pinned; /* sorted by lo */
	size_t npinned;
	uint64_t *warn_traps; /* WARN() trap addresses from the bug table (sorted) */
	size_t nwarn_traps;
	size_t nbug_entries;
	uint64_t fentry; /* address of __fentry__, 0 if absent */
	/* Jump-label sites of vmlinux and of the modules parsed (each
	 * module's own __jump_table) put in their canonical JMP form before
	 * decoding (sorted), and the tables' sites whose bytes were neither
	 * their NOP nor their JMP (left as they are). */
	uint64_t *static_branches;
	size_t nstatic_branches;
	size_t static_branch_foreign;
	/* The jump tables' entries (vmlinux text's, then those of each module
	 * parsed), sorted by site. */
	const struct hp_static_branch *jump_entries;
	size_t njump_entries;
	/* Static call sites and trampolines of vmlinux and of the modules
	 * parsed (each module's own .static_call_sites) put in their canonical
	 * form (sorted), and those whose bytes were no known form. */
	uint64_t *static_calls;
	size_t nstatic_calls;
	size_t static_call_foreign;
	/* The static call tables' entries and the trampolines, sorted by site:
	 * each site's key and trampoline (found by the key's name). */
	const struct hp_static_call *call_entries;
	size_t ncall_entries;
	char notes[4][240]; /* what could not be read, with why */
	int nnotes;
};

/* Kernel text as it is now. The model's reader (m->read) shows the
 * jump-label and static call sites the parse canonicalized in that form
 * (the bytes the blocks were cut from); this one shows what the kernel has
 * set them to. 0 or a negative errno. */
int hp_kernel_read_live(struct hp_model *m, uint64_t addr, void *buf, size_t len);

/* The kernel facts gathered when the model was opened; NULL for other targets. */
const struct hp_kernel_facts *hp_kernel_facts(const struct hp_model *m);

#endif
