// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel target's view of /proc/kallsyms (kernel_syms.h): read once per
 * process, the modules' part again only when /proc/modules changed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "replace/kernel_syms.h"
#include "target/kallsyms.h"

void hp_ksyms_view_free(struct hp_ksyms_view *v)
{
	free(v->mods);
	memset(v, 0, sizeof(*v));
}

static struct hp_ksyms_mod *find_mod(const struct hp_ksyms_view *v, const char *name)
{
	for (size_t i = 0; i < v->nmods; i++)
		if (!strcmp(v->mods[i].name, name))
			return &v->mods[i];
	return NULL;
}

uint64_t hp_ksyms_view_module(const struct hp_ksyms_view *v, const char *name)
{
	const struct hp_ksyms_mod *m = name ? find_mod(v, name) : NULL;
	return m ? m->lo : 0;
}

/* One line: "ADDRESS TYPE NAME" or "ADDRESS TYPE NAME\t[MODULE]". */
static int take_line(struct hp_ksyms_view *v, char *line)
{
	char *p = line, *end;
	errno = 0;
	unsigned long long a = strtoull(p, &end, 16);
	if (end == p || errno || *end != ' ' || !a)
		return 0;
	p = end + 1;
	char type = *p;
	if (!type || p[1] != ' ')
		return 0;
	char *name = p + 2;
	name[strcspn(name, "\n")] = '\0';
	char *tab = strchr(name, '\t');
	if (!tab) {
		if (strchr(name, ' ') || !*name)
			return 0;
		if (!strcmp(name, "_text"))
			v->text = a;
		else if (!strcmp(name, "__fentry__"))
			v->fentry = a;
		return 0;
	}
	*tab = '\0';
	char *mod = tab + 1, *close = strchr(mod, ']');
	if (*mod != '[' || !close || close[1] || close - mod - 1 <= 0 ||
	    (size_t)(close - mod - 1) >= sizeof(v->mods[0].name) || (type != 't' && type != 'T'))
		return 0;
	*close = '\0';
	mod++;
	struct hp_ksyms_mod *m = find_mod(v, mod);
	if (!m) {
		if (HP_GROW(v->mods, v->cap, v->nmods + 1))
			return -ENOMEM;
		m = &v->mods[v->nmods++];
		memset(m, 0, sizeof(*m));
		memcpy(m->name, mod, strlen(mod) + 1);
	}
	if (!m->lo || a < m->lo)
		m->lo = a;
	return 0;
}

int hp_ksyms_view_read(struct hp_ksyms_view *v, FILE *fp)
{
	char line[512];
	hp_ksyms_view_free(v);
	while (fgets(line, sizeof(line), fp)) {
		size_t n = strlen(line);
		if (n == sizeof(line) - 1 && line[n - 1] != '\n') { /* longer than any symbol line: skip it */
			int c;
			while ((c = fgetc(fp)) != EOF && c != '\n')
				;
			continue;
		}
		if (take_line(v, line) < 0) {
			hp_ksyms_view_free(v);
			return -ENOMEM;
		}
	}
	return 0;
}

int hp_ksyms_modules_key(FILE *fp, char **key)
{
	char line[4096];
	size_t len = 0;
	FILE *out = open_memstream(key, &len);
	if (!out)
		return -ENOMEM;
	while (fgets(line, sizeof(line), fp)) {
		/* name size refcount users state address [taints] */
		char *f[6], *save = NULL, *t = strtok_r(line, " \n", &save);
		int n = 0;
		for (; t && n < 6; t = strtok_r(NULL, " \n", &save))
			f[n++] = t;
		if (n == 6)
			fprintf(out, "%s %s %s %s\n", f[0], f[1], f[4], f[5]);
		else if (n)
			fprintf(out, "? %d\n", n); /* unparsed, but still part of the key */
	}
	if (fclose(out) || !*key) {
		free(*key);
		*key = NULL;
		return -ENOMEM;
	}
	return 0;
}

int hp_ksyms_modules_span(FILE *fp, const char *name, uint64_t *addr, uint64_t *size)
{
	char line[4096];
	while (fgets(line, sizeof(line), fp)) {
		/* name size refcount users state address [taints] */
		char *f[6], *save = NULL, *t = strtok_r(line, " \n", &save), *end;
		int n = 0;
		for (; t && n < 6; t = strtok_r(NULL, " \n", &save))
			f[n++] = t;
		if (n < 6 || strcmp(f[0], name))
			continue;
		errno = 0;
		unsigned long long s = strtoull(f[1], &end, 10);
		if (errno || *end || !s)
			continue;
		unsigned long long a = strtoull(f[5], &end, 16);
		if (errno || *end || !a)
			continue;
		*addr = a;
		*size = s;
		return 0;
	}
	return -ENOENT;
}

int hp_ksyms_live_module_span(const char *name, uint64_t *addr, uint64_t *size)
{
	FILE *fp = fopen("/proc/modules", "re");
	if (!fp)
		return -ENOENT;
	int r = hp_ksyms_modules_span(fp, name, addr, size);
	fclose(fp);
	return r;
}

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hp_ksyms_view live;
static char *live_key; /* the modules' key the view was read under; NULL: no view */
static unsigned live_reads;

static char *modules_key(void)
{
	char *k = NULL;
	FILE *fp = fopen("/proc/modules", "re");
	if (!fp)
		return strdup(""); /* a kernel without modules */
	if (hp_ksyms_modules_key(fp, &k) < 0)
		k = NULL;
	fclose(fp);
	return k;
}

/* With live_lock held: the view, read again unless the modules' key is the
 * one it was read under. A view read while the modules changed is used once,
 * not kept. */
static void refresh(void)
{
	char *before = modules_key();
	if (before && live_key && !strcmp(before, live_key)) {
		free(before);
		return;
	}
	free(live_key);
	live_key = NULL;
	FILE *fp = fopen("/proc/kallsyms", "re");
	if (!fp) {
		free(before);
		hp_ksyms_view_free(&live);
		return;
	}
	char *fbuf = malloc(HP_KALLSYMS_BUF);
	if (fbuf)
		setvbuf(fp, fbuf, _IOFBF, HP_KALLSYMS_BUF);
	int r = hp_ksyms_view_read(&live, fp);
	fclose(fp);
	free(fbuf);
	live_reads++;
	char *after = modules_key();
	if (r == 0 && before && after && !strcmp(before, after)) {
		live_key = before;
		before = NULL;
	}
	free(before);
	free(after);
}

uint64_t hp_ksyms_live_text(void)
{
	pthread_mutex_lock(&live_lock);
	if (!live.text) /* vmlinux's: fixed for the boot once read */
		refresh();
	uint64_t a = live.text;
	pthread_mutex_unlock(&live_lock);
	return a;
}

uint64_t hp_ksyms_live_fentry(void)
{
	pthread_mutex_lock(&live_lock);
	if (!live.fentry)
		refresh();
	uint64_t a = live.fentry;
	pthread_mutex_unlock(&live_lock);
	return a;
}

uint64_t hp_ksyms_live_module(const char *name)
{
	pthread_mutex_lock(&live_lock);
	refresh();
	uint64_t a = hp_ksyms_view_module(&live, name);
	pthread_mutex_unlock(&live_lock);
	return a;
}

unsigned hp_ksyms_live_reads(void)
{
	pthread_mutex_lock(&live_lock);
	unsigned n = live_reads;
	pthread_mutex_unlock(&live_lock);
	return n;
}
