// SPDX-License-Identifier: Apache-2.0
/*
 * Call-frame rows through libdw (see unwind.h). A plan's generated
 * .eh_frame is read back the same way as a program's: it is wrapped in a
 * minimal ELF image in memory (a header, the .eh_frame section at the
 * address the code runs at, the section-name table), which libelf opens
 * with elf_memory, so the check of moved code's unwind rows uses the same
 * reader and the same x86-64 defaults as the original's.
 */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target/unwind.h"

struct hp_cfi {
	int fd;
	Elf *elf;
	Dwarf_CFI *cfi;
	uint8_t *image; /* the in-memory ELF of a blob */
};

struct hp_cfi *hp_cfi_open_fd(int fd)
{
	struct hp_cfi *c = calloc(1, sizeof(*c));

	elf_version(EV_CURRENT);
	if (!c || !(c->elf = elf_begin(fd, ELF_C_READ_MMAP, NULL)) || !(c->cfi = dwarf_getcfi_elf(c->elf))) {
		if (c && c->elf)
			elf_end(c->elf);
		free(c);
		close(fd);
		return NULL;
	}
	c->fd = fd;
	return c;
}

struct hp_cfi *hp_cfi_open_blob(uint64_t addr, const uint8_t *eh_frame, size_t len)
{
	static const char names[] = "\0.eh_frame\0.shstrtab";
	size_t data = sizeof(Elf64_Ehdr), strs = data + len, shdrs = (strs + sizeof(names) + 7) & ~(size_t)7;
	size_t total = shdrs + 3 * sizeof(Elf64_Shdr);
	struct hp_cfi *c = calloc(1, sizeof(*c));

	if (!c || !(c->image = calloc(1, total))) {
		free(c);
		return NULL;
	}
	c->fd = -1;
	Elf64_Ehdr *eh = (Elf64_Ehdr *)c->image;
	memcpy(eh->e_ident, ELFMAG, SELFMAG);
	eh->e_ident[EI_CLASS] = ELFCLASS64;
	eh->e_ident[EI_DATA] = ELFDATA2LSB;
	eh->e_ident[EI_VERSION] = EV_CURRENT;
	eh->e_type = ET_DYN;
	eh->e_machine = EM_X86_64;
	eh->e_version = EV_CURRENT;
	eh->e_ehsize = sizeof(Elf64_Ehdr);
	eh->e_shoff = shdrs;
	eh->e_shentsize = sizeof(Elf64_Shdr);
	eh->e_shnum = 3;
	eh->e_shstrndx = 2;
	memcpy(c->image + data, eh_frame, len);
	memcpy(c->image + strs, names, sizeof(names));
	Elf64_Shdr *sh = (Elf64_Shdr *)(c->image + shdrs);
	sh[1] = (Elf64_Shdr){ .sh_name = 1,
			      .sh_type = SHT_PROGBITS,
			      .sh_flags = SHF_ALLOC,
			      .sh_addr = addr,
			      .sh_offset = data,
			      .sh_size = len,
			      .sh_addralign = 8 };
	sh[2] = (Elf64_Shdr){
		.sh_name = 11, .sh_type = SHT_STRTAB, .sh_offset = strs, .sh_size = sizeof(names), .sh_addralign = 1
	};
	elf_version(EV_CURRENT);
	if (!(c->elf = elf_memory((char *)c->image, total)) || !(c->cfi = dwarf_getcfi_elf(c->elf))) {
		hp_cfi_close(c);
		return NULL;
	}
	return c;
}

void hp_cfi_close(struct hp_cfi *c)
{
	if (!c)
		return;
	if (c->cfi)
		dwarf_cfi_end(c->cfi);
	if (c->elf)
		elf_end(c->elf);
	if (c->fd >= 0)
		close(c->fd);
	free(c->image);
	free(c);
}

static int copy_ops(const Dwarf_Op *ops, size_t n, struct hp_cfi_op *out, uint8_t *nout)
{
	if (n > 3)
		return -EOPNOTSUPP;
	for (size_t i = 0; i < n; i++)
		out[i] = (struct hp_cfi_op){ ops[i].atom, ops[i].number, ops[i].number2 };
	*nout = (uint8_t)n;
	return 0;
}

int hp_cfi_row(struct hp_cfi *c, uint64_t addr, struct hp_cfi_row *row)
{
	Dwarf_Frame *f = NULL;
	Dwarf_Addr start, end;
	Dwarf_Op *ops;
	size_t n;
	bool sig;
	int r = -EOPNOTSUPP;

	memset(row, 0, sizeof(*row));
	if (!c || dwarf_cfi_addrframe(c->cfi, addr, &f) != 0)
		return -ENOENT;
	if (dwarf_frame_info(f, &start, &end, &sig) < 0 || dwarf_frame_cfa(f, &ops, &n) != 0 ||
	    copy_ops(ops, n, row->cfa, &row->ncfa) < 0)
		goto out;
	row->start = start;
	row->end = end;
	for (int k = 0; k < HP_CFI_REGS; k++) {
		Dwarf_Op mem[3];
		struct hp_cfi_rule *rule = &row->reg[k];
		if (dwarf_frame_register(f, k, mem, &ops, &n) != 0)
			goto out;
		if (n == 0)
			rule->kind = ops ? HP_CFI_UNDEFINED : HP_CFI_SAME;
		else if (copy_ops(ops, n, rule->op, &rule->nops) < 0)
			goto out;
		else
			rule->kind = HP_CFI_EXPR;
	}
	r = 0;
out:
	free(f);
	return r;
}

static bool same_ops(const struct hp_cfi_op *a, const struct hp_cfi_op *b, uint8_t n)
{
	for (uint8_t i = 0; i < n; i++)
		if (a[i].atom != b[i].atom || a[i].number != b[i].number || a[i].number2 != b[i].number2)
			return false;
	return true;
}

bool hp_cfi_same(const struct hp_cfi_row *a, const struct hp_cfi_row *b)
{
	if (a->ncfa != b->ncfa || !same_ops(a->cfa, b->cfa, a->ncfa))
		return false;
	for (int k = 0; k < HP_CFI_REGS; k++)
		if (a->reg[k].kind != b->reg[k].kind || a->reg[k].nops != b->reg[k].nops ||
		    !same_ops(a->reg[k].op, b->reg[k].op, a->reg[k].nops))
			return false;
	return true;
}
