/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The live kernel's symbols as functions. /proc/kallsyms names every text
 * symbol of vmlinux and of each loaded module, but gives no sizes: a function
 * ends where the next text symbol starts. What ends the last function of a
 * module is less obvious (see kallsyms.c), and the memory the module loader
 * leaves between and after a module's sections is fill, not code. Split from
 * target_kernel.c, which reads the bytes, so that both rules can be tested on
 * a recorded kallsyms of a kernel with modules.
 */
#ifndef HOTPATH_KALLSYMS_H
#define HOTPATH_KALLSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "target/target.h"

/* One text symbol. */
struct hp_ksym {
	uint64_t addr;
	const char *name; /* in the model's pool; NULL for boundaries */
	uint32_t mod;     /* 0 = vmlinux, else index into modnames + 1 */
	uint8_t global;
	uint8_t boundary; /* ends the previous function but is not one itself (__pfx_, __cfi_) */
	uint8_t label;    /* section marker such as _stext: never preferred as a name */
	uint8_t generic;  /* a module's init_module/cleanup_module alias: any other name wins */
};

/* A module's non-text symbol (rodata, data, bss) or section start: no function
 * runs across it. */
struct hp_kdata {
	uint32_t mod;
	uint64_t addr;
};

/* A static call's key (__SCK__name, data) or trampoline (__SCT__name, text):
 * its module, address and the name after the prefix. */
struct hp_ksc_sym {
	uint32_t mod;
	uint64_t addr;
	char *name;
};

/* A static call's key and the trampoline of the same name. */
struct hp_static_call_tramp {
	uint64_t key, tramp;
};

struct hp_kallsyms {
	struct hp_ksym *syms; /* sorted by (mod, addr) after hp_kallsyms_read */
	size_t n, cap;
	char **modnames;
	size_t nmods, capmods;
	struct hp_kdata *data; /* modules only, sorted by (mod, addr) */
	size_t ndata, capdata;
	uint64_t text, etext; /* vmlinux's _text and _etext */
	uint64_t *ret_thunks, *ind_thunks;
	size_t nret, nind, capret, capind;
	/* vmlinux markers of tables and text sections (enum hp_kernel_marker), 0 where absent */
	uint64_t markers[HP_KMARK_COUNT];
	/* Static call keys and trampolines, vmlinux's and the modules' (keys
	 * are data: listed only with CONFIG_KALLSYMS_ALL). */
	struct hp_ksc_sym *sc_keys, *sc_tramps;
	size_t nsc_keys, nsc_tramps, cap_sc_keys, cap_sc_tramps;
};

/* The stdio buffer to read /proc/kallsyms with: stdio's default for a /proc
 * file is 1 KiB, a read() each (~4,000 for 100,000 symbols). */
#define HP_KALLSYMS_BUF (256 * 1024)

/* Parse a /proc/kallsyms stream. Returns 0, or a negative errno with a reason
 * in err (no real addresses: kptr_restrict or missing privilege). */
int hp_kallsyms_read(struct hp_model *m, FILE *fp, struct hp_kallsyms *ks, char *err, size_t errlen);

/* Add the start of every section of every module in ks, read from
 * DIR/NAME/sections/ (/sys/module; the addresses need root), as boundaries no
 * function runs across. Returns how many modules had readable sections, or
 * -ENOMEM. */
int hp_kallsyms_read_sections(struct hp_kallsyms *ks, const char *dir);

/* Add vmlinux ([_text, _etext)) and then one module per [name] tag to m, each
 * with its functions. A module function ends at the next text symbol, section
 * start or non-text symbol of its module; the last one at most a page on, and
 * it is flagged HP_FN_SIZE_ESTIMATED. */
int hp_kallsyms_build(struct hp_model *m, const struct hp_kallsyms *ks, char *err, size_t errlen);

/*
 * Each static call key paired with its trampoline by name: __SCK__X and
 * __SCT__X of the same module (or both of vmlinux), as DEFINE_STATIC_CALL
 * names them; the key's struct holds the function it is set to but not its
 * trampoline, so the name is the link. Sorted by key, one per key; keys
 * without a trampoline of their name, or whose trampoline name is listed at
 * two addresses, are left out. Returns the count and a
 * malloc'd array in *out (NULL when empty), or -ENOMEM.
 */
long hp_kallsyms_static_call_tramps(const struct hp_kallsyms *ks, struct hp_static_call_tramp **out);

void hp_kallsyms_free(struct hp_kallsyms *ks);

/*
 * The size of a module function without the loader's fill at its end. The
 * module loader zeroes a module's memory, so the bytes between one section's
 * last function and the next section (and after the last section) are zeros,
 * which decode as "add [rax], al". Trailing zero bytes are cut back to the
 * first instruction boundary of the linear sweep at or after where they start,
 * so an instruction whose own bytes end in zeros (a call or jump displacement)
 * is kept whole. With int3_fill, trailing int3 bytes count as fill too (for a
 * last function, whose end is only estimated). Returns size when nothing is
 * fill, or when the bytes are all fill.
 */
uint32_t hp_ktext_trim_fill(const uint8_t *code, uint32_t size, uint64_t addr, bool int3_fill);

#endif
