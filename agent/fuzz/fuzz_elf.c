/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: opening an arbitrary file as an ELF program (symbols from .symtab, .dynsym or
 * .eh_frame, then every function decoded) and using the result as the CLI does. An input either
 * opens or is rejected with a message; nothing may crash, leak or read out of bounds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/model.h"
#include "target/target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	char path[64], err[512] = "";
	struct hp_model *m = NULL;
	struct hp_open_opts o = { .quiet = true };

	if (fd < 0 && (fd = memfd_create("fuzz-elf", 0)) < 0)
		abort();
	if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (hp_model_open_elf(path, &o, &m, err, sizeof(err)) < 0) {
		if (!err[0] || m)
			abort(); /* a rejection must say why and return nothing */
		return 0;
	}
	for (size_t k = 0; k < m->mods[0].nfuncs && k < 16; k++) {
		const struct hp_function *f = &m->mods[0].funcs[k];
		struct hp_insn *ins = NULL;
		if (hp_function_disassemble(m, &m->mods[0], f, &ins, err, sizeof(err)) >= 0)
			free(ins);
		hp_model_lookup(m, f->addr, NULL);
	}
	hp_model_free(m);
	return 0;
}
