/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: what an installer reads from disk. The first byte
 * picks the reader: a plan's JSON (hp_iplan_parse: accepted plans have a
 * recomputed code hash, members whose copies and blocks lie inside the
 * code, relocations inside the code; refused ones a reason and nothing
 * kept) or an undo journal (hp_journal_parse: the records read are JSON
 * objects, and written again they read back the same).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "replace/install.h"
#include "replace/journal.h"

static void fail(const char *what)
{
	fprintf(stderr, "invariant broken: %s\n", what);
	abort();
}

static void plan(const char *text, size_t len)
{
	struct hp_iplan p;
	char err[512] = "";

	if (hp_iplan_parse(text, len, &p, err, sizeof(err)) < 0) {
		if (!err[0] || p.members || p.code)
			fail("a refused plan gives no reason, or keeps parts");
		return;
	}
	if (strlen(p.computed) != 64 || !p.nmembers || !p.code_len)
		fail("an accepted plan has no hash, members or code");
	for (size_t i = 0; i < p.nrelocs; i++)
		if ((uint64_t)p.relocs[i].offset + 4 > p.code_len)
			fail("a relocation lies outside the code");
	for (size_t i = 0; i < p.nmembers; i++) {
		const struct hp_imember *m = &p.members[i];
		if (m->new_addr < p.base || m->new_addr >= p.base + p.code_len)
			fail("a member's copy lies outside the code");
		for (size_t k = 0; k < m->nblocks; k++)
			if (m->blocks[k].new_size &&
			    (m->blocks[k].new_addr < p.base ||
			     m->blocks[k].new_addr + m->blocks[k].new_size > p.base + p.code_len))
				fail("a block's copy lies outside the code");
	}
	hp_iplan_free(&p);
}

static void journal(const char *buf, size_t len)
{
	json_t *recs, *again;
	bool torn, torn2;
	size_t used = hp_journal_parse(buf, len, &recs, &torn), i;
	const json_t *r;
	char *out = NULL;
	size_t olen = 0;

	if (used > len)
		fail("the records read run past the input");
	FILE *mf = open_memstream(&out, &olen);
	json_array_foreach(recs, i, r)
	{
		if (!json_is_object(r))
			fail("a record is not an object");
		char *s = json_dumps(r, JSON_COMPACT);
		fprintf(mf, "HPJ1 %zu %08lx %s\n", strlen(s), crc32(0, (const Bytef *)s, (uInt)strlen(s)), s);
		free(s);
	}
	fclose(mf);
	hp_journal_parse(out, olen, &again, &torn2);
	if (json_array_size(again) != json_array_size(recs) || torn2)
		fail("records written again do not read back the same");
	json_decref(again);
	json_decref(recs);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	if (data[0] & 1)
		journal((const char *)data + 1, size - 1);
	else
		plan((const char *)data + 1, size - 1);
	return 0;
}
