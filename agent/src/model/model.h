/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The code model: module -> function -> basic block -> (instructions, decoded
 * on demand). One model for the three targets (live kernel, running process,
 * ELF file). Arrays are owned by their module; functions reference their
 * blocks, successors and call sites by [start, start+count) ranges, so a whole
 * kernel's model is a handful of large allocations rather than millions of
 * small ones.
 */
#ifndef HOTPATH_MODEL_H
#define HOTPATH_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* How control leaves a block (values match proto hotpath.v1.SuccessorKind). */
enum hp_succ_kind {
	HP_SUCC_FALLTHROUGH = 1, /* next block, incl. the not-taken side of a jcc or a jump label */
	HP_SUCC_TAKEN = 2,       /* direct branch to a block of the same function */
	HP_SUCC_TAIL_CALL = 3,   /* direct jump (jmp or jcc) out of the function */
	HP_SUCC_INDIRECT = 4,    /* indirect jump, incl. via a retpoline thunk */
	HP_SUCC_RETURN = 5,      /* ret, incl. jmp to a return thunk */
};

const char *hp_succ_kind_name(enum hp_succ_kind k); /* "fallthrough", "taken", ... */

struct hp_succ {
	uint8_t kind;    /* enum hp_succ_kind */
	uint64_t target; /* fallthrough/taken: offset from function start;
			    tail_call: absolute address; else 0 */
};

struct hp_block {
	uint32_t offset;     /* from function start */
	uint32_t size;       /* bytes */
	uint32_t ninsn;      /* instructions */
	uint32_t succ_start; /* index into hp_module.succs */
	uint16_t nsucc;
};

struct hp_call {
	uint32_t site;   /* offset of the call instruction from function start */
	uint64_t target; /* absolute callee address */
};

enum hp_function_flags {
	HP_FN_UNDECODABLE = 1 << 0,     /* bytes at bad_offset did not decode */
	HP_FN_UNREADABLE = 1 << 1,      /* bytes could not be read (read_errno) */
	HP_FN_SIZE_ESTIMATED = 1 << 2,  /* no symbol size: bounded heuristically */
	HP_FN_NORETURN = 1 << 3,        /* never returns: a known name, or proven from its CFG */
	HP_FN_NORETURN_NAMED = 1 << 4,  /* ... because of its name (else proven) */
	HP_FN_UNRESOLVED_JUMP = 1 << 5, /* an indirect jump neither a table nor a thunk */
	HP_FN_COLD_PART = 1 << 6,       /* the .cold fragment of the function at parent */
	HP_FN_PLT = 1 << 7,             /* a PLT stub, named "callee@plt" */
	/* Found by address (ELF and process targets, from the file): */
	HP_FN_ADDR_TAKEN = 1 << 8, /* its entry is stored in data (a function pointer) */
	HP_FN_INNER_REF = 1 << 9,  /* an address inside it is stored in data (label table, resume address) */
	HP_FN_LSDA = 1 << 10,      /* has exception landing pads (an LSDA in its .eh_frame FDE) */
	/* Kernel: has a jump-label site (static key), modelled as a two-way branch. */
	HP_FN_STATIC_BRANCH = 1 << 11,
	/* Kernel: has a static call site (or is a trampoline), modelled as an indirect call or jump. */
	HP_FN_STATIC_CALL = 1 << 12,
};

struct hp_function {
	const char *name;     /* owned by the model's string pool */
	uint64_t addr;        /* absolute address on this host / in this file */
	uint32_t size;        /* bytes; blocks tile [addr, addr+size) exactly */
	uint32_t block_start; /* index into hp_module.blocks */
	uint32_t nblocks;
	uint32_t call_start; /* index into hp_module.calls */
	uint32_t ncalls;
	uint32_t icall_start; /* index into hp_module.icall_sites */
	uint32_t nicalls;
	uint32_t flags;      /* enum hp_function_flags */
	uint32_t bad_offset; /* HP_FN_UNDECODABLE: first byte that did not decode */
	int read_errno;      /* HP_FN_UNREADABLE: why */
	uint32_t parent;     /* HP_FN_COLD_PART: index + 1 of the main fragment; 0 otherwise */
	uint32_t cold;       /* main fragment: index + 1 of its .cold part; 0 if none */
	uint32_t jt_start;   /* index into hp_module.jtables */
	uint32_t njt;
};

/* A switch table resolved from the code: the indirect jump at site reads
 * entry i of the table at table_addr and goes to targets[target_start + i]. */
struct hp_jump_table {
	uint32_t site;         /* offset of the indirect jump from the function start */
	uint32_t nentries;     /* entries (the bound check's limit) */
	uint64_t table_addr;   /* absolute address of the table */
	uint8_t entry_size;    /* 4 (offsets from table_addr) or 8 (absolute addresses) */
	uint8_t relative;      /* entries are offsets from table_addr */
	uint32_t target_start; /* index into hp_module.jt_targets */
	uint32_t base_site;    /* offset of the instruction naming the table (the lea, or the load) */
	uint8_t exact;         /* the bound check compares the index register itself */
	/* The base is set outside the jump's block: every path to the jump was
	 * followed back over the CFG to a lea of table_addr (jumptable.h), and
	 * every such lea names the table; base_site is the first of them. */
	uint8_t hoisted;
	/* A label table (a computed goto's, jumptable.h): 8-byte absolute
	 * entries read through a register a lea of table_addr set, no bound
	 * check; nentries is the run of entries from table_addr that land on
	 * instructions of the function, ended by a word outside it. */
	uint8_t label;
};

struct hp_module {
	char *name;                /* "vmlinux", a kernel module name, or an ELF path */
	uint64_t base;             /* address offsets are relative to (vmlinux: _text) */
	struct hp_function *funcs; /* sorted by addr, non-overlapping */
	size_t nfuncs;
	struct hp_block *blocks;
	size_t nblocks;
	struct hp_succ *succs;
	size_t nsuccs;
	struct hp_call *calls;
	size_t ncalls;
	uint32_t *icall_sites; /* offsets from function start */
	size_t nicall_sites;
	struct hp_jump_table *jtables;
	size_t njtables;
	uint64_t *jt_targets; /* absolute target of each table entry */
	size_t njt_targets;
	/* PLT stubs whose callee the module defines itself (a shared library
	 * calling its own export): the stub goes there unless another module
	 * interposes the name. Sorted by stub. */
	struct hp_plt_target {
		uint64_t stub, target;
	} * plt_targets;
	size_t nplt_targets, cap_plt_targets;
	char digest[65];   /* hex SHA-256 of the canonical piece, see hp_module_digest */
	char build_id[65]; /* hex GNU build id of the module's ELF file (vmlinux: the kernel's); "" if none */
	void *cfi;         /* its call-frame table (target/unwind.h), owned by the target; NULL if none */
	uint64_t cfi_bias; /* the table's addresses + cfi_bias = the model's */
	void *priv;        /* target-private (string pool, ELF handle, ...) */
	size_t cap_funcs;  /* allocated length of funcs while building */
};

enum hp_target_kind { HP_TARGET_KERNEL, HP_TARGET_ELF, HP_TARGET_PID };

struct hp_model;

/* Reads bytes of code at an absolute address; returns 0 or a negative errno. */
typedef int (*hp_read_fn)(struct hp_model *m, uint64_t addr, void *buf, size_t len);

struct hp_model {
	enum hp_target_kind kind;
	struct hp_module *mods; /* kernel: vmlinux first, then modules */
	size_t nmods, cap_mods;
	char release[128]; /* kernel release, or ELF build id / path */
	char build_id[65]; /* hex GNU build id, "" if none */
	hp_read_fn read;
	void *priv; /* target-private state (BPF reader, pid, fd) */
	/* Address index over every function of every module (sorted). */
	struct {
		uint64_t addr;
		uint32_t mod, fn;
	} * index;
	size_t nindex;
	double parse_seconds; /* wall time of hp_model_open_* */
	/* Name index: every function name and alias, sorted by name. */
	struct hp_name_ent *names;
	size_t nnames;
	struct hp_pool *pool; /* strings of every module (names, paths) */
	void (*free_priv)(struct hp_model *m);
	struct hp_name_ent *aliases; /* names dropped by hp_module_normalize */
	size_t naliases, cap_aliases;
};

void hp_model_free(struct hp_model *m);

/* Find the function containing addr; NULL if none. Sets *mod_out if non-NULL. */
const struct hp_function *hp_model_lookup(const struct hp_model *m, uint64_t addr, const struct hp_module **mod_out);
/* Find the block of f containing addr (absolute); NULL if none (also when mod or f is NULL). */
const struct hp_block *hp_function_block_at(const struct hp_module *mod, const struct hp_function *f, uint64_t addr);
/* Find a function by name ("name" or "module:name"); NULL if none or ambiguous
 * (then *ambiguous is set if non-NULL). */
const struct hp_function *hp_model_find(const struct hp_model *m, const char *name, const struct hp_module **mod_out,
					bool *ambiguous);
/* Symbol name for an absolute address ("func" or "func+0x12"); NULL if none. */
const char *hp_model_symbolize(const struct hp_model *m, uint64_t addr, char *buf, size_t len);

/* One decoded instruction, for on-demand disassembly. */
struct hp_insn {
	uint64_t addr;
	uint8_t len;
	uint8_t bytes[15];
	char text[96]; /* Intel syntax, targets symbolized */
};
/* No real function is anywhere near this; a symbol claiming more comes from a damaged file. */
#define HP_MAX_DISASSEMBLY_BYTES (16u << 20)

/* Decode every instruction of f (re-reading its bytes from the target).
 * Returns the count (>= 0) and a malloc'd array in *out, or a negative errno. */
int hp_function_disassemble(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			    struct hp_insn **out, char *err, size_t errlen);

/* Every function named name (or "module:name"): fills up to max hits and
 * returns how many exist in total. */
struct hp_find_hit {
	const struct hp_module *mod;
	const struct hp_function *fn;
};
size_t hp_model_find_all(const struct hp_model *m, const char *name, struct hp_find_hit *hits, size_t max);

/* Totals over every module, for `parse` and progress lines. */
struct hp_model_stats {
	size_t functions, blocks, succs, calls, icalls, undecodable, unreadable;
};
void hp_model_stats(const struct hp_model *m, struct hp_model_stats *st);

/*
 * For target implementations (target_*.c): building a model.
 */
struct hp_name_ent {
	const char *name;
	uint32_t mod, fn;
};
/* Private flags while building (hp_module_normalize clears them): the symbol
 * is global (preferred among aliases); the symbol is a generic alias (a module's init_module/cleanup_module) that
 * any other name at the same address beats. */
#define HP_FN_BUILD_GLOBAL  (1u << 31)
#define HP_FN_BUILD_GENERIC (1u << 30)
/* ... and the symbol is an IFUNC (ELF STT_GNU_IFUNC: its address is the resolver's). */
#define HP_FN_BUILD_IFUNC   (1u << 29)

struct hp_model *hp_model_new(enum hp_target_kind kind);
const char *hp_model_strdup(struct hp_model *m, const char *s);
/* Append a module; returns it (stable until the next call) or NULL. */
struct hp_module *hp_model_add_module(struct hp_model *m, const char *name, uint64_t base);
/* Append a function to mod (unsorted); name must come from hp_model_strdup.
 * Returns 0 or -ENOMEM. */
int hp_module_add_function(struct hp_module *mod, const char *name, uint64_t addr, uint64_t size, uint32_t flags);
/* Sort mod's functions, keep one per address (the global one; the other names
 * become aliases in the name index), clip overlaps. */
int hp_module_normalize(struct hp_model *m, struct hp_module *mod);
/* Build the address and name indexes once every module is final. */
int hp_model_build_index(struct hp_model *m);
double hp_now(void);

#endif
