/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ELF helpers shared by the ELF-file and process targets: checking a file is
 * x86-64 ELF, reading its function symbols (symtab, dynsym, or .eh_frame
 * ranges as a last resort) and its GNU build id.
 */
#ifndef HOTPATH_TARGET_ELF_H
#define HOTPATH_TARGET_ELF_H

#include <gelf.h>
#include <libelf.h>

#include "model/cfg.h"
#include "model/model.h"

/* Open fd as ELF for reading; checks it is a complete-enough x86-64 ELF.
 * Returns the handle or NULL with err filled (and *errn a negative errno). */
Elf *hp_elf_begin(int fd, const char *path, char *err, size_t errlen, int *errn);

/* Add the functions of elf to mod, shifted by bias (0 for a file, the load
 * bias for a mapped object); keeps only functions inside [lo, hi) if hi > lo.
 * Returns the number added (>= 0) or a negative errno with err filled. */
int hp_elf_add_functions(struct hp_model *m, struct hp_module *mod, Elf *elf, const char *path, uint64_t bias,
			 uint64_t lo, uint64_t hi, char *err, size_t errlen);

/* The CFG semantics of user code: the C library's functions that never
 * return, traps that really trap, switch tables read with read_data. */
struct hp_cfg_env hp_elf_cfg_env(hp_data_fn read_data, void *ctx);

/* Mark mod's functions (sorted, parsed) that the program finds by address,
 * from elf loaded at bias: HP_FN_ADDR_TAKEN, HP_FN_INNER_REF and HP_FN_LSDA
 * (elf_refs.c). */
void hp_elf_mark_functions(struct hp_module *mod, Elf *elf, uint64_t bias);

/* Hex GNU build id of elf into out (65 bytes), "" if none. */
void hp_elf_build_id(Elf *elf, char *out);

#endif
