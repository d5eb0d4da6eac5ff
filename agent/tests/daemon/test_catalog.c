/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Catalog digests and chunks on this machine's live kernel: the digest is a
 * pure function of the parsed code (two independent parses agree, a changed
 * block changes it), and the chunks of vmlinux cover every function once, in
 * order, within the size limit, with blocks that tile each function. A jump
 * label the kernel flips between two parses (a tracepoint enabled through
 * tracefs) changes neither the digest nor the blocks around it. Also the
 * host facts that Hello carries: the build-id note parser and the CPU list.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
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

/* tracefs: where it is mounted, or a private mount made for the test (and
 * removed by tracefs_done), so the machine's mounts stay as they were. */
static char tfs_dir[64];
static bool tfs_private;

static const char *tracefs(void)
{
	static const char *const known[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };
	char p[128];
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		snprintf(p, sizeof(p), "%s/events", known[i]);
		if (access(p, F_OK) == 0)
			return known[i];
	}
	snprintf(tfs_dir, sizeof(tfs_dir), "/tmp/hotpath-tracefs-XXXXXX");
	if (!mkdtemp(tfs_dir))
		return NULL;
	if (mount("nodev", tfs_dir, "tracefs", 0, NULL) < 0) {
		rmdir(tfs_dir);
		return NULL;
	}
	tfs_private = true;
	return tfs_dir;
}

static void tracefs_done(void)
{
	if (tfs_private) {
		umount(tfs_dir);
		rmdir(tfs_dir);
		tfs_private = false;
	}
}

static int read_enable(const char *path)
{
	char c = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, &c, 1);
	close(fd);
	return n == 1 && (c == '0' || c == '1') ? c - '0' : -1;
}

static bool write_enable(const char *path, int v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ok = write(fd, v ? "1" : "0", 1) == 1;
	close(fd);
	return ok;
}

/* The first 5 bytes at every jump-label site of vmlinux, read live. */
static uint8_t *site_bytes(struct hp_model *m)
{
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	uint8_t *b = calloc(kf->njump_entries ? kf->njump_entries : 1, 5);
	for (size_t i = 0; b && i < kf->njump_entries; i++)
		if (hp_kernel_read_live(m, kf->jump_entries[i].code, b + 5 * i, 5) < 0)
			memset(b + 5 * i, 0, 5);
	return b;
}

static bool same_function(const struct hp_module *a, const struct hp_function *fa, const struct hp_module *b,
			  const struct hp_function *fb)
{
	if (fa->addr != fb->addr || fa->size != fb->size || fa->nblocks != fb->nblocks || fa->flags != fb->flags)
		return false;
	for (uint32_t i = 0; i < fa->nblocks; i++) {
		const struct hp_block *x = &a->blocks[fa->block_start + i], *y = &b->blocks[fb->block_start + i];
		if (x->offset != y->offset || x->size != y->size || x->ninsn != y->ninsn || x->nsucc != y->nsucc)
			return false;
		for (uint16_t s = 0; s < x->nsucc; s++) {
			const struct hp_succ *p = &a->succs[x->succ_start + s], *q = &b->succs[y->succ_start + s];
			if (p->kind != q->kind || p->target != q->target)
				return false;
		}
	}
	return true;
}

/* Enabling a tracepoint flips its static key: the kernel rewrites the NOP
 * at each of its sites into a JMP. A parse before and a parse after must
 * agree. Events are tried in turn until one flips a site (another tracer
 * may already hold a key on); each is put back as it was. */
static void digest_is_stable_across_a_jump_label_toggle(void)
{
	static const char *const events[] = { "sched/sched_switch", "sched/sched_wakeup", "sched/sched_process_fork",
					      "syscalls/sys_enter_getppid", "block/block_rq_issue" };
	REQUIRE(kernel, "kernel model did not open");
	const struct hp_kernel_facts *kf = hp_kernel_facts(kernel);
	REQUIRE(kf && kf->njump_entries > 100 && kf->nstatic_branches * 10 >= kf->njump_entries * 9,
		"jump table not used: %zu entries, %zu sites canonical", kf ? kf->njump_entries : 0,
		kf ? kf->nstatic_branches : 0);
	const char *tfs = tracefs();
	if (!tfs)
		SKIP("tracefs is not mounted and cannot be mounted: %s", strerror(errno));
	struct hp_model *before = open_kernel(), *after = NULL;
	uint8_t *b0 = before ? site_bytes(before) : NULL, *b1 = NULL;
	char path[256], ev[64] = "";
	size_t flipped = 0;
	for (size_t e = 0; b0 && e < sizeof(events) / sizeof(events[0]) && !flipped; e++) {
		snprintf(path, sizeof(path), "%s/events/%s/enable", tfs, events[e]);
		int was = read_enable(path);
		if (was < 0 || !write_enable(path, !was))
			continue;
		free(b1);
		b1 = site_bytes(before);
		for (size_t i = 0; b1 && i < kf->njump_entries; i++)
			flipped += memcmp(b0 + 5 * i, b1 + 5 * i, 5) != 0;
		if (flipped) {
			snprintf(ev, sizeof(ev), "%s", events[e]);
			after = open_kernel();
		}
		write_enable(path, was);
	}
	tracefs_done();
	if (!b0 || !before) {
		free(b0);
		hp_model_free(before);
		REQUIRE(false, "first kernel parse failed");
	}
	if (!flipped) {
		free(b0);
		free(b1);
		hp_model_free(before);
		SKIP("no tracepoint of the list could be toggled to flip a jump label (each held by another tracer?)");
	}
	EXPECT(after, "second kernel parse failed");
	const struct hp_kernel_facts *k0 = hp_kernel_facts(before), *k1 = after ? hp_kernel_facts(after) : NULL;
	char d0[65] = "", d1[65] = "";
	EXPECT(hp_catalog_digest(before, 0, d0) == 0 && after && hp_catalog_digest(after, 0, d1) == 0, "digest failed");
	const char *first = "";
	for (size_t i = 0; after && strcmp(d0, d1) && !first[0] && i < before->mods[0].nfuncs; i++)
		if (!same_function(&before->mods[0], &before->mods[0].funcs[i], &after->mods[0],
				   &after->mods[0].funcs[i]) ||
		    before->mods[0].funcs[i].ncalls != after->mods[0].funcs[i].ncalls)
			first = before->mods[0].funcs[i].name;
	EXPECT(strcmp(d0, d1) == 0,
	       "toggling %s (%zu jump-label sites flipped) changed the digest %s -> %s (first: %s)", ev, flipped, d0,
	       d1, first);
	EXPECT(k1 && k0->nstatic_branches == k1->nstatic_branches, "canonical sites differ between the parses");
	/* The functions with a flipped site: the same blocks and successors,
	 * and the site ends a block with two ways out. */
	size_t checked = 0;
	for (size_t i = 0; after && i < k0->njump_entries; i++) {
		if (!memcmp(b0 + 5 * i, b1 + 5 * i, 5))
			continue;
		uint64_t site = k0->jump_entries[i].code;
		const struct hp_module *ma, *mb;
		const struct hp_function *fa = hp_model_lookup(before, site, &ma),
					 *fb = hp_model_lookup(after, site, &mb);
		if (!fa)
			continue;
		EXPECT(fb && same_function(ma, fa, mb, fb), "%s: blocks differ across the toggle of %s", fa->name, ev);
		const struct hp_block *bl = hp_function_block_at(ma, fa, site);
		EXPECT(bl && bl->nsucc == 2 && fa->addr + bl->offset + bl->size > site &&
			       fa->addr + bl->offset + bl->size <= site + 5,
		       "%s+0x%llx: the jump-label site does not end a two-way block", fa->name,
		       (unsigned long long)(site - fa->addr));
		checked++;
	}
	EXPECT(checked > 0, "no flipped site lies in a parsed function");
	free(b0);
	free(b1);
	hp_model_free(before);
	hp_model_free(after);
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
	RUN(digest_is_stable_across_a_jump_label_toggle);
	RUN(digest_depends_on_content);
	RUN(chunks_cover_vmlinux_once);
	RUN(build_id_note_parser);
	hp_model_free(kernel);
	TEST_EXIT();
}
