// SPDX-License-Identifier: Apache-2.0
/*
 * Code a program finds by address, read from its ELF file, for the rules of
 * what never moves:
 *  - code addresses stored in data: for a position-independent object its
 *    dynamic relocations (R_X86_64_RELATIVE and IRELATIVE addends,
 *    R_X86_64_64 and GLOB_DAT against defined functions), which cover every
 *    pointer in .data, .data.rel.ro, .init_array and the rest; for a
 *    fixed-address executable, which has no such relocations, every aligned
 *    8-byte word of its allocated data sections that falls on code. A
 *    function's entry stored there is address-taken; an address inside it
 *    (a label table, a resume address) is code found by address, except
 *    in the tables the CFG builder resolved (switch and label tables: the
 *    plan rewrites those for the copy).
 *  - exception landing pads: a function whose .eh_frame FDE has an LSDA.
 * The findings become flags of the module's functions (sorted by address).
 */
#include <errno.h>
#include <string.h>

#include "target/eh_frame.h"
#include "target/target_elf.h"

struct marker {
	struct hp_module *mod;
	uint64_t bias;
	const struct hp_jump_table *tables; /* switch tables: read by code, not pointers */
	size_t ntables;
};

static struct hp_function *func_at(struct hp_module *mod, uint64_t a)
{
	size_t lo = 0, hi = mod->nfuncs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (mod->funcs[mid].addr + mod->funcs[mid].size <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < mod->nfuncs && mod->funcs[lo].addr <= a ? &mod->funcs[lo] : NULL;
}

/* A code address (file address a) found in data. */
static void code_ref(struct marker *k, uint64_t a)
{
	struct hp_function *f = func_at(k->mod, a + k->bias);

	if (f)
		f->flags |= f->addr == a + k->bias ? HP_FN_ADDR_TAKEN : HP_FN_INNER_REF;
}

static int mark_fde(void *ctx, const struct hp_eh_fde *fde)
{
	struct marker *k = ctx;
	struct hp_function *f = func_at(k->mod, fde->start + k->bias);

	if (f && fde->lsda)
		f->flags |= HP_FN_LSDA;
	return 0;
}

static bool in_table(const struct marker *k, uint64_t a)
{
	for (size_t i = 0; i < k->ntables; i++)
		if (a >= k->tables[i].table_addr &&
		    a < k->tables[i].table_addr + (uint64_t)k->tables[i].nentries * k->tables[i].entry_size)
			return true;
	return false;
}

static void from_relocations(struct marker *k, Elf *elf)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d, *symd = NULL;
		Elf_Scn *syms;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !(sh.sh_flags & SHF_ALLOC) || !sh.sh_entsize ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		if (sh.sh_link && (syms = elf_getscn(elf, sh.sh_link)))
			symd = elf_getdata(syms, NULL);
		for (size_t i = 0; i < d->d_size / sh.sh_entsize; i++) {
			GElf_Rela r;
			GElf_Sym s;
			if (!gelf_getrela(d, (int)i, &r))
				continue;
			switch (GELF_R_TYPE(r.r_info)) {
			case R_X86_64_RELATIVE:
			case R_X86_64_IRELATIVE:
				if (!in_table(k, r.r_offset + k->bias)) /* a resolved label table's entry */
					code_ref(k, (uint64_t)r.r_addend);
				break;
			case R_X86_64_64:
			case R_X86_64_GLOB_DAT:
				if (symd && gelf_getsym(symd, (int)GELF_R_SYM(r.r_info), &s) &&
				    GELF_ST_TYPE(s.st_info) == STT_FUNC && s.st_shndx != SHN_UNDEF)
					code_ref(k, s.st_value + (uint64_t)r.r_addend);
				break;
			default:
				break;
			}
		}
	}
}

/* A fixed-address executable: aligned words of its data that land on code. */
static void from_data_words(struct marker *k, Elf *elf)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC) || (sh.sh_flags & SHF_EXECINSTR) ||
		    (sh.sh_type != SHT_PROGBITS && sh.sh_type != SHT_INIT_ARRAY && sh.sh_type != SHT_FINI_ARRAY &&
		     sh.sh_type != SHT_PREINIT_ARRAY) ||
		    !(d = elf_getdata(scn, NULL)) || !d->d_buf || d->d_size < sh.sh_size)
			continue;
		for (uint64_t off = (8 - sh.sh_addr % 8) % 8; off + 8 <= sh.sh_size; off += 8) {
			uint64_t w;
			memcpy(&w, (const uint8_t *)d->d_buf + off, 8);
			if (w && !in_table(k, sh.sh_addr + off + k->bias))
				code_ref(k, w);
		}
	}
}

void hp_elf_mark_functions(struct hp_module *mod, Elf *elf, uint64_t bias)
{
	struct marker k = { mod, bias, mod->jtables, mod->njtables };
	GElf_Ehdr eh;

	if (!gelf_getehdr(elf, &eh))
		return;
	if (eh.e_type == ET_EXEC)
		from_data_words(&k, elf);
	else
		from_relocations(&k, elf);
	hp_eh_frame_walk(elf, mark_fde, &k);
}
