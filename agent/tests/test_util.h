/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helpers: a scratch directory, compiling fixtures with gcc, running
 * shell commands.
 */
#ifndef HOTPATH_TEST_UTIL_H
#define HOTPATH_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tu_dir[256];

/* Where the fixture sources are: $HP_FIXTURES, or tests/fixtures from the
 * agent directory (where `make test` runs). */
static inline const char *tu_fixtures(void)
{
	const char *e = getenv("HP_FIXTURES");
	return e ? e : "tests/fixtures";
}

static inline const char *tu_tmpdir(void)
{
	if (!tu_dir[0]) {
		snprintf(tu_dir, sizeof(tu_dir), "/tmp/hotpath-test-XXXXXX");
		if (!mkdtemp(tu_dir))
			tu_dir[0] = 0;
	}
	return tu_dir;
}

static inline void tu_cleanup(void)
{
	char cmd[300];

	if (tu_dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tu_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", tu_dir);
	}
}

/* Compile fixture src (a file name under fixtures) into tmpdir/out with
 * flags; returns the output path (static buffer per call slot) or NULL. */
static inline const char *tu_compile(const char *src, const char *out, const char *flags)
{
	static char paths[16][300];
	static int slot;
	char cmd[1024];
	char *p = paths[slot++ % 16];

	snprintf(p, 300, "%s/%s", tu_tmpdir(), out);
	snprintf(cmd, sizeof(cmd), "gcc %s -o '%s' '%s/%s' 2>'%s.log'", flags, p, tu_fixtures(), src, p);
	if (system(cmd) != 0)
		return NULL;
	return p;
}

static inline off_t tu_file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_size : -1;
}

/* The recorded kallsyms of the 6.1 fixture (fixtures/kallsyms-6.1/kallsyms)
 * followed by extra lines (may be NULL), as one malloc'd string of *len
 * bytes; NULL with errno set when the file cannot be read. */
static inline char *tu_recorded_kallsyms(const char *extra, size_t *len)
{
	char path[256], *text = NULL;
	size_t n = 0;
	snprintf(path, sizeof(path), "%s/kallsyms-6.1/kallsyms", tu_fixtures());
	FILE *in = fopen(path, "re");
	if (!in)
		return NULL;
	FILE *mem = open_memstream(&text, &n);
	int c;
	while ((c = fgetc(in)) != EOF)
		fputc(c, mem);
	fclose(in);
	if (extra)
		fputs(extra, mem);
	fclose(mem);
	if (len)
		*len = n;
	return text;
}

#endif
