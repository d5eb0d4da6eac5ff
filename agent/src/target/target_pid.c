// SPDX-License-Identifier: Apache-2.0
/*
 * A running process as a code model: one module per ELF file it maps
 * executable (from /proc/PID/maps), functions at their runtime addresses
 * (symbol value + load bias), bytes read from /proc/PID/mem. The process may
 * exit at any moment; every read can fail and is handled as an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/grow.h"
#include "model/cfg.h"
#include "model/model.h"
#include "host/procmaps.h"
#include "target/target.h"
#include "target/target_elf.h"
#include "target/unwind.h"

struct mapping {
	uint64_t start, end, offset;
	char *path;
	uint8_t *bytes; /* copy of the mapping's code, used during the parse */
};

struct pidpriv {
	int pid;
	int memfd;
	struct mapping *maps;
	size_t nmaps, cap_maps;
	struct hp_byte_patch *overlay; /* original bytes under the agent's patches */
	size_t noverlay;
};

void hp_byte_patches_apply(const struct hp_byte_patch *p, size_t n, uint64_t addr, void *buf, size_t len)
{
	for (size_t i = 0; i < n; i++) {
		const struct hp_byte_patch *o = &p[i];
		for (uint8_t k = 0; k < o->len; k++)
			if (o->addr + k >= addr && o->addr + k < addr + len)
				((uint8_t *)buf)[o->addr + k - addr] = o->bytes[k];
	}
}

int hp_model_set_overlay(struct hp_model *m, const struct hp_byte_patch *p, size_t n)
{
	struct pidpriv *pp = m->priv;
	struct hp_byte_patch *c = NULL;

	if (m->kind != HP_TARGET_PID || !pp)
		return 0;
	if (n && !(c = malloc(n * sizeof(*c))))
		return -ENOMEM;
	if (n)
		memcpy(c, p, n * sizeof(*c));
	free(pp->overlay);
	pp->overlay = c;
	pp->noverlay = n;
	return 0;
}

static int pid_read(struct hp_model *m, uint64_t addr, void *buf, size_t len)
{
	struct pidpriv *pp = m->priv;
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(pp->memfd, (uint8_t *)buf + done, len - done, (off_t)(addr + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == ESRCH || errno == EIO ? -ESRCH : -errno;
		if (n == 0)
			return -ESRCH; /* the address space is gone: the process exited */
		done += n;
	}
	/* The program's own code: not the int3 of a probe attached to it (a
	 * running measurement's uprobe, or anyone else's breakpoint). */
	int r = hp_unprobe_bytes(pp->pid, addr, buf, len, NULL, 0);
	if (r == -ESRCH)
		return r;
	/* The original bytes under the agent's patches. */
	hp_byte_patches_apply(pp->overlay, pp->noverlay, addr, buf, len);
	return 0;
}

static bool in_overlay(const struct pidpriv *pp, uint64_t a)
{
	for (size_t i = 0; i < pp->noverlay; i++)
		if (a >= pp->overlay[i].addr && a < pp->overlay[i].addr + pp->overlay[i].len)
			return true;
	return false;
}

int hp_model_probe_sites(struct hp_model *m, uint64_t addr, size_t len, uint64_t *sites, size_t max)
{
	struct pidpriv *pp = m->priv;
	uint8_t *buf;
	size_t done = 0, k = 0;
	int r;

	if (m->kind != HP_TARGET_PID || !len)
		return 0;
	if (!(buf = malloc(len)))
		return -ENOMEM;
	while (done < len) {
		ssize_t n = pread(pp->memfd, buf + done, len - done, (off_t)(addr + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(buf);
			return n == 0 || errno == ESRCH || errno == EIO ? -ESRCH : -errno;
		}
		done += n;
	}
	uint64_t *all = malloc(len * sizeof(*all));
	r = all ? hp_unprobe_bytes(pp->pid, addr, buf, len, all, len) : -ENOMEM;
	free(buf);
	/* The agent's own patches (an installed copy's entry jump) are no probes. */
	for (int i = 0; i < r; i++)
		if (!in_overlay(pp, all[i]) && k < max)
			sites[k++] = all[i];
	free(all);
	return r < 0 ? r : (int)k;
}

/* Switch tables: read from the process like code. */
static int pid_data(void *ctx, uint64_t addr, void *buf, size_t len)
{
	return pid_read(ctx, addr, buf, len);
}

static void pid_free_priv(struct hp_model *m)
{
	struct pidpriv *pp = m->priv;

	for (size_t i = 0; i < m->nmods; i++) {
		hp_cfi_close(m->mods[i].cfi);
		m->mods[i].cfi = NULL;
	}
	if (!pp)
		return;
	if (pp->memfd >= 0)
		close(pp->memfd);
	for (size_t i = 0; i < pp->nmaps; i++) {
		free(pp->maps[i].path);
		free(pp->maps[i].bytes);
	}
	free(pp->maps);
	free(pp->overlay);
	free(pp);
	m->priv = NULL;
}

/* File-backed r-x mappings of pid. */
static int read_maps(struct pidpriv *pp, char *err, size_t errlen)
{
	char path[64], line[4352];
	FILE *fp;

	snprintf(path, sizeof(path), "/proc/%d/maps", pp->pid);
	if (!(fp = fopen(path, "r"))) {
		int e = errno;
		if (e == ENOENT) {
			snprintf(err, errlen, "process %d does not exist", pp->pid);
			return -ESRCH;
		}
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
		return -e;
	}
	while (fgets(line, sizeof(line), fp)) {
		unsigned long long s, e, off;
		char perms[8];
		int n = 0;

		if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &s, &e, perms, &off, &n) < 4 || !n)
			continue;
		char *file = line + n;
		file[strcspn(file, "\n")] = 0;
		if (perms[2] != 'x' || file[0] != '/')
			continue;
		if (HP_GROW(pp->maps, pp->cap_maps, pp->nmaps + 1)) {
			fclose(fp);
			return -ENOMEM;
		}
		struct mapping *v = pp->maps;
		v[pp->nmaps] = (struct mapping){ s, e, off, strdup(file), NULL };
		if (!v[pp->nmaps].path) {
			fclose(fp);
			return -ENOMEM;
		}
		pp->nmaps++;
	}
	fclose(fp);
	if (!pp->nmaps) {
		if (kill(pp->pid, 0) < 0 && errno == ESRCH) {
			snprintf(err, errlen, "process %d does not exist", pp->pid);
			return -ESRCH;
		}
		snprintf(err, errlen, "process %d has no file-backed executable mappings (a kernel thread?)", pp->pid);
		return -ENOENT;
	}
	return 0;
}

/* Open the mapped file as the process sees it (its mount namespace). */
static int open_mapped(const struct pidpriv *pp, const struct mapping *mp)
{
	char p[4200];
	int fd;

	snprintf(p, sizeof(p), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pp->pid, mp->start, mp->end);
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0)
		return fd;
	snprintf(p, sizeof(p), "/proc/%d/root%s", pp->pid, mp->path);
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0)
		return fd;
	return open(mp->path, O_RDONLY | O_CLOEXEC);
}

/* Load bias: where the PT_LOAD covering the mapped file offset landed. */
static bool load_bias(Elf *elf, const struct mapping *mp, uint64_t *bias)
{
	size_t n, i;

	if (elf_getphdrnum(elf, &n) < 0)
		return false;
	for (i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (mp->offset >= (ph.p_offset & ~0xfffULL) && mp->offset < ph.p_offset + ph.p_filesz) {
			*bias = mp->start - (ph.p_vaddr - ph.p_offset + mp->offset);
			return true;
		}
	}
	return false;
}

struct pid_bytes_ctx {
	struct pidpriv *pp;
	size_t first, count; /* the mappings of this module */
};

static const uint8_t *pid_bytes(void *ctx, const struct hp_module *mod, const struct hp_function *f, int *err)
{
	struct pid_bytes_ctx *c = ctx;

	for (size_t i = c->first; i < c->first + c->count; i++) {
		struct mapping *mp = &c->pp->maps[i];
		if (f->addr >= mp->start && f->addr + f->size <= mp->end) {
			if (!mp->bytes) {
				*err = ESRCH;
				return NULL;
			}
			return mp->bytes + (f->addr - mp->start);
		}
	}
	*err = EFAULT;
	return NULL;
}

int hp_model_open_pid(int pid, const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen)
{
	struct hp_open_opts defaults = { 0 };
	struct hp_model *m;
	struct pidpriv *pp;
	char memp[64];
	double t0 = hp_now();
	const char *only = NULL;
	size_t i, j;
	int r;

	*out = NULL;
	if (!o)
		o = &defaults;
	if (pid <= 0) {
		snprintf(err, errlen, "invalid pid %d", pid);
		return -EINVAL;
	}
	m = hp_model_new(HP_TARGET_PID);
	pp = calloc(1, sizeof(*pp));
	if (!m || !pp) {
		free(pp);
		hp_model_free(m);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pp->pid = pid;
	pp->memfd = -1;
	m->priv = pp;
	if (o->noverlay) {
		if (!(pp->overlay = malloc(o->noverlay * sizeof(*pp->overlay)))) {
			hp_model_free(m);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		memcpy(pp->overlay, o->overlay, o->noverlay * sizeof(*pp->overlay));
		pp->noverlay = o->noverlay;
	}
	m->free_priv = pid_free_priv;
	m->read = pid_read;
	snprintf(m->release, sizeof(m->release), "pid %d", pid);
	if ((r = read_maps(pp, err, errlen)) < 0) {
		if (r == -ENOMEM)
			snprintf(err, errlen, "out of memory");
		goto fail;
	}
	snprintf(memp, sizeof(memp), "/proc/%d/mem", pid);
	if ((pp->memfd = open(memp, O_RDONLY | O_CLOEXEC)) < 0) {
		r = errno == ENOENT ? -ESRCH : -errno;
		if (r == -ESRCH)
			snprintf(err, errlen, "process %d does not exist", pid);
		else
			snprintf(err, errlen,
				 "cannot open %s: %s (reading another process needs "
				 "CAP_SYS_PTRACE or the same user)",
				 memp, strerror(-r));
		goto fail;
	}

	/* One module per mapped file; its mappings are adjacent in maps. */
	for (i = 0; i < pp->nmaps; i = j) {
		struct mapping *mp = &pp->maps[i];
		struct hp_module *mod;
		char e2[256];
		int fd, er = 0;
		Elf *elf;
		uint64_t bias;

		for (j = i + 1; j < pp->nmaps && !strcmp(pp->maps[j].path, mp->path); j++)
			;
		if ((fd = open_mapped(pp, mp)) < 0)
			continue; /* deleted or unreachable file: no symbols for it */
		if (!(elf = hp_elf_begin(fd, mp->path, e2, sizeof(e2), &er))) {
			close(fd);
			continue;
		}
		char build_id[65];
		hp_elf_build_id(elf, build_id);
		if (!load_bias(elf, mp, &bias)) {
			elf_end(elf);
			close(fd);
			continue;
		}
		if (!(mod = hp_model_add_module(m, mp->path, bias))) {
			elf_end(elf);
			close(fd);
			r = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		snprintf(mod->build_id, sizeof(mod->build_id), "%s", build_id);
		for (size_t k = i; k < j; k++) {
			/* Only what is mapped executable is code of the process. */
			r = hp_elf_add_functions(m, mod, elf, mp->path, bias, pp->maps[k].start, pp->maps[k].end, e2,
						 sizeof(e2));
			if (r == -ENOMEM) {
				elf_end(elf);
				close(fd);
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
		}
		elf_end(elf);
		close(fd);
		mod->priv = (void *)(uintptr_t)(i + 1); /* first mapping, for the parse below */
		if (hp_module_normalize(m, mod) < 0) {
			r = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	if ((r = hp_model_build_index(m)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	const struct hp_module *only_mod = NULL;
	if (o->only_function) {
		const struct hp_function *f = hp_model_find(m, o->only_function, &only_mod, NULL);
		only = f ? f->name : "";
	}
	for (i = 0; i < m->nmods; i++) {
		struct hp_module *mod = &m->mods[i];
		size_t first = (uintptr_t)mod->priv - 1, cnt;

		mod->priv = NULL;
		for (cnt = 0; first + cnt < pp->nmaps && !strcmp(pp->maps[first + cnt].path, mod->name); cnt++)
			;
		if (only && mod != only_mod)
			continue;
		/* Copy the mappings' code in one read each; a process that exits
		 * now leaves its functions unreadable, not a failed parse. */
		for (size_t k = first; k < first + cnt; k++) {
			struct mapping *mp = &pp->maps[k];
			mp->bytes = malloc(mp->end - mp->start);
			if (mp->bytes && pid_read(m, mp->start, mp->bytes, mp->end - mp->start) < 0) {
				free(mp->bytes);
				mp->bytes = NULL;
			}
		}
		struct pid_bytes_ctx c = { pp, first, cnt };
		struct hp_cfg_env env = hp_elf_cfg_env(pid_data, m);
		struct hp_cfg_only one = { .name = only };
		r = hp_cfg_parse_module(mod, &env, pid_bytes, &c, o->threads, only ? &one : NULL);
		free(one.outside);
		for (size_t k = first; k < first + cnt; k++) {
			free(pp->maps[k].bytes);
			pp->maps[k].bytes = NULL;
		}
		if (r < 0) {
			snprintf(err, errlen, "parsing %s: %s", mod->name, strerror(-r));
			goto fail;
		}
		/* What the program finds by address, from its file. */
		int fd = open_mapped(pp, &pp->maps[first]);
		char e2[256];
		int er = 0;
		Elf *elf = fd >= 0 ? hp_elf_begin(fd, mod->name, e2, sizeof(e2), &er) : NULL;
		if (elf) {
			hp_elf_mark_functions(mod, elf, mod->base);
			elf_end(elf);
		}
		if (fd >= 0)
			close(fd);
		fd = open_mapped(pp, &pp->maps[first]);
		mod->cfi = fd >= 0 ? hp_cfi_open_fd(fd) : NULL;
		mod->cfi_bias = mod->base;
	}
	if (kill(pid, 0) < 0 && errno == ESRCH) {
		r = -ESRCH;
		snprintf(err, errlen, "process %d exited while it was being read", pid);
		goto fail;
	}
	m->parse_seconds = hp_now() - t0;
	if (!o->quiet) {
		struct hp_model_stats st;

		hp_model_stats(m, &st);
		fprintf(stderr, "parsed %zu functions (%zu blocks) in %zu modules of process %d in %.3f s\n",
			st.functions, st.blocks, m->nmods, pid, m->parse_seconds);
	}
	*out = m;
	return 0;
fail:
	hp_model_free(m);
	return r;
}
