/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the input's first half read as a jump table and as a
 * static call site table, its second half as the text they point into, and
 * every site put in its canonical form. Checks what the CFG relies on: the
 * parsed sites are sorted, unique and inside the range asked for; a rewrite
 * touches only the sites it reports, keeps each site's length, and a second
 * pass is a fixed point (the same bytes, nothing left that was not a JMP).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target/static_branch.h"

static void broken(const char *what)
{
	fprintf(stderr, "invariant broken: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint64_t table = 0xffffffff82000000ull, lo = 0xffffffff81ff0000ull;
	size_t half = size / 2, tlen = size - half;
	uint8_t *text = malloc(tlen ? tlen : 1), *again = malloc(tlen ? tlen : 1);
	struct hp_static_branch *jv = NULL;
	struct hp_static_call *cv = NULL;
	struct hp_static_branch_stats st, st2;

	if (!text || !again)
		abort();
	long nj = hp_jump_table_parse(data, half - half % HP_JUMP_ENTRY_SIZE, table, lo, lo + tlen, &jv);
	long nc = hp_static_call_parse(data, half - half % HP_STATIC_CALL_SITE_SIZE, table, lo, lo + tlen, &cv);
	if (nj < 0 || nc < 0)
		broken("a whole-entry table was refused");
	/* A module's table ends at its first entry not its own: a prefix of
	 * whole entries, each inside the text, the next (if any) not. */
	size_t own = hp_jump_table_own_prefix(data, half, table, lo, lo + tlen);
	if (own % HP_JUMP_ENTRY_SIZE || own > half)
		broken("the own prefix is not whole entries of the table");
	struct hp_static_branch *ov = NULL;
	long no = hp_jump_table_parse(data, own, table, lo, lo + tlen, &ov);
	if (no < 0 || (size_t)no > own / HP_JUMP_ENTRY_SIZE || (own && no == 0))
		broken("the own prefix's entries are not all in the text");
	for (long i = 0; i < no; i++)
		if (ov[i].target < lo || ov[i].target >= lo + tlen)
			broken("an own entry's target is outside the text");
	free(ov);
	/* Likewise a module's static call site table: each own site inside the
	 * text, each own key outside it. */
	size_t cown = hp_static_call_own_prefix(data, half, table, lo, lo + tlen);
	if (cown % HP_STATIC_CALL_SITE_SIZE || cown > half)
		broken("the static call own prefix is not whole entries of the table");
	struct hp_static_call *oc = NULL;
	long noc = hp_static_call_parse(data, cown, table, lo, lo + tlen, &oc);
	if (noc < 0 || (size_t)noc > cown / HP_STATIC_CALL_SITE_SIZE || (cown && noc == 0))
		broken("the static call own prefix's sites are not all in the text");
	for (long i = 0; i < noc; i++)
		if ((oc[i].key >= lo && oc[i].key < lo + tlen) || oc[i].key & 3 || oc[i].trampoline || oc[i].tramp)
			broken("an own static call entry's key is in the text, has flags, or the entry is more than a site");
	free(oc);
	for (long i = 0; i < nj; i++)
		if (jv[i].code < lo || jv[i].code >= lo + tlen || (i && jv[i].code <= jv[i - 1].code))
			broken("jump-label sites unsorted, repeated or out of range");
	for (long i = 0; i < nc; i++)
		if (cv[i].code < lo || cv[i].code >= lo + tlen || (i && cv[i].code <= cv[i - 1].code) || cv[i].tail > 1)
			broken("static call sites unsorted, repeated or out of range");

	uint64_t *sites = malloc(((size_t)nj + (size_t)nc + 1) * sizeof(uint64_t));
	if (!sites)
		abort();
	memcpy(text, data + half, tlen);
	size_t ns = hp_static_branch_canonicalize(text, lo, tlen, jv, (size_t)nj, sites, &st);
	if (ns != st.rewritten || ns + st.foreign > (size_t)nj)
		broken("jump-label counts disagree");
	/* Only the reported sites changed, each within 5 bytes. */
	for (size_t b = 0, k = 0; b < tlen; b++) {
		while (k < ns && sites[k] + 5 <= lo + b)
			k++;
		if (text[b] != data[half + b] && !(k < ns && sites[k] <= lo + b))
			broken("a byte outside every rewritten site changed");
	}
	for (size_t k = 0; k < ns; k++) {
		const uint8_t *p = text + (sites[k] - lo);
		if (p[0] != 0xe9 && p[0] != 0xeb)
			broken("a rewritten jump-label site is not a JMP");
	}
	memcpy(again, text, tlen);
	hp_static_branch_canonicalize(again, lo, tlen, jv, (size_t)nj, sites, &st2);
	if (memcmp(again, text, tlen) || st2.were_nop || st2.rewritten != st.rewritten)
		broken("the jump-label form is not a fixed point");

	/* Static calls, on the original bytes. */
	memcpy(text, data + half, tlen);
	ns = hp_static_call_canonicalize(text, lo, tlen, cv, (size_t)nc, sites, &st);
	if (ns != st.rewritten)
		broken("static call counts disagree");
	for (size_t k = 0; k < ns; k++) {
		const uint8_t *p = text + (sites[k] - lo);
		if ((p[0] != 0xe8 && p[0] != 0xe9) || p[1] || p[2] || p[3] || p[4])
			broken("a rewritten static call site is not call/jmp +0");
	}
	memcpy(again, text, tlen);
	hp_static_call_canonicalize(again, lo, tlen, cv, (size_t)nc, sites, &st2);
	if (memcmp(again, text, tlen) || st2.were_nop || st2.rewritten != st.rewritten)
		broken("the static call form is not a fixed point");
	free(sites);
	free(jv);
	free(cv);
	free(text);
	free(again);
	return 0;
}
