/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Jump labels (static keys): sites the kernel rewrites at run time between a
 * NOP and a JMP of the same length (2 or 5 bytes) when a static key flips,
 * e.g. when a tracepoint is enabled. The kernel lists them in its jump table
 * (__start___jump_table .. __stop___jump_table). Before a copy of the text is
 * decoded, every site is put in one canonical form, the JMP to its target,
 * whatever its current state, so the code model does not depend on which
 * keys are on; the CFG then models each site as a two-way branch.
 * Split from target_kernel.c, which reads the memory, so the table parser
 * and the rewrite can be tested and fuzzed on given bytes.
 */
#ifndef HOTPATH_STATIC_BRANCH_H
#define HOTPATH_STATIC_BRANCH_H

#include <stddef.h>
#include <stdint.h>

/* x86-64 with CONFIG_HAVE_ARCH_JUMP_LABEL_RELATIVE (include/linux/jump_label.h):
 * struct jump_entry { s32 code; s32 target; long key; }, code relative to the
 * entry's address, target to its own field's (entry + 4), key to its field's
 * with flags in the low two bits (branch default, init text). */
#define HP_JUMP_ENTRY_SIZE 16

struct hp_static_branch {
	uint64_t code;   /* the site */
	uint64_t target; /* where the JMP form goes */
	uint64_t key;    /* the struct static_key, flags cleared */
	uint8_t branch;  /* the entry's branch bit: the site is the JMP when
			  * (the key's enabled count != 0) != branch */
};

/* Decode the jump table at table_addr (len bytes, a multiple of the entry
 * size) and keep the entries whose site lies in [lo, hi): sorted by site,
 * one per site. Returns the count (>= 0) and a malloc'd array in *out, or
 * -EINVAL (length not a multiple of the entry size) or -ENOMEM. */
long hp_jump_table_parse(const uint8_t *tab, size_t len, uint64_t table_addr, uint64_t lo, uint64_t hi,
			 struct hp_static_branch **out);

/* How many bytes at the start of tab (len bytes at table_addr) are whole
 * entries whose site and target both lie in [lo, hi): a module's table,
 * whose start sysfs gives but not its end, ends at the first entry that is
 * not one of its own (padding, the next section). */
size_t hp_jump_table_own_prefix(const uint8_t *tab, size_t len, uint64_t table_addr, uint64_t lo, uint64_t hi);

/* What hp_static_branch_canonicalize did. */
struct hp_static_branch_stats {
	size_t rewritten; /* sites put in their JMP form (whether or not they were already) */
	size_t were_nop;  /* ... of which were NOPs (key in its default state) */
	size_t foreign;   /* sites whose bytes were neither the NOP nor the JMP to the target */
	size_t mid_patch; /* ... rewritten sites the kernel was patching (0xcc first: text_poke_bp) */
};

/* Rewrite, in buf (a copy of [lo, lo + len)), every site of v[0, n) that
 * lies wholly inside it to the JMP to its target of the site's current length:
 * "e9 rel32" for a 5-byte site, "eb rel8" for a 2-byte one. A site is
 * rewritten only if its bytes decode as a NOP or as a JMP to the entry's
 * target of length 2 or 5; the others are left alone and counted as foreign.
 * The addresses of the rewritten sites are appended to sites (room for n),
 * ascending; their count is returned. */
size_t hp_static_branch_canonicalize(uint8_t *buf, uint64_t lo, size_t len, const struct hp_static_branch *v, size_t n,
				     uint64_t *sites, struct hp_static_branch_stats *st);

/*
 * Static calls: call sites (and tail-call sites) the kernel rewrites to call
 * whatever function the static call is set to, a NOP when it is unset, or
 * "xor eax, eax" when it returns 0; and each static call's trampoline
 * (__SCT__name), whose jump the kernel rewrites likewise (or to a ret).
 * The table (__start_static_call_sites .. __stop_static_call_sites) has
 * struct static_call_site { s32 addr; s32 key; }, both relative to their
 * fields, the key's low bits flags (1: tail call, 2: init text).
 */
#define HP_STATIC_CALL_SITE_SIZE 8

struct hp_static_call {
	uint64_t code;      /* the 5-byte site */
	uint8_t tail;       /* a tail call (a jump), or a trampoline */
	uint8_t trampoline; /* the first instruction of a trampoline (__SCT__name), not a call site */
	uint64_t key;       /* the site's struct static_call_key, flags cleared; 0 for a trampoline */
	uint64_t tramp;     /* the static call's trampoline, which a copy of the site calls; 0 when not known */
};

/* Decode the static call site table like hp_jump_table_parse (each entry's
 * key kept; its trampoline is found later, by name). */
long hp_static_call_parse(const uint8_t *tab, size_t len, uint64_t table_addr, uint64_t lo, uint64_t hi,
			  struct hp_static_call **out);

/* How many bytes at the start of tab (len bytes at table_addr) are whole
 * static call site entries whose site lies in [lo, hi) and whose key does
 * not (a key is data): a module's .static_call_sites, whose start sysfs
 * gives but not its end, ends at the first entry that is not one of its own
 * (padding, the next section). */
size_t hp_static_call_own_prefix(const uint8_t *tab, size_t len, uint64_t table_addr, uint64_t lo, uint64_t hi);

/* Rewrite, in buf (a copy of [lo, lo + len)), every site of v[0, n) (sorted
 * by code) that lies wholly inside it to one canonical form whatever the
 * static call is set to: "e8 00 00 00 00" for a call, "e9 00 00 00 00" for a
 * tail call or trampoline (a direct branch to the next byte, which the CFG,
 * told the site, models as an indirect call or jump). A site is rewritten
 * only if its 5 bytes are one of the kernel's forms (call or jmp rel32, a
 * 5-byte NOP, "xor eax, eax" with prefixes, ret and int3s); else it is left
 * alone and counted as foreign. Rewritten sites are appended to sites (room
 * for n), ascending; their count is returned. */
size_t hp_static_call_canonicalize(uint8_t *buf, uint64_t lo, size_t len, const struct hp_static_call *v, size_t n,
				   uint64_t *sites, struct hp_static_branch_stats *st);

/* The index of the first of n site entries sorted by site (struct
 * hp_static_branch or hp_static_call: stride bytes apart, each starting
 * with its site's address) whose site is >= addr; n when none is. */
size_t hp_sites_from(const void *entries, size_t n, size_t stride, uint64_t addr);

#endif
