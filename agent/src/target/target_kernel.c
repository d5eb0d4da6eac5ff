// SPDX-License-Identifier: Apache-2.0
/*
 * The live kernel as a code model. Functions and modules come from
 * /proc/kallsyms (which has no sizes: a function ends where the next text
 * symbol starts); text bytes come through a BPF_PROG_TYPE_SYSCALL program that
 * bpf_probe_read_kernel's a chunk per BPF_PROG_TEST_RUN into its .bss, so
 * neither /proc/kcore nor kprobes are needed. The whole text is read once in
 * chunks, then every function is decoded in parallel from that copy.
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "model/cfg.h"
#include "host/hostinfo.h"
#include "target/kallsyms.h"
#include "target/ktext.h"
#include "ktext.skel.h"
#include "model/model.h"
#include "target/target.h"

struct kpriv {
	struct ktext_bpf *skel;
	int prog_fd;
	pthread_mutex_t lock;
	/* Text copies used during the parse, one per module. */
	struct ktext_copy {
		uint64_t lo, hi;
		uint8_t *buf;
	} * copies;
};

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

/* Copy len (<= KTEXT_CHUNK) bytes of kernel memory at addr into dst. */
static int bpf_read_chunk(struct kpriv *kp, uint64_t addr, void *dst, size_t len)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	int r;

	kp->skel->bss->src_addr = addr;
	kp->skel->bss->src_len = len;
	kp->skel->bss->read_ret = -EIO;
	r = bpf_prog_test_run_opts(kp->prog_fd, &opts);
	if (r < 0)
		return errno ? -errno : -EIO;
	if (kp->skel->bss->read_ret < 0)
		return (int)kp->skel->bss->read_ret;
	memcpy(dst, kp->skel->bss->buf, len);
	return 0;
}

static int kernel_read_raw(struct kpriv *kp, uint64_t addr, void *buf, size_t len)
{
	uint8_t *dst = buf;
	int r;

	while (len) {
		size_t n = len > KTEXT_CHUNK ? KTEXT_CHUNK : len;

		if ((r = bpf_read_chunk(kp, addr, dst, n)) < 0)
			return r;
		addr += n;
		dst += n;
		len -= n;
	}
	return 0;
}

/* The model's reader: one .bss buffer, so one reader at a time. */
static int kernel_read(struct hp_model *m, uint64_t addr, void *buf, size_t len)
{
	struct kpriv *kp = m->priv;
	int r;

	pthread_mutex_lock(&kp->lock);
	r = kernel_read_raw(kp, addr, buf, len);
	pthread_mutex_unlock(&kp->lock);
	return r;
}

static void kernel_free_priv(struct hp_model *m)
{
	struct kpriv *kp = m->priv;

	if (!kp)
		return;
	ktext_bpf__destroy(kp->skel);
	pthread_mutex_destroy(&kp->lock);
	free(kp->copies);
	free(kp);
	m->priv = NULL;
}

static int open_bpf(struct kpriv *kp, char *err, size_t errlen)
{
	int r;

	libbpf_set_print(quiet_print);
	kp->skel = ktext_bpf__open();
	if (!kp->skel) {
		r = errno ? -errno : -EINVAL;
		snprintf(err, errlen, "reading kernel text: BPF skeleton open failed: %s", strerror(-r));
		return r;
	}
	r = ktext_bpf__load(kp->skel);
	if (r < 0) {
		if (r == -EPERM || r == -EACCES)
			snprintf(err, errlen,
				 "reading kernel text needs CAP_BPF and CAP_PERFMON (or "
				 "CAP_SYS_ADMIN): BPF program load failed: %s",
				 strerror(-r));
		else
			snprintf(err, errlen, "reading kernel text: BPF program load failed: %s", strerror(-r));
		return r;
	}
	if (!kp->skel->bss) {
		snprintf(err, errlen, "reading kernel text: BPF .bss is not memory-mapped");
		return -ENOTSUP;
	}
	kp->prog_fd = bpf_program__fd(kp->skel->progs.read_text);
	return 0;
}

/* Copy [lo, hi) into one buffer chunk by chunk; where a chunk fails (a hole
 * in the text), fall back to reading its functions one at a time. */
static int read_text(struct kpriv *kp, struct hp_module *mod, struct ktext_copy *c, const char *only)
{
	size_t span = c->hi - c->lo, off, k;

	c->buf = malloc(span ? span : 1);
	if (!c->buf)
		return -ENOMEM;
	if (only) {
		for (k = 0; k < mod->nfuncs; k++) {
			struct hp_function *f = &mod->funcs[k];
			if (strcmp(f->name, only))
				continue;
			int r = kernel_read_raw(kp, f->addr, c->buf + (f->addr - c->lo), f->size);
			if (r < 0) {
				f->flags |= HP_FN_UNREADABLE;
				f->read_errno = -r;
			}
		}
		return 0;
	}
	for (off = 0; off < span; off += KTEXT_CHUNK) {
		size_t n = span - off > KTEXT_CHUNK ? KTEXT_CHUNK : span - off;
		int r = bpf_read_chunk(kp, c->lo + off, c->buf + off, n);

		if (r == 0)
			continue;
		for (k = 0; k < mod->nfuncs; k++) {
			struct hp_function *f = &mod->funcs[k];
			if (f->addr + f->size <= c->lo + off || f->addr >= c->lo + off + n)
				continue;
			r = kernel_read_raw(kp, f->addr, c->buf + (f->addr - c->lo), f->size);
			if (r < 0) {
				f->flags |= HP_FN_UNREADABLE;
				f->read_errno = -r;
			}
		}
	}
	return 0;
}

static const uint8_t *kernel_bytes(void *ctx, const struct hp_module *mod, const struct hp_function *f, int *err)
{
	struct ktext_copy *c = ctx;

	if (!c->buf || f->addr < c->lo || f->addr + f->size > c->hi) {
		*err = EFAULT;
		return NULL;
	}
	return c->buf + (f->addr - c->lo);
}

/* A module's memory is zeroed by the loader: the zeros after a section's last
 * function are not code. Only functions whose bytes were read are trimmed. */
static void trim_module_fill(struct hp_module *mod, const struct ktext_copy *c, const char *only)
{
	for (size_t k = 0; k < mod->nfuncs; k++) {
		struct hp_function *f = &mod->funcs[k];

		if ((only && strcmp(f->name, only)) || (f->flags & HP_FN_UNREADABLE) || f->addr < c->lo ||
		    f->addr + f->size > c->hi)
			continue;
		f->size = hp_ktext_trim_fill(c->buf + (f->addr - c->lo), f->size, f->addr,
					     f->flags & HP_FN_SIZE_ESTIMATED);
	}
}

int hp_model_open_kernel(const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen)
{
	struct hp_open_opts defaults = { 0 };
	struct hp_kallsyms ks = { 0 };
	struct hp_model *m;
	struct kpriv *kp;
	struct utsname un;
	const char *only = NULL;
	double t0 = hp_now();
	size_t i;
	int r;

	*out = NULL;
	if (!o)
		o = &defaults;
	m = hp_model_new(HP_TARGET_KERNEL);
	kp = calloc(1, sizeof(*kp));
	if (!m || !kp) {
		free(kp);
		hp_model_free(m);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&kp->lock, NULL);
	m->priv = kp;
	m->free_priv = kernel_free_priv;
	m->read = kernel_read;
	if (uname(&un) == 0)
		snprintf(m->release, sizeof(m->release), "%s", un.release);
	hp_kernel_build_id(m->build_id, sizeof(m->build_id));

	/* HOTPATH_TIMING=1 prints where the open spends its time. */
	bool timing = getenv("HOTPATH_TIMING") != NULL;
	double tp = t0;
#define PHASE(what)                                                               \
	do {                                                                      \
		if (timing)                                                       \
			fprintf(stderr, "  %-10s %.3f s\n", what, hp_now() - tp); \
		tp = hp_now();                                                    \
	} while (0)

	/* Load the reader first: without permission nothing else matters. */
	if ((r = open_bpf(kp, err, errlen)) < 0)
		goto fail;
	PHASE("bpf load");
	FILE *fp = fopen("/proc/kallsyms", "re");
	if (!fp) {
		r = -errno;
		snprintf(err, errlen, "cannot open /proc/kallsyms: %s", strerror(errno));
		goto fail;
	}
	r = hp_kallsyms_read(m, fp, &ks, err, errlen);
	fclose(fp);
	if (r < 0)
		goto fail;
	if (hp_kallsyms_read_sections(&ks, "/sys/module") < 0) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	PHASE("kallsyms");
	if ((r = hp_kallsyms_build(m, &ks, err, errlen)) < 0)
		goto fail;

	/* The index covers every function, parsed or not, so callees of a
	 * single parsed function still symbolize. */
	if ((r = hp_model_build_index(m)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	PHASE("index");
	if (o->only_function) {
		struct hp_find_hit hit;

		only = strrchr(o->only_function, ':');
		only = only ? only + 1 : o->only_function;
		/* An alias parses the function it names. */
		if (hp_model_find_all(m, o->only_function, &hit, 1) == 1)
			only = hit.fn->name;
	}
	kp->copies = calloc(m->nmods ? m->nmods : 1, sizeof(*kp->copies));
	if (!kp->copies) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	struct hp_cfg_env env = { ks.ret_thunks, ks.nret, ks.ind_thunks, ks.nind };
	for (i = 0; i < m->nmods; i++) {
		struct hp_module *mod = &m->mods[i];
		struct ktext_copy *c = &kp->copies[i];

		if (!mod->nfuncs)
			continue;
		c->lo = mod->funcs[0].addr < mod->base ? mod->funcs[0].addr : mod->base;
		c->hi = mod->funcs[mod->nfuncs - 1].addr + mod->funcs[mod->nfuncs - 1].size;
		if ((r = read_text(kp, mod, c, only)) < 0) {
			snprintf(err, errlen, "out of memory for a copy of %s text", mod->name);
			goto fail;
		}
		PHASE("read text");
		if (i > 0)
			trim_module_fill(mod, c, only);
		r = hp_cfg_parse_module(mod, &env, kernel_bytes, c, o->threads, only);
		PHASE("decode");
		free(c->buf);
		c->buf = NULL;
		if (r < 0) {
			snprintf(err, errlen, "parsing %s: %s", mod->name, strerror(-r));
			goto fail;
		}
	}
	m->parse_seconds = hp_now() - t0;
	if (!o->quiet) {
		struct hp_model_stats st;

		hp_model_stats(m, &st);
		fprintf(stderr, "parsed %zu kernel functions (%zu blocks) in %.2f s\n", st.functions, st.blocks,
			m->parse_seconds);
	}
	r = 0;
	*out = m;
	m = NULL;
fail:
	hp_kallsyms_free(&ks);
	hp_model_free(m);
	return r;
}
