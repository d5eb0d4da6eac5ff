/* SPDX-License-Identifier: Apache-2.0 */
/*
 * objdump as an independent reference disassembler for the tests: runs
 * `objdump -d` on a file and keeps each instruction's address, mnemonic,
 * direct branch target and whether it ends a basic block.
 */
#ifndef HOTPATH_TEST_OBJDUMP_H
#define HOTPATH_TEST_OBJDUMP_H

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct od_insn {
	uint64_t addr;
	char mnem[24];
	bool direct; /* direct jmp/jcc/loop with target */
	uint64_t target;
	bool transfer; /* ends a block: jumps, ret, ud2, int3, hlt */
	bool int3;
	uint64_t call_target; /* direct calls: the callee, else 0 */
};

struct od {
	struct od_insn *v;
	size_t n;
};

static const char *const prefixes[] = { "notrack", "bnd",    "rep", "repz", "repnz",  "repe", "repne",
					"lock",    "data16", "cs",  "ds",   "addr32", NULL };

static inline bool is_prefix(const char *w)
{
	for (int i = 0; prefixes[i]; i++)
		if (!strcmp(w, prefixes[i]))
			return true;
	return false;
}

/* objdump -d of path, every instruction with its class. */
static inline bool objdump_cmd(const char *cmd, struct od *od)
{
	char line[1024];
	FILE *fp;
	size_t cap = 0;

	od->v = NULL;
	od->n = 0;
	if (!(fp = popen(cmd, "r")))
		return false;
	while (fgets(line, sizeof(line), fp)) {
		char *p = line, *e, *w;
		struct od_insn in = { 0 };

		while (*p == ' ')
			p++;
		in.addr = strtoull(p, &e, 16);
		if (e == p || e[0] != ':' || e[1] != '\t')
			continue;
		p = e + 2;
		p[strcspn(p, "\n")] = 0;
		/* First word that is not a prefix is the mnemonic. */
		for (;;) {
			while (*p == ' ')
				p++;
			w = p;
			while (*p && *p != ' ')
				p++;
			size_t wl = p - w;
			char word[24];
			snprintf(word, sizeof(word), "%.*s", (int)(wl < 23 ? wl : 23), w);
			if (is_prefix(word) && *p)
				continue;
			snprintf(in.mnem, sizeof(in.mnem), "%s", word);
			break;
		}
		while (*p == ' ')
			p++;
		/* xbegin branches to its abort handler: a conditional branch. */
		bool jump = in.mnem[0] == 'j' || !strncmp(in.mnem, "loop", 4) || !strcmp(in.mnem, "xbegin");
		if (jump && isxdigit((unsigned char)*p)) {
			in.direct = true;
			in.target = strtoull(p, NULL, 16);
		}
		if (!strncmp(in.mnem, "call", 4) && isxdigit((unsigned char)*p))
			in.call_target = strtoull(p, NULL, 16);
		in.int3 = !strcmp(in.mnem, "int3");
		in.transfer = jump || !strncmp(in.mnem, "ret", 3) || !strcmp(in.mnem, "ud2") || in.int3 ||
			      !strcmp(in.mnem, "hlt");
		if (od->n == cap) {
			cap = cap ? cap * 2 : 4096;
			od->v = realloc(od->v, cap * sizeof(*od->v));
		}
		od->v[od->n++] = in;
	}
	return pclose(fp) == 0 && od->n > 0;
}

static inline size_t od_first(const struct od *od, uint64_t addr)
{
	size_t lo = 0, hi = od->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (od->v[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* objdump -d of an ELF file. */
static inline bool objdump(const char *path, struct od *od)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "objdump -d -w --no-show-raw-insn '%s'", path);
	return objdump_cmd(cmd, od);
}

/* objdump of raw x86-64 bytes in a file, as if loaded at vma. */
static inline bool objdump_raw(const char *path, uint64_t vma, struct od *od)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "objdump -D -w --no-show-raw-insn -b binary -m i386:x86-64 "
		 "--adjust-vma=0x%llx '%s'",
		 (unsigned long long)vma, path);
	return objdump_cmd(cmd, od);
}

#endif
