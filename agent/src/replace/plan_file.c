// SPDX-License-Identifier: Apache-2.0
/*
 * A plan's JSON as an installer reads it (install.h): the target it was
 * made for, the members with the digests of their original bytes and the
 * block layout, and the code (bytes, relocations, unwind data) with its
 * hash. Only plans whose status is ok and whose code was verified are
 * accepted; the hash is recomputed from the bytes here, so a plan whose
 * code was changed after planning shows a mismatch.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hex.h"
#include "base/json_get.h"
#include "replace/install.h"

static int unhex(const char *s, uint8_t **out, size_t *len)
{
	size_t n = s ? strlen(s) : 0;

	*out = NULL;
	*len = 0;
	if (n % 2)
		return -EINVAL;
	if (!(*out = malloc(n / 2 + 1)))
		return -ENOMEM;
	if (hp_unhex(s, n / 2, *out) < 0) {
		free(*out);
		*out = NULL;
		return -EINVAL;
	}
	*len = n / 2;
	return 0;
}

static char *dupstr(const json_t *v)
{
	const char *s = json_string_value(v);
	return strdup(s ? s : "");
}

int hp_iplan_parse(const char *text, size_t len, struct hp_iplan *p, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, 0, &je), *v;
	const json_t *tg, *code, *group, *uw;
	int r = -EINVAL;
	uint64_t u;
	size_t i;

	memset(p, 0, sizeof(*p));
	if (!json_is_object(root)) {
		snprintf(err, errlen, "not a plan: the file is not a JSON object (%s)", root ? "" : je.text);
		goto out;
	}
	const char *status = json_string_value(json_object_get(root, "status"));
	if (!status || !json_is_string(json_object_get(root, "root"))) {
		snprintf(err, errlen, "not a plan: no root or status (write it with `hotpathd plan ... --json`)");
		goto out;
	}
	if (strcmp(status, "ok")) {
		const char *msg = json_string_value(json_object_get(root, "message"));
		snprintf(err, errlen, "the plan is not installable: its status is %s%s%s", status, msg ? ": " : "",
			 msg ? msg : "");
		goto out;
	}
	p->root = dupstr(json_object_get(root, "root"));
	tg = json_object_get(root, "target");
	snprintf(p->kind, sizeof(p->kind), "%s", json_string_value(json_object_get(tg, "kind")) ?: "");
	if (strcmp(p->kind, "pid") && strcmp(p->kind, "elf") && strcmp(p->kind, "kernel")) {
		snprintf(err, errlen,
			 "the plan is for a %s target; only process (pid), ELF and kernel plans install here",
			 p->kind[0] ? p->kind : "unknown");
		r = -EOPNOTSUPP;
		goto out;
	}
	if (hp_json_u64(json_object_get(tg, "pid"), &u))
		p->pid = (int)u;
	hp_json_u64(json_object_get(tg, "start_time"), &p->start_time);
	p->module = dupstr(json_object_get(tg, "module"));
	hp_json_u64(json_object_get(tg, "module_base"), &p->module_base);
	hp_json_u64(json_object_get(tg, "kernel_text"), &p->kernel_text);
	snprintf(p->build_id, sizeof(p->build_id), "%s",
		 json_string_value(json_object_get(tg, "module_build_id"))  ?:
			 json_string_value(json_object_get(tg, "build_id")) ?:
									      "");
	p->hot_set = json_is_true(json_object_get(json_object_get(root, "options"), "hot_set"));
	code = json_object_get(root, "code");
	if (!json_is_true(json_object_get(code, "verified"))) {
		snprintf(err, errlen, "the plan's code was not verified: it is not installed");
		goto out;
	}
	if (!hp_json_u64(json_object_get(code, "base"), &p->base) ||
	    unhex(json_string_value(json_object_get(code, "hex")), &p->code, &p->code_len) < 0 || !p->code_len) {
		snprintf(err, errlen, "the plan has no code (code.base, code.hex)");
		goto out;
	}
	snprintf(p->hash, sizeof(p->hash), "%s", json_string_value(json_object_get(code, "sha256")) ?: "");
	uw = json_object_get(code, "unwind");
	if (json_is_object(uw)) {
		if (!hp_json_u64(json_object_get(uw, "offset"), &u) ||
		    unhex(json_string_value(json_object_get(uw, "hex")), &p->unwind, &p->unwind_len) < 0) {
			snprintf(err, errlen, "the plan's unwind data is malformed");
			goto out;
		}
		p->unwind_off = (uint32_t)u;
		if (p->unwind_off < p->code_len || p->unwind_off > (1u << 30)) {
			snprintf(err, errlen, "the plan's unwind data overlaps its code");
			goto out;
		}
	}
	v = json_object_get(code, "relocations");
	p->relocs = calloc(json_array_size(v) + 1, sizeof(*p->relocs));
	json_array_foreach(v, i, tg)
	{
		uint64_t off, target;
		const char *kind = json_string_value(json_object_get(tg, "kind"));
		uint8_t k = !kind                   ? HP_RELOC_REL32 :
			    !strcmp(kind, "abs64")  ? HP_RELOC_ABS64 :
			    !strcmp(kind, "code64") ? HP_RELOC_CODE64 :
						      HP_RELOC_REL32;
		if (!hp_json_u64(json_object_get(tg, "offset"), &off) ||
		    !hp_json_u64(json_object_get(tg, "target"), &target) ||
		    off + (k == HP_RELOC_REL32 ? 4 : 8) > p->code_len ||
		    (kind && k == HP_RELOC_REL32 && strcmp(kind, "rel32"))) {
			snprintf(err, errlen, "relocation %zu of the plan is malformed", i);
			goto out;
		}
		p->relocs[p->nrelocs++] = (struct hp_reloc){ (uint32_t)off, target, k };
	}
	group = json_object_get(root, "group");
	if (!json_array_size(group)) {
		snprintf(err, errlen, "the plan has no group");
		goto out;
	}
	p->members = calloc(json_array_size(group), sizeof(*p->members));
	json_array_foreach(group, i, tg)
	{
		struct hp_imember *mb = &p->members[p->nmembers];
		const json_t *lay = json_object_get(tg, "layout"), *b;
		size_t k;
		mb->name = dupstr(json_object_get(tg, "function"));
		mb->module = dupstr(json_object_get(tg, "module"));
		snprintf(mb->digest, sizeof(mb->digest), "%s",
			 json_string_value(json_object_get(tg, "original_sha256")) ?: "");
		if (!hp_json_u64(json_object_get(tg, "address"), &mb->addr) ||
		    !hp_json_u64(json_object_get(tg, "new_address"), &mb->new_addr) ||
		    !hp_json_u64(json_object_get(tg, "size"), &u) || strlen(mb->digest) != 64) {
			snprintf(err, errlen,
				 "group member %zu of the plan lacks its address, size or original_sha256 (plans from "
				 "an older hotpathd cannot be checked: plan again)",
				 i);
			p->nmembers++;
			goto out;
		}
		mb->size = (uint32_t)u;
		if (mb->new_addr < p->base || mb->new_addr >= p->base + p->code_len) {
			snprintf(err, errlen, "group member %s's copy lies outside the plan's code", mb->name);
			p->nmembers++;
			goto out;
		}
		mb->blocks = calloc(json_array_size(lay) + 1, sizeof(*mb->blocks));
		json_array_foreach(lay, k, b)
		{
			struct hp_iblock *bl = &mb->blocks[mb->nblocks++];
			uint64_t o, s, na, ns;
			if (!hp_json_u64(json_object_get(b, "offset"), &o) ||
			    !hp_json_u64(json_object_get(b, "size"), &s) ||
			    !hp_json_u64(json_object_get(b, "new_address"), &na) ||
			    !hp_json_u64(json_object_get(b, "new_size"), &ns) || o + s > mb->size ||
			    (ns && (na < p->base || na + ns > p->base + p->code_len))) {
				snprintf(err, errlen, "block %zu of %s in the plan is malformed", k, mb->name);
				p->nmembers++;
				goto out;
			}
			*bl = (struct hp_iblock){ (uint32_t)o, (uint32_t)s, na, (uint32_t)ns };
		}
		const json_t *jl = json_object_get(tg, "jump_labels");
		mb->jump_labels = calloc(json_array_size(jl) + 1, sizeof(*mb->jump_labels));
		if (!mb->jump_labels || (jl && !json_is_array(jl))) {
			snprintf(err, errlen, "the jump labels of %s in the plan are malformed", mb->name);
			p->nmembers++;
			goto out;
		}
		json_array_foreach(jl, k, b)
		{
			uint64_t o, t;
			/* Inside the function, ascending, 2 bytes apart at least (a site's length). */
			if (!hp_json_u64(json_object_get(b, "offset"), &o) ||
			    !hp_json_u64(json_object_get(b, "target"), &t) || o + 2 > mb->size ||
			    (mb->njump_labels && mb->addr + o < mb->jump_labels[mb->njump_labels - 1].code + 2)) {
				snprintf(err, errlen, "jump label %zu of %s in the plan is malformed", k, mb->name);
				p->nmembers++;
				goto out;
			}
			mb->jump_labels[mb->njump_labels++] =
				(struct hp_static_branch){ .code = mb->addr + o, .target = t };
		}
		const json_t *sl = json_object_get(tg, "static_calls");
		mb->static_calls = calloc(json_array_size(sl) + 1, sizeof(*mb->static_calls));
		if (!mb->static_calls || (sl && !json_is_array(sl))) {
			snprintf(err, errlen, "the static calls of %s in the plan are malformed", mb->name);
			p->nmembers++;
			goto out;
		}
		json_array_foreach(sl, k, b)
		{
			uint64_t o;
			const json_t *tail = json_object_get(b, "tail");
			/* Inside the function, ascending, 5 bytes apart at least (a site's length). */
			if (!hp_json_u64(json_object_get(b, "offset"), &o) || !json_is_boolean(tail) ||
			    o + 5 > mb->size ||
			    (mb->nstatic_calls && mb->addr + o < mb->static_calls[mb->nstatic_calls - 1].code + 5)) {
				snprintf(err, errlen, "static call %zu of %s in the plan is malformed", k, mb->name);
				p->nmembers++;
				goto out;
			}
			mb->static_calls[mb->nstatic_calls++] =
				(struct hp_static_call){ .code = mb->addr + o, .tail = json_is_true(tail) };
		}
		p->nmembers++;
	}
	if (!p->module[0]) {
		snprintf(err, errlen, "the plan does not name its module (plan again with this hotpathd)");
		goto out;
	}
	struct hp_code_image ci = { p->base,       p->code,       p->code_len, p->unwind,
				    p->unwind_len, p->unwind_off, p->relocs,   p->nrelocs };
	if (hp_code_hash(&ci, p->computed) < 0) {
		snprintf(err, errlen, "cannot hash the plan's code");
		r = -EIO;
		goto out;
	}
	if (!(p->text = malloc(len + 1))) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	memcpy(p->text, text, len);
	p->text[len] = 0;
	p->text_len = len;
	r = 0;
out:
	json_decref(root);
	if (r < 0)
		hp_iplan_free(p);
	return r;
}

int hp_iplan_read(const char *path, struct hp_iplan *p, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	char *text = NULL;
	long n = -1;
	int r = 0;

	struct stat st;

	memset(p, 0, sizeof(*p));
	if (!fp || fstat(fileno(fp), &st) < 0)
		r = -(errno ? errno : EIO);
	else if (S_ISDIR(st.st_mode))
		r = -EISDIR; /* a folder opens and "seeks" to a huge size */
	else if (fseek(fp, 0, SEEK_END) < 0 || (n = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) < 0)
		r = -(errno ? errno : EIO);
	else if (n >= (256L << 20))
		r = -EFBIG;
	else if (!(text = malloc((size_t)n + 1)))
		r = -ENOMEM;
	else if (fread(text, 1, (size_t)n, fp) != (size_t)n)
		r = -EIO;
	if (fp)
		fclose(fp);
	if (r < 0) {
		snprintf(err, errlen, "cannot read the plan %s: %s", path, strerror(-r));
		free(text);
		return r;
	}
	r = hp_iplan_parse(text, (size_t)n, p, err, errlen);
	free(text);
	return r;
}

void hp_iplan_free(struct hp_iplan *p)
{
	for (size_t i = 0; i < p->nmembers; i++) {
		free(p->members[i].name);
		free(p->members[i].module);
		free(p->members[i].blocks);
		free(p->members[i].jump_labels);
		free(p->members[i].static_calls);
	}
	free(p->members);
	free(p->root);
	free(p->module);
	free(p->code);
	free(p->unwind);
	free(p->relocs);
	free(p->text);
	memset(p, 0, sizeof(*p));
}

int hp_iplan_kernel_moved(const struct hp_iplan *p, int64_t delta, uint64_t live_text, uint64_t mod_addr,
			  uint64_t mod_size, char *err, size_t errlen)
{
	if (!p->module || !strcmp(p->module, "vmlinux"))
		return 0; /* module_base is _text: delta is vmlinux's own */
	if (p->kernel_text && live_text && (int64_t)(live_text - p->kernel_text) == delta)
		return 0; /* vmlinux moved with the module (the same boot, the module not reloaded) */
	const char *vm = p->kernel_text ? "vmlinux moved by another distance" :
					  "the plan does not say where vmlinux was when it was made";
#define INSIDE(a) (mod_size && (a) >= mod_addr && (a)-mod_addr < mod_size)
	for (size_t i = 0; i < p->nmembers; i++)
		if (!INSIDE(p->members[i].addr + (uint64_t)delta)) {
			snprintf(err, errlen,
				 "the plan's member %s is outside %s, which lies %+" PRId64
				 " bytes from where it was planned, and %s: plan again on this kernel",
				 p->members[i].name, p->module, delta, vm);
			return -ESTALE;
		}
	for (size_t i = 0; i < p->nrelocs; i++) {
		const struct hp_reloc *r = &p->relocs[i];
		if (r->kind == HP_RELOC_CODE64 || INSIDE(r->target + (uint64_t)delta))
			continue;
		snprintf(err, errlen,
			 "the copy reaches 0x%" PRIx64 " (at +0x%x), outside %s, which lies %+" PRId64
			 " bytes from where it was planned, and %s: plan again on this kernel",
			 r->target, r->offset, p->module, delta, vm);
		return -ESTALE;
	}
#undef INSIDE
	return 0;
}
