// SPDX-License-Identifier: Apache-2.0
/*
 * An ELF file on disk as a code model: one module named by the path, with
 * functions at the file's virtual addresses. Functions come from .symtab,
 * else .dynsym, else (stripped static binaries) the address ranges of
 * .eh_frame's FDEs (parsed here, bounds-checked). Bytes come from the executable sections.
 * Malformed files are rejected with a message, never trusted.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/grow.h"
#include "base/hex.h"
#include "isa/isa.h"
#include "model/cfg.h"
#include "model/model.h"
#include "target/target.h"
#include "target/eh_frame.h"
#include "target/target_elf.h"
#include "target/unwind.h"

struct exec_sect {
	uint64_t addr, size;
	const uint8_t *data; /* NULL when the section's bytes are not in the file */
	size_t index;
};

struct elfpriv {
	int fd;
	Elf *elf;
	struct exec_sect *sects;
	size_t nsects;
	struct exec_sect *data; /* every allocated section with bytes: switch tables */
	size_t ndata;
};

Elf *hp_elf_begin(int fd, const char *path, char *err, size_t errlen, int *errn)
{
	struct stat st;
	GElf_Ehdr eh;
	size_t shstrndx;
	Elf *elf;

	elf_version(EV_CURRENT);
	if (fstat(fd, &st) < 0) {
		*errn = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		*errn = -EINVAL;
		snprintf(err, errlen, "%s: not a regular file", path);
		return NULL;
	}
	if (st.st_size == 0) {
		*errn = -ENOEXEC;
		snprintf(err, errlen, "%s: empty file, not ELF", path);
		return NULL;
	}
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf) {
		*errn = -ENOEXEC;
		snprintf(err, errlen, "%s: cannot read as ELF: %s", path, elf_errmsg(-1));
		return NULL;
	}
	if (elf_kind(elf) != ELF_K_ELF) {
		*errn = -ENOEXEC;
		snprintf(err, errlen, "%s: not an ELF file", path);
		goto fail;
	}
	if (!gelf_getehdr(elf, &eh)) {
		*errn = -ENOEXEC;
		snprintf(err, errlen, "%s: truncated or corrupt ELF header: %s", path, elf_errmsg(-1));
		goto fail;
	}
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) {
		*errn = -ENOEXEC;
		snprintf(err, errlen, "%s: not an x86-64 ELF file (class %d, machine %d)", path, eh.e_ident[EI_CLASS],
			 eh.e_machine);
		goto fail;
	}
	/* The section header table sits at the end: a truncated file loses it. */
	if (eh.e_shoff && (eh.e_shoff > (uint64_t)st.st_size ||
			   (uint64_t)eh.e_shnum * eh.e_shentsize > (uint64_t)st.st_size - eh.e_shoff)) {
		*errn = -ENOEXEC;
		snprintf(err, errlen, "%s: truncated ELF file (section headers at %" PRIu64 " beyond its %lld bytes)",
			 path, (uint64_t)eh.e_shoff, (long long)st.st_size);
		goto fail;
	}
	if (elf_getshdrstrndx(elf, &shstrndx) < 0) {
		*errn = -ENOEXEC;
		snprintf(err, errlen, "%s: corrupt ELF section headers: %s", path, elf_errmsg(-1));
		goto fail;
	}
	return elf;
fail:
	elf_end(elf);
	return NULL;
}

void hp_elf_build_id(Elf *elf, char *out)
{
	Elf_Scn *scn = NULL;

	out[0] = 0;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		size_t off = 0, noff, doff;
		GElf_Nhdr nh;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE || !(d = elf_getdata(scn, NULL)))
			continue;
		while ((off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
			if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
			    !memcmp((char *)d->d_buf + noff, "GNU", 4) && nh.n_descsz <= 32 &&
			    doff + nh.n_descsz <= d->d_size) {
				hp_hex((const uint8_t *)d->d_buf + doff, nh.n_descsz, out);
				return;
			}
		}
	}
}

/* Executable PROGBITS sections (or, with any_alloc, every allocated
 * PROGBITS section), with their bytes when the file has them. */
static int sections_where(Elf *elf, bool any_alloc, struct exec_sect **out, size_t *n)
{
	Elf_Scn *scn = NULL;
	struct exec_sect *v = NULL;
	size_t cnt = 0, cap = 0;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS || !sh.sh_size ||
		    !(sh.sh_flags & (any_alloc ? SHF_ALLOC : SHF_EXECINSTR)))
			continue;
		if (HP_GROW(v, cap, cnt + 1)) {
			free(v);
			return -ENOMEM;
		}
		d = elf_getdata(scn, NULL);
		v[cnt].addr = sh.sh_addr;
		v[cnt].size = sh.sh_size;
		v[cnt].index = elf_ndxscn(scn);
		v[cnt].data = d && d->d_buf && d->d_size >= sh.sh_size ? d->d_buf : NULL;
		cnt++;
	}
	*out = v;
	*n = cnt;
	return 0;
}

static int exec_sections(Elf *elf, struct exec_sect **out, size_t *n)
{
	return sections_where(elf, false, out, n);
}

static const struct exec_sect *sect_of(const struct exec_sect *s, size_t n, uint64_t addr)
{
	for (size_t i = 0; i < n; i++)
		if (addr >= s[i].addr && addr - s[i].addr < s[i].size)
			return &s[i];
	return NULL;
}

static int add_checked(struct hp_model *m, struct hp_module *mod, const struct exec_sect *sects, size_t nsects,
		       const char *name, uint64_t addr, uint64_t size, uint32_t flags, uint64_t bias, uint64_t lo,
		       uint64_t hi)
{
	const struct exec_sect *s = sect_of(sects, nsects, addr);

	if (!s || !size)
		return 0;
	if (addr + size > s->addr + s->size)
		size = s->addr + s->size - addr; /* clip to the section */
	if (hi > lo && (addr + bias < lo || addr + bias + size > hi))
		return 0;
	const char *pooled = hp_model_strdup(m, name);
	int r = hp_module_add_function(mod, pooled, addr + bias, size, flags);
	return r < 0 ? r : 1;
}

static int symbols_from(struct hp_model *m, struct hp_module *mod, Elf *elf, Elf64_Word type,
			const struct exec_sect *sects, size_t nsects, uint64_t bias, uint64_t lo, uint64_t hi)
{
	Elf_Scn *scn = NULL;
	int added = 0;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != type || !sh.sh_entsize || !(d = elf_getdata(scn, NULL)))
			continue;
		size_t n = d->d_size / sh.sh_entsize;
		for (size_t i = 0; i < n; i++) {
			GElf_Sym sym;
			const char *name;
			int r;

			if (!gelf_getsym(d, i, &sym))
				continue;
			int t = GELF_ST_TYPE(sym.st_info);
			if ((t != STT_FUNC && t != STT_GNU_IFUNC) || !sym.st_size || sym.st_shndx == SHN_UNDEF ||
			    sym.st_shndx >= SHN_LORESERVE)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || !*name)
				continue;
			r = add_checked(m, mod, sects, nsects, name, sym.st_value, sym.st_size,
					(GELF_ST_BIND(sym.st_info) == STB_GLOBAL ? HP_FN_BUILD_GLOBAL : 0) |
						(t == STT_GNU_IFUNC ? HP_FN_BUILD_IFUNC : 0),
					bias, lo, hi);
			if (r < 0)
				return r;
			added += r;
		}
	}
	return added;
}

/* Stripped binaries: one function per .eh_frame FDE, named by its start. */
struct fde_ctx {
	struct hp_model *m;
	struct hp_module *mod;
	const struct exec_sect *sects;
	size_t nsects;
	uint64_t bias, lo, hi;
	int added;
};

static int add_fde(void *ctx, const struct hp_eh_fde *fde)
{
	struct fde_ctx *c = ctx;
	char name[40];

	if (!fde->range || fde->range >= (1ull << 32))
		return 0;
	snprintf(name, sizeof(name), "fde_%" PRIx64, fde->start + c->bias);
	int rr = add_checked(c->m, c->mod, c->sects, c->nsects, name, fde->start, fde->range, HP_FN_SIZE_ESTIMATED,
			     c->bias, c->lo, c->hi);
	if (rr < 0)
		return rr;
	c->added += rr;
	return 0;
}

static int fde_functions(struct hp_model *m, struct hp_module *mod, Elf *elf, const struct exec_sect *sects,
			 size_t nsects, uint64_t bias, uint64_t lo, uint64_t hi)
{
	struct fde_ctx c = { m, mod, sects, nsects, bias, lo, hi, 0 };
	int r = hp_eh_frame_walk(elf, add_fde, &c);

	return r < 0 ? r : c.added;
}

struct got_name {
	uint64_t slot;
	const char *name; /* the relocation's symbol; NULL for an IRELATIVE slot */
	uint64_t local;   /* where the module defines that function itself (link-time address), 0 if not */
	uint64_t ifunc;   /* IRELATIVE: the IFUNC resolver the addend names (link-time address) */
};

static int cmp_got(const void *a, const void *b)
{
	const struct got_name *x = a, *y = b;

	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* The GOT slots that relocations bind to functions: JUMP_SLOT and GLOB_DAT
 * of .rela.plt and .rela.dyn name their symbol; IRELATIVE (a library's calls
 * to its own IFUNCs, e.g. libc's strlen) names the IFUNC's resolver by its
 * addend. */
static int got_names(Elf *elf, struct got_name **out, size_t *nout)
{
	Elf_Scn *scn = NULL;
	struct got_name *v = NULL;
	size_t n = 0, cap = 0;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh, symsh;
		Elf_Data *d, *symd;
		Elf_Scn *symscn;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !sh.sh_entsize ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		if (!(symscn = elf_getscn(elf, sh.sh_link)) || !gelf_getshdr(symscn, &symsh) ||
		    symsh.sh_type != SHT_DYNSYM || !(symd = elf_getdata(symscn, NULL)))
			continue;
		for (size_t i = 0; i < d->d_size / sh.sh_entsize; i++) {
			GElf_Rela r;
			GElf_Sym sym;
			struct got_name g = { 0 };
			int t;

			if (!gelf_getrela(d, i, &r))
				continue;
			t = GELF_R_TYPE(r.r_info);
			g.slot = r.r_offset;
			if (t == R_X86_64_IRELATIVE) {
				if (r.r_addend <= 0)
					continue;
				g.ifunc = (uint64_t)r.r_addend;
			} else if (t == R_X86_64_JUMP_SLOT || t == R_X86_64_GLOB_DAT) {
				if (!gelf_getsym(symd, GELF_R_SYM(r.r_info), &sym) ||
				    !(g.name = elf_strptr(elf, symsh.sh_link, sym.st_name)) || !*g.name)
					continue;
				/* Defined here as a plain function (an IFUNC's value is
				 * its resolver, not what a call runs). */
				if (GELF_ST_TYPE(sym.st_info) == STT_FUNC && sym.st_shndx != SHN_UNDEF &&
				    sym.st_shndx < SHN_LORESERVE)
					g.local = sym.st_value;
			} else {
				continue;
			}
			if (HP_GROW(v, cap, n + 1)) {
				free(v);
				return -ENOMEM;
			}
			v[n++] = g;
		}
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_got);
	*out = v;
	*nout = n;
	return 0;
}

/* The name of the IFUNC symbol whose resolver is at addr (the global one
 * among aliases, then the longer, then the first by name); NULL if none. */
static const char *ifunc_at(const struct hp_module *mod, uint64_t addr)
{
	const struct hp_function *best = NULL;

	for (size_t k = 0; k < mod->nfuncs; k++) {
		const struct hp_function *f = &mod->funcs[k];
		if (f->addr != addr || !(f->flags & HP_FN_BUILD_IFUNC))
			continue;
		if (!best || (f->flags & HP_FN_BUILD_GLOBAL) > (best->flags & HP_FN_BUILD_GLOBAL) ||
		    ((f->flags & HP_FN_BUILD_GLOBAL) == (best->flags & HP_FN_BUILD_GLOBAL) &&
		     (f->size > best->size || (f->size == best->size && strcmp(f->name, best->name) < 0))))
			best = f;
	}
	return best ? best->name : NULL;
}

static int cmp_plt_target(const void *a, const void *b)
{
	const struct hp_plt_target *x = a, *y = b;

	return x->stub < y->stub ? -1 : x->stub > y->stub;
}

static int add_plt_target(struct hp_module *mod, uint64_t stub, uint64_t target)
{
	if (HP_GROW(mod->plt_targets, mod->cap_plt_targets, mod->nplt_targets + 1))
		return -ENOMEM;
	struct hp_plt_target *v = mod->plt_targets;
	v[mod->nplt_targets++] = (struct hp_plt_target){ stub, target };
	qsort(v, mod->nplt_targets, sizeof(*v), cmp_plt_target);
	return 0;
}

/* PLT stubs as functions named "callee@plt": each entry of .plt, .plt.sec
 * and .plt.got that jumps through a GOT slot a relocation names (an
 * IRELATIVE slot by the IFUNC its resolver belongs to). A stub whose callee
 * the module defines itself is recorded in mod->plt_targets. */
static int plt_functions(struct hp_model *m, struct hp_module *mod, Elf *elf, const struct exec_sect *sects,
			 size_t nsects, uint64_t bias, uint64_t lo, uint64_t hi)
{
	Elf_Scn *scn = NULL;
	struct got_name *gn = NULL;
	size_t ngn = 0, shstrndx;
	int added = 0, r;

	if (elf_getshdrstrndx(elf, &shstrndx) < 0 || (r = got_names(elf, &gn, &ngn)) < 0)
		return 0;
	while (ngn && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *nm;
		const struct exec_sect *s;

		if (!gelf_getshdr(scn, &sh) || !(nm = elf_strptr(elf, shstrndx, sh.sh_name)) ||
		    (strcmp(nm, ".plt") && strcmp(nm, ".plt.sec") && strcmp(nm, ".plt.got")))
			continue;
		if (!(s = sect_of(sects, nsects, sh.sh_addr)) || !s->data)
			continue;
		uint64_t esz = sh.sh_entsize >= 8 && sh.sh_entsize <= 64 ? sh.sh_entsize : 16;
		for (uint64_t off = 0; off + esz <= s->size; off += esz) {
			uint32_t p = 0;
			while (p < esz) {
				struct hp_isa_detail d;
				if (hp_isa_decode_detail(s->data + off + p, esz - p, s->addr + off + p, &d) < 0)
					break;
				if (d.mnem == HP_MN_JMP && d.has_rip_ref) {
					struct got_name key = { .slot = d.rip_target }, *hit;
					const char *callee;
					hit = bsearch(&key, gn, ngn, sizeof(*gn), cmp_got);
					callee = !hit ? NULL : hit->name ? hit->name : ifunc_at(mod, hit->ifunc + bias);
					if (callee) {
						char name[512];
						snprintf(name, sizeof(name), "%s@plt", callee);
						r = add_checked(m, mod, sects, nsects, name, s->addr + off, esz, 0,
								bias, lo, hi);
						if (r > 0) {
							mod->funcs[mod->nfuncs - 1].flags |= HP_FN_PLT;
							added++;
							if (hit->local)
								r = add_plt_target(mod, s->addr + off + bias,
										   hit->local + bias);
						}
						if (r < 0) {
							free(gn);
							return r;
						}
					}
					break;
				}
				p += d.len;
			}
		}
	}
	free(gn);
	return added;
}

struct hp_cfg_env hp_elf_cfg_env(hp_data_fn read_data, void *ctx)
{
	return (struct hp_cfg_env){
		.noreturn_names = hp_noreturn_user, .traps_known = true, .read_data = read_data, .data_ctx = ctx
	};
}

int hp_elf_add_functions(struct hp_model *m, struct hp_module *mod, Elf *elf, const char *path, uint64_t bias,
			 uint64_t lo, uint64_t hi, char *err, size_t errlen)
{
	struct exec_sect *sects = NULL;
	size_t nsects = 0;
	int r;

	if ((r = exec_sections(elf, &sects, &nsects)) < 0) {
		snprintf(err, errlen, "out of memory");
		return r;
	}
	if (!nsects) {
		free(sects);
		snprintf(err, errlen, "%s: no executable section", path);
		return -ENOEXEC;
	}
	r = symbols_from(m, mod, elf, SHT_SYMTAB, sects, nsects, bias, lo, hi);
	if (r == 0)
		r = symbols_from(m, mod, elf, SHT_DYNSYM, sects, nsects, bias, lo, hi);
	if (r == 0)
		r = fde_functions(m, mod, elf, sects, nsects, bias, lo, hi);
	if (r >= 0) {
		int p = plt_functions(m, mod, elf, sects, nsects, bias, lo, hi);
		r = p < 0 ? p : r + p;
	}
	free(sects);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	return r;
}

static const uint8_t *elf_bytes(void *ctx, const struct hp_module *mod, const struct hp_function *f, int *err)
{
	struct elfpriv *ep = ctx;
	const struct exec_sect *s = sect_of(ep->sects, ep->nsects, f->addr);

	if (!s || !s->data || f->addr + f->size > s->addr + s->size) {
		*err = EFAULT;
		return NULL;
	}
	return s->data + (f->addr - s->addr);
}

static int elf_read(struct hp_model *m, uint64_t addr, void *buf, size_t len)
{
	struct elfpriv *ep = m->priv;
	const struct exec_sect *s = sect_of(ep->sects, ep->nsects, addr);

	if (!s || !s->data || addr + len > s->addr + s->size)
		return -EFAULT;
	memcpy(buf, s->data + (addr - s->addr), len);
	return 0;
}

static int elf_data(void *ctx, uint64_t addr, void *buf, size_t len)
{
	struct elfpriv *ep = ctx;
	const struct exec_sect *s = sect_of(ep->data, ep->ndata, addr);

	if (!s || !s->data || len > s->size - (addr - s->addr))
		return -EFAULT;
	memcpy(buf, s->data + (addr - s->addr), len);
	return 0;
}

static void elf_free_priv(struct hp_model *m)
{
	struct elfpriv *ep = m->priv;

	for (size_t i = 0; i < m->nmods; i++) {
		hp_cfi_close(m->mods[i].cfi);
		m->mods[i].cfi = NULL;
	}
	if (!ep)
		return;
	if (ep->elf)
		elf_end(ep->elf);
	if (ep->fd >= 0)
		close(ep->fd);
	free(ep->sects);
	free(ep->data);
	free(ep);
	m->priv = NULL;
}

int hp_model_open_elf(const char *path, const struct hp_open_opts *o, struct hp_model **out, char *err, size_t errlen)
{
	struct hp_open_opts defaults = { 0 };
	struct hp_model *m = NULL;
	struct elfpriv *ep = NULL;
	struct hp_module *mod;
	double t0 = hp_now();
	const char *only = NULL;
	int r;

	*out = NULL;
	if (!o)
		o = &defaults;
	if (!path || !*path) {
		snprintf(err, errlen, "no ELF path given");
		return -EINVAL;
	}
	m = hp_model_new(HP_TARGET_ELF);
	ep = calloc(1, sizeof(*ep));
	if (!m || !ep) {
		free(ep);
		hp_model_free(m);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	ep->fd = -1;
	m->priv = ep;
	m->free_priv = elf_free_priv;
	m->read = elf_read;
	snprintf(m->release, sizeof(m->release), "%s", path);
	ep->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (ep->fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		goto fail;
	}
	if (!(ep->elf = hp_elf_begin(ep->fd, path, err, errlen, &r)))
		goto fail;
	hp_elf_build_id(ep->elf, m->build_id);
	if ((r = exec_sections(ep->elf, &ep->sects, &ep->nsects)) < 0 ||
	    (r = sections_where(ep->elf, true, &ep->data, &ep->ndata)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (!(mod = hp_model_add_module(m, path, 0))) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	snprintf(mod->build_id, sizeof(mod->build_id), "%s", m->build_id);
	if ((r = hp_elf_add_functions(m, mod, ep->elf, path, 0, 0, 0, err, errlen)) < 0)
		goto fail;
	if (r == 0) {
		r = -ENOENT;
		snprintf(err, errlen, "%s: no function symbols and no .eh_frame ranges", path);
		goto fail;
	}
	if ((r = hp_module_normalize(m, mod)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	mod->base = mod->nfuncs ? mod->funcs[0].addr : 0;
	if (o->only_function) {
		only = strrchr(o->only_function, ':');
		only = only ? only + 1 : o->only_function;
	}
	/* Aliases must resolve for only_function, so build the index first. */
	if ((r = hp_model_build_index(m)) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (only) {
		const struct hp_function *f = hp_model_find(m, o->only_function, NULL, NULL);
		if (f)
			only = f->name;
	}
	struct hp_cfg_env env = hp_elf_cfg_env(elf_data, ep);
	struct hp_cfg_only one = { .name = only };
	r = hp_cfg_parse_module(mod, &env, elf_bytes, ep, o->threads, only ? &one : NULL);
	free(one.outside);
	if (r < 0) {
		snprintf(err, errlen, "parsing %s: %s", path, strerror(-r));
		goto fail;
	}
	hp_elf_mark_functions(mod, ep->elf, 0);
	int cfd = open(path, O_RDONLY | O_CLOEXEC);
	mod->cfi = cfd >= 0 ? hp_cfi_open_fd(cfd) : NULL;
	m->parse_seconds = hp_now() - t0;
	if (!o->quiet) {
		struct hp_model_stats st;

		hp_model_stats(m, &st);
		fprintf(stderr, "parsed %zu functions (%zu blocks) of %s in %.3f s\n", st.functions, st.blocks, path,
			m->parse_seconds);
	}
	*out = m;
	return 0;
fail:
	hp_model_free(m);
	return r;
}
