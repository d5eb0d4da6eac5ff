/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Code positioning plans (KernInst section 2, FDPR, Pettis-Hansen): from a
 * root function and a profile, the group of functions to re-lay-out, their
 * hot and cold chunks and chains, the I-cache footprint before and after
 * for the host's L1i, and the emitted, verified code. A plan installs
 * nothing; it is exactly what an installer would install.
 */
#ifndef HOTPATH_PLAN_H
#define HOTPATH_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host/hostinfo.h"
#include "model/model.h"
#include "plan/profile.h"

struct hp_instrument;
struct hp_icall_values;

struct hp_plan_opts {
	double join_fraction;         /* a callee joins with a block run > this x root calls (0.05) */
	double min_caller_share;      /* ... and when this share of its calls come from the group (0.5) */
	double stall_threshold;       /* I-cache stall / CPU time to call it a bottleneck (0.10) */
	struct hp_cache_geometry l1i; /* zero: the host's (sysfs) */
	uint32_t fetch_block;         /* bytes (16) */
	uint32_t max_pad;             /* most padding bytes before one aligned block (7) */
	double max_pad_share;         /* total padding at most this share of hot bytes (0.05) */
	bool no_align;
	uint64_t base;          /* where the emitted code is laid out; 0 = after the root's module */
	uint32_t max_functions; /* group size bound (64) */
	uint32_t small_block;   /* "small" for the isolated-predecessor rule, bytes (8) */
	/* Whole hot set (hot_set.c): no root given; every function of the
	 * profile in the smallest set covering hot_share of its work joins
	 * (at most max_functions), shared callees copied, C3 order (c3.c). */
	bool hot_set;
	double hot_share; /* (1: every function the profile shows ran) */
	/* A member's block (its entry aside) that ran fewer times than this
	 * per billion instructions of the profile's work (the module's, as
	 * hot_share counts it) is cold: laid out with the cold chunks (100). */
	double cold_rate;
	const char *hot_module; /* the module whose hot set (its path, or the end of it); NULL: the hottest */
	/* More hot code that stays in place, for where the copy starts (c3.c's
	 * place pass): its functions that are not members. NULL: none. */
	const struct hp_profile *resident;
	/* Indirect-call promotion (icall_values.c): the targets measured at
	 * the indirect call sites (NULL: none, nothing is promoted); a site
	 * whose most frequent target is a member taking at least
	 * promote_share of its calls (0.75) calls that member's copy
	 * directly when the pointer holds its original entry. */
	const struct hp_icall_values *icall_values;
	double promote_share;
	/* Each member's hot chunk: Pettis-Hansen's chains with FDPR's rules
	 * (chains.h), ext-TSP's (ext_tsp.h), or (auto, the default) whichever
	 * leaves fewer taken branches by the member's edge counts. */
	enum hp_block_layout { HP_LAYOUT_AUTO = 0, HP_LAYOUT_PETTIS_HANSEN, HP_LAYOUT_EXT_TSP } block_layout;
};

/* max_functions for a hot set when none is given. */
#define HP_HOT_SET_MAX_FUNCTIONS 512u

void hp_plan_opts_default(struct hp_plan_opts *o);

/* "auto", "pettis-hansen" or "ext-tsp"; hp_block_layout_parse: the
 * layout a name gives, or -1. */
const char *hp_block_layout_name(enum hp_block_layout l);
int hp_block_layout_parse(const char *name);

/* Whether block b (an index in its function) with this count is laid out
 * hot: it ran, not below cold_below (struct hp_plan's); the entry always. */
static inline bool hp_plan_block_hot(double count, double cold_below, uint32_t b)
{
	return (count > 0 && count >= cold_below) || b == 0;
}

/* One block of a group member as laid out. */
struct hp_plan_block {
	uint32_t index; /* in the function */
	double count;
	bool hot;
	int32_t chain; /* -1 cold */
	uint64_t new_addr;
	uint32_t new_size; /* bytes emitted for it, branches included */
	uint32_t pad;      /* alignment bytes before it */
};

struct hp_plan_chain {
	uint32_t first, n; /* into the member's blocks (layout order) */
	double weight;     /* the hottest block's count */
	uint32_t bytes;
};

enum hp_edge_source { HP_EDGES_MEASURED, HP_EDGES_DERIVED_EXACT, HP_EDGES_ESTIMATED };

struct hp_plan_edge {
	uint32_t from, to; /* block indices */
	double count;
	uint8_t source; /* enum hp_edge_source */
};

struct hp_plan_member {
	const struct hp_module *mod;
	const struct hp_function *fn;
	const struct hp_function *parent; /* the member that called it first (root: itself) */
	double calls;                     /* times entered */
	double *count;                    /* per block */
	struct hp_plan_edge *edges;
	size_t nedges;
	size_t exact_edges;           /* measured or derived exactly by flow conservation */
	struct hp_plan_block *blocks; /* layout order: hot chains, then cold */
	uint32_t nblocks, nhot;
	struct hp_plan_chain *chains;
	uint32_t nchains;
	uint32_t hot_bytes, cold_bytes, jt_bytes; /* original sizes */
	/* Its hot chunk's layout (HP_LAYOUT_PETTIS_HANSEN or _EXT_TSP), and the
	 * branches taken in the original layout and in the plan's: the summed
	 * counts of its edges whose target does not start where the source
	 * ends (ext_tsp.h's hp_layout_taken; the cold chunk apart from the hot). */
	enum hp_block_layout layout;
	double taken_before, taken_after;
	uint64_t new_entry, hot_addr, cold_addr;
	uint32_t new_hot_bytes, new_cold_bytes;
	char signature[17];
};

/* A function the group reaches but does not move, with the rule. */
struct hp_plan_kept {
	const struct hp_function *fn;
	const char *rule;
	char detail[160];
};

#define HP_ICALL_TARGETS 4

struct hp_plan_icall {
	const struct hp_function *fn;
	uint32_t member;
	uint32_t site; /* offset in the function */
	double count;  /* executions of its block */
	/* Its value profile (opts.icall_values), when that measured it: the
	 * site's executions and its most frequent targets, most first (names
	 * point into opts.icall_values). */
	double measured_calls;
	uint32_t ntargets;
	struct {
		const char *function;
		double count;
	} targets[HP_ICALL_TARGETS];
	/* Promoted (icall_values.c): the member whose copy it calls directly
	 * when the pointer holds that member's original entry; else NULL,
	 * and why_not says why (NULL when not measured). */
	const struct hp_function *promoted;
	const char *why_not;
	uint8_t orig_len, grow; /* the call's bytes, and what the promotion adds to them */
	uint64_t new_addr;      /* emitted: the sequence (isa.h's hp_isa_promoted) */
	uint32_t new_len;
	uint64_t slot; /* emitted: the 8 bytes holding the original entry's address */
};

/* Where hot code sits, for the I-cache figures: one range per hot block. */
struct hp_hot_piece {
	uint32_t member, block; /* block index in the function */
	uint64_t addr;
	uint32_t size;
};

struct hp_icache {
	uint32_t sets, ways, line;
	uint32_t *lines_per_set; /* distinct hot lines mapping to each set */
	uint32_t hot_lines, minimum, conflict_sets, max_per_set;
	uint64_t hot_bytes;
	struct hp_hot_piece *pieces;
	size_t npieces;
};

enum hp_reloc_kind {
	HP_RELOC_REL32 = 0,  /* a 32-bit field relative to its end */
	HP_RELOC_ABS64 = 1,  /* 8 bytes holding the address itself (a promoted call's compare slot) */
	HP_RELOC_CODE64 = 2, /* 8 bytes holding an address in the code itself (a label table's entry):
			      * it moves with the code, not with the load bias */
};

struct hp_reloc {
	uint32_t offset; /* of the field in the code */
	uint64_t target; /* absolute address it reaches */
	uint8_t kind;    /* enum hp_reloc_kind */
};

enum hp_plan_status {
	HP_PLAN_OK = 0,
	HP_PLAN_NO_COUNTS, /* no profile for the root: measurement missing */
	HP_PLAN_NOT_HOT,   /* the root did not run in the profile */
	HP_PLAN_ROOT_KEPT, /* the root itself cannot move */
	HP_PLAN_REFUSED,   /* emitted code failed verification */
};

struct hp_plan {
	enum hp_plan_status status;
	char message[512];
	/* Bottleneck check. */
	bool stall_measurable;
	double stall_ratio;
	char stall_note[200];
	struct hp_plan_opts opts;
	/* Hot sets: the count below which a block is cold (opts.cold_rate
	 * applied to the profile's work); 0: every block that ran is hot. */
	double cold_below;
	struct hp_plan_member *members;
	size_t nmembers;
	struct hp_plan_kept *kept;
	size_t nkept;
	struct hp_plan_icall *icalls;
	size_t nicalls;
	uint32_t npromoted; /* icalls promoted */
	struct hp_icache before, after;
	/* Emitted code. */
	uint64_t base;
	uint8_t *code;
	size_t code_len;
	/* Bytes of instructions at the start of code; the members' switch
	 * tables (4-byte offsets from each table, for the copies of their
	 * targets) and label tables (8-byte addresses of those copies) follow,
	 * 8-aligned, up to code_len. 0: code_len. */
	size_t text_len;
	struct hp_reloc *relocs;
	size_t nrelocs;
	uint32_t pad_bytes, added_jumps, inverted, removed_jumps;
	uint32_t key_reads;        /* jump-label sites written as reads of their keys (static_keys.h) */
	uint32_t trampoline_calls; /* static call sites written as calls of their trampolines (static_calls.h) */
	/* Unwind data for the copy (.eh_frame, unwind.c): installed at
	 * base + unwind_off with the code; NULL when no member had any. */
	uint8_t *unwind;
	size_t unwind_len, unwind_fdes;
	uint32_t unwind_off;
	bool verified;
	char verify_error[300];
	size_t verified_blocks, verified_edges, verified_insns;
	double seconds;
	const struct hp_profile *profile;
	const char *notes[8];
	int nnotes;
	char scope_note[256];
	/* Counters spliced into the copy (plan/instrument.h); NULL for a layout. */
	struct hp_instrument *instrument;
};

/* The end of the emitted instructions: where the switch tables begin. */
static inline uint64_t hp_plan_text_end(const struct hp_plan *p)
{
	return p->base + (p->text_len ? p->text_len : p->code_len);
}

/* Make plan p for root in m from profile prof (NULL: none measured yet),
 * running the passes of pass.h. With o->hot_set, root and root_mod are
 * NULL: the hottest member becomes the plan's root. Returns 0 (see p->status for not-OK
 * outcomes) or a negative errno with err filled for failures of the agent
 * itself. */
int hp_plan_make(struct hp_model *m, const struct hp_function *root, const struct hp_module *root_mod,
		 const struct hp_profile *prof, const struct hp_plan_opts *o, struct hp_plan *p, char *err,
		 size_t errlen);
void hp_plan_free(struct hp_plan *plan);

/* Why f cannot move, or NULL (the rules of "what never moves"). detail
 * gets specifics (e.g. the exception-table address). */
const char *hp_plan_kept_rule(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
			      char *detail, size_t dlen);

/* Why f's jump-label sites cannot be written as reads of their keys
 * (static_keys.c), or NULL: a site after which a status flag is live (on
 * its fallthrough or its target in f), or whose target is outside f (flags
 * there are not known). code is f's bytes as the model reads them; detail
 * gets the site. */
const char *hp_plan_key_sites_rule(struct hp_model *m, const struct hp_module *mod, const struct hp_function *f,
				   const uint8_t *code, char *detail, size_t dlen);

/* Emit and verify (emit.c, verify.c): lay the members out at plan->base. */
int hp_plan_emit(struct hp_model *m, struct hp_plan *plan, char *err, size_t errlen);
/* Decode plan->code again and check it is the members' CFGs re-laid-out;
 * false with plan->verify_error set otherwise. */
bool hp_plan_verify(struct hp_model *m, struct hp_plan *plan);

/* Unwind data (unwind.c): why f's rows cannot be reproduced for a copy
 * (NULL when they can, or when it has none); generate the copy's
 * .eh_frame after emission; check it reads back as the originals' rows. */
const char *hp_plan_unwind_rule(const struct hp_module *mod, const struct hp_function *f, char *detail, size_t dlen);
int hp_plan_unwind(struct hp_model *m, struct hp_plan *p, char *err, size_t errlen);
/* Bytes of block bl's body: the original bytes before a final direct branch
 * the layout rebuilds (unwind.c). */
uint32_t hp_plan_block_body(struct hp_model *m, const struct hp_function *f, const struct hp_block *bl);
/* A kernel copy's position map (kernel_map.c, hotpath_uapi.h's format) as the
 * plan's unwind data: which original code each byte of the copy runs as and
 * the functions' names, from which hotpath.ko gives the copy the originals'
 * ORC entries and kallsyms names. Verified by re-decoding both sides. */
int hp_plan_kernel_map(struct hp_model *m, struct hp_plan *p, char *err, size_t errlen);
bool hp_plan_verify_kernel_map(struct hp_model *m, struct hp_plan *p);
/* Move a position map's original addresses by delta (an install where the
 * members lie delta bytes from where they were planned). 0, or -EINVAL when
 * map is not a position map of len bytes. */
int hp_plan_kernel_map_rebase(uint8_t *map, size_t len, int64_t delta);
bool hp_plan_verify_unwind(struct hp_model *m, struct hp_plan *p);

/* Indirect-call promotion (icall_values.c): the promotion of f's indirect
 * call at offset off, or NULL; the bytes promotions of f's sites at
 * offsets in [from, to) add to the copy. */
const struct hp_plan_icall *hp_plan_promotion(const struct hp_plan *p, const struct hp_function *f, uint32_t off);
uint32_t hp_plan_promoted_bytes(const struct hp_plan *p, const struct hp_function *f, uint32_t from, uint32_t to);

/* Re-base the emitted code to run at new_base, where every target outside
 * the group lies bias bytes from the address the model gave it (the load
 * bias of a position-independent file modelled from disk; else 0). out
 * receives plan->code_len bytes. Returns 0, or -ERANGE (err names the
 * relocation) when a target is beyond rel32's reach. */
int hp_plan_relocate(const struct hp_plan *p, uint64_t new_base, int64_t bias, uint8_t *out, char *err, size_t errlen);

/*
 * The second pass (second_pass.c). hp_plan_remake makes the plan whose JSON
 * (as `hotpathd plan --json` writes it) is text again from its saved root,
 * options and profile, and checks the code comes out byte for byte as
 * saved: the installed layout. hp_profile_under_root maps counts measured
 * at the block starts of that plan's copy, running at installed_base
 * (records with "block" and "count" or metrics.count, as measure JSON has
 * them), back to the original blocks: a profile whose scope is the calls
 * under the root. Both return 0 or a negative errno with err filled
 * (-ESTALE: the plan cannot be made again, or an address is no block start
 * of the copy).
 */
int hp_plan_remake(struct hp_model *m, const char *text, size_t len, struct hp_profile *prof, struct hp_plan *out,
		   char *err, size_t errlen);
int hp_profile_under_root(const struct hp_plan *first, uint64_t installed_base, const char *text, size_t len,
			  struct hp_profile *out, char *err, size_t errlen);

/*
 * What an installer checks (identity.c). A code image is the emitted code
 * with its unwind data and relocations, where it was laid out; its code
 * hash (hex SHA-256 of one canonical form) is what an approval names, and
 * a plan whose code does not hash to it has been altered. A member's
 * digest is the hex SHA-256 of its original bytes when it was planned.
 */
struct hp_code_image {
	uint64_t base;
	const uint8_t *code;
	size_t code_len;
	const uint8_t *unwind;
	size_t unwind_len;
	uint32_t unwind_off;
	const struct hp_reloc *relocs;
	size_t nrelocs;
};
void hp_plan_code_image(const struct hp_plan *p, struct hp_code_image *ci);
int hp_code_hash(const struct hp_code_image *ci, char out[65]);
int hp_bytes_digest(const uint8_t *bytes, size_t len, char out[65]);
int hp_plan_member_digest(struct hp_model *m, const struct hp_function *f, char out[65]);

/*
 * The emitted code as a listing (listing.c): every instruction of the copy
 * in address order, with where it came from: an original instruction
 * (member, offset in that function), a branch the layout added, or
 * alignment padding.
 */
enum hp_listing_origin { HP_LISTING_ORIGINAL, HP_LISTING_ADDED, HP_LISTING_PADDING };
struct hp_listing_insn {
	uint64_t addr;
	uint8_t len;
	uint8_t origin;  /* enum hp_listing_origin */
	int32_t member;  /* the block's member */
	uint32_t offset; /* HP_LISTING_ORIGINAL: the original's offset in the member's function */
};
struct hp_listing {
	struct hp_listing_insn *insns;
	size_t n, cap;
};
/* 0, or a negative errno with err filled (the code does not decode as laid out). */
int hp_plan_listing(struct hp_model *m, const struct hp_plan *p, struct hp_listing *out, char *err, size_t errlen);
void hp_listing_free(struct hp_listing *l);

/* I-cache footprint of pieces for geometry g (icache.c). */
int hp_icache_compute(struct hp_icache *ic, const struct hp_cache_geometry *g);
void hp_icache_free(struct hp_icache *ic);

#endif
