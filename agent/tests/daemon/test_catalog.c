/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Catalog digests and chunks on this machine's live kernel: the digest is a
 * pure function of the parsed code (two independent parses agree, a changed
 * block changes it), and the chunks of vmlinux cover every function once, in
 * order, within the size limit, with blocks that tile each function. Also the
 * host facts that Hello carries: the build-id note parser and the CPU list.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "harness.h"
#include "daemon/catalog.h"
#include "host/hostinfo.h"
#include "model/model.h"
#include "target/target.h"
#include "hotpath/v1/agent.pb-c.h"

static struct hp_model *kernel;

static struct hp_model *open_kernel(void)
{
	char err[256] = "";
	struct hp_model *m = NULL;
	struct hp_open_opts o = { .quiet = true };
	if (hp_model_open_kernel(&o, &m, err, sizeof(err)) < 0) {
		fprintf(stderr, "cannot open the kernel model: %s\n", err);
		return NULL;
	}
	return m;
}

static void digest_is_stable_across_parses(void)
{
	REQUIRE(kernel, "kernel model did not open");
	struct hp_model *again = open_kernel();
	REQUIRE(again, "second kernel parse failed");
	char a[65], b[65];
	EXPECT(hp_catalog_digest(kernel, 0, a) == 0, "digest failed");
	EXPECT(hp_catalog_digest(again, 0, b) == 0, "digest failed");
	EXPECT(strlen(a) == 64 && strspn(a, "0123456789abcdef") == 64, "not lower-case hex: %s", a);
	EXPECT(strcmp(a, b) == 0, "two parses of one kernel gave %s and %s", a, b);
	hp_model_free(again);
}

static void digest_depends_on_content(void)
{
	REQUIRE(kernel, "kernel model did not open");
	struct hp_module *mod = &kernel->mods[0];
	REQUIRE(mod->nblocks > 0, "vmlinux has no blocks");
	char before[65], changed[65], renamed[65], after[65];
	REQUIRE(hp_catalog_digest(kernel, 0, before) == 0, "digest failed");
	mod->blocks[mod->nblocks / 2].ninsn++;
	hp_catalog_digest(kernel, 0, changed);
	mod->blocks[mod->nblocks / 2].ninsn--;
	char *name = mod->name;
	mod->name = (char *)"vmlinux-other";
	hp_catalog_digest(kernel, 0, renamed);
	mod->name = name;
	hp_catalog_digest(kernel, 0, after);
	EXPECT(strcmp(before, changed) != 0, "an instruction count change kept the digest");
	EXPECT(strcmp(before, renamed) != 0, "a module name change kept the digest");
	EXPECT(strcmp(before, after) == 0, "restoring the model did not restore the digest");
	EXPECT(hp_catalog_digest(kernel, kernel->nmods, before) == -EINVAL, "bad module index accepted");
}

static void chunks_cover_vmlinux_once(void)
{
	REQUIRE(kernel, "kernel model did not open");
	REQUIRE(hp_catalog_digest_all(kernel) == 0, "digests failed");
	const struct hp_module *mod = &kernel->mods[0];
	struct hp_catalog_iter it;
	hp_catalog_iter_init(&it, kernel, 0);
	const size_t max_bytes = 512 * 1024;
	size_t next_index = 0, nblocks = 0;
	uint32_t seq = 0;
	bool saw_last = false;
	for (;;) {
		uint8_t *buf;
		size_t len;
		uint32_t nf;
		bool last;
		int r = hp_catalog_next_chunk(&it, 1000, max_bytes, &buf, &len, &nf, &last);
		REQUIRE(r >= 0, "chunk failed: %d", r);
		if (r == 0)
			break;
		REQUIRE(!saw_last, "a chunk after the last one");
		Hotpath__V1__AgentMessage *m = hotpath__v1__agent_message__unpack(NULL, len, buf);
		free(buf);
		REQUIRE(m && m->kind_case == HOTPATH__V1__AGENT_MESSAGE__KIND_CATALOG_CHUNK, "not a catalog chunk");
		Hotpath__V1__CatalogChunk *c = m->catalog_chunk;
		EXPECT(c->seq == seq, "seq %u, expected %u", c->seq, seq);
		EXPECT(strcmp(c->digest, mod->digest) == 0, "chunk digest differs");
		EXPECT(c->n_functions == nf && nf <= 1000, "chunk of %u functions", nf);
		EXPECT(len <= max_bytes + 64 || nf == 1, "chunk %u is %zu bytes", seq, len);
		EXPECT(c->last == last, "last flag mismatch");
		for (size_t i = 0; i < c->n_functions; i++) {
			const Hotpath__V1__Function *f = c->functions[i];
			const struct hp_function *hf = &mod->funcs[next_index];
			EXPECT(f->index == next_index, "function index %u, expected %zu", f->index, next_index);
			EXPECT(f->offset == hf->addr - mod->base, "%s: offset", hf->name);
			EXPECT(strcmp(f->name, hf->name) == 0, "name %s vs %s", f->name, hf->name);
			uint32_t pos = 0;
			for (size_t b = 0; b < f->n_blocks; b++) {
				EXPECT(f->blocks[b]->offset == pos, "%s: block at %u, expected %u", f->name,
				       f->blocks[b]->offset, pos);
				pos += f->blocks[b]->size;
				for (size_t s = 0; s < f->blocks[b]->n_successors; s++) {
					const Hotpath__V1__Successor *sc = f->blocks[b]->successors[s];
					if (sc->kind == HOTPATH__V1__SUCCESSOR_KIND__SUCCESSOR_KIND_TAKEN)
						EXPECT(sc->target < f->size,
						       "%s: taken target %llu outside the function", f->name,
						       (unsigned long long)sc->target);
				}
			}
			if (!f->undecodable && f->n_blocks)
				EXPECT(pos == f->size, "%s: blocks cover %u of %u bytes", f->name, pos, f->size);
			nblocks += f->n_blocks;
			next_index++;
		}
		hotpath__v1__agent_message__free_unpacked(m, NULL);
		saw_last = last;
		seq++;
	}
	EXPECT(saw_last, "no chunk had last=true");
	EXPECT(next_index == mod->nfuncs, "chunks held %zu of %zu functions", next_index, mod->nfuncs);
	EXPECT(nblocks == hp_catalog_block_count(mod), "chunks held %zu blocks", nblocks);
	EXPECT(seq > 1, "vmlinux fit in one 512 KiB chunk; the size limit was not exercised");
}

static void build_id_note_parser(void)
{
	/* namesz=4 descsz=4 type=3 "GNU\0" de ad be ef */
	uint8_t note[] = { 4, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 0xde, 0xad, 0xbe, 0xef };
	char out[65];
	EXPECT(hp_parse_build_id_notes(note, sizeof(note), out, sizeof(out)) == 0 && strcmp(out, "deadbeef") == 0,
	       "parsed %s", out);
	EXPECT(hp_parse_build_id_notes(note, sizeof(note) - 2, out, sizeof(out)) == -ENOENT, "truncated note accepted");
	note[8] = 1;
	EXPECT(hp_parse_build_id_notes(note, sizeof(note), out, sizeof(out)) == -ENOENT, "wrong note type accepted");
	uint8_t huge[] = { 0xff, 0xff, 0xff, 0xff, 4, 0, 0, 0, 3, 0, 0, 0 };
	EXPECT(hp_parse_build_id_notes(huge, sizeof(huge), out, sizeof(out)) == -ENOENT, "oversized namesz accepted");

	struct hp_hostinfo hi;
	char err[128];
	REQUIRE(hp_hostinfo_collect(&hi, "test-host", err, sizeof(err)) == 0, "%s", err);
	EXPECT(strcmp(hi.host_id, "test-host") == 0, "host id override ignored");
	if (kernel && kernel->build_id[0])
		EXPECT(strcmp(hi.build_id, kernel->build_id) == 0, "build id %s, model has %s", hi.build_id,
		       kernel->build_id);
	EXPECT(hi.cpu_count == (uint32_t)sysconf(_SC_NPROCESSORS_ONLN), "cpu count %u", hi.cpu_count);
	EXPECT(hi.l1i.line_bytes == 64 && hi.l1i.size_bytes >= 8192, "L1i %u bytes, line %u", hi.l1i.size_bytes,
	       hi.l1i.line_bytes);
}

int main(void)
{
	kernel = open_kernel();
	RUN(digest_is_stable_across_parses);
	RUN(digest_depends_on_content);
	RUN(chunks_cover_vmlinux_once);
	RUN(build_id_note_parser);
	hp_model_free(kernel);
	TEST_EXIT();
}
