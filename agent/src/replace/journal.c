// SPDX-License-Identifier: Apache-2.0
/*
 * The undo journal (journal.h). A record is one line:
 *     HPJ1 <length, decimal> <CRC-32 of the JSON, 8 hex digits> <JSON>\n
 * written at the end of what is valid and followed by fdatasync. The file
 * is allocated ahead (zeros), so the first zero byte, a record whose
 * length or CRC does not match, or a missing newline ends the journal.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "replace/journal.h"

#define RESERVE_CHUNK (64u << 10)

static int fsync_dir_of(const char *path)
{
	char tmp[4096];
	int fd, r = 0;

	snprintf(tmp, sizeof(tmp), "%s", path);
	if ((fd = open(dirname(tmp), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	if (fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

static int mkdirs(const char *dir)
{
	char tmp[4096];

	snprintf(tmp, sizeof(tmp), "%s", dir);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int reserve(struct hp_journal *j, uint64_t need)
{
	uint64_t want = j->reserved;

	while (want < need)
		want += RESERVE_CHUNK;
	if (want == j->reserved)
		return 0;
	int r = posix_fallocate(j->fd, 0, (off_t)want);
	if (r)
		return -r;
	j->reserved = want;
	return 0;
}

int hp_journal_create(const char *dir, const char *name, struct hp_journal *j, char *err, size_t errlen)
{
	int r;

	memset(j, 0, sizeof(*j));
	j->fd = -1;
	if ((r = mkdirs(dir)) < 0) {
		snprintf(err, errlen, "cannot create the state folder %s: %s", dir, strerror(-r));
		return r;
	}
	snprintf(j->path, sizeof(j->path), "%s/%s", dir, name);
	if ((j->fd = open(j->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
		r = -errno;
		if (r != -EEXIST)
			snprintf(err, errlen, "cannot create the journal %s: %s", j->path, strerror(-r));
		else
			snprintf(err, errlen, "the journal %s exists already", j->path);
		return r;
	}
	if ((r = reserve(j, 1)) < 0 || (fsync(j->fd) < 0 && (r = -errno)) || (r = fsync_dir_of(j->path)) < 0) {
		snprintf(err, errlen, "cannot reserve the journal's space in %s: %s%s", dir, strerror(-r),
			 r == -ENOSPC ? " (the state folder's disk is full)" : "");
		close(j->fd);
		unlink(j->path);
		j->fd = -1;
		return r;
	}
	return 0;
}

/* Length of the valid records in buf. */
static size_t valid_prefix(const char *buf, size_t n, json_t *arr, size_t *count, bool *torn)
{
	size_t at = 0;

	*torn = false;
	*count = 0;
	while (at < n && buf[at]) {
		unsigned long len = 0, crc = 0;
		int hdr = 0;
		char tmp[64];
		size_t k = n - at < sizeof(tmp) - 1 ? n - at : sizeof(tmp) - 1;
		memcpy(tmp, buf + at, k);
		tmp[k] = 0;
		if (sscanf(tmp, "HPJ1 %lu %8lx %n", &len, &crc, &hdr) != 2 || !hdr || at + hdr + len + 1 > n ||
		    buf[at + hdr + len] != '\n' || crc32(0, (const Bytef *)buf + at + hdr, (uInt)len) != crc) {
			*torn = true;
			break;
		}
		if (arr) {
			json_error_t je;
			json_t *o = json_loadb(buf + at + hdr, len, 0, &je);
			if (!json_is_object(o)) {
				json_decref(o);
				*torn = true;
				break;
			}
			json_array_append_new(arr, o);
		}
		at += hdr + len + 1;
		(*count)++;
	}
	return at;
}

size_t hp_journal_parse(const char *buf, size_t n, json_t **records, bool *torn)
{
	size_t count;
	*records = json_array();
	return valid_prefix(buf, n, *records, &count, torn);
}

static int slurp_fd(int fd, char **out, size_t *len)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	char *b = malloc((size_t)st.st_size + 1);
	if (!b)
		return -ENOMEM;
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = pread(fd, b + got, (size_t)st.st_size - got, (off_t)got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	b[got] = 0;
	*out = b;
	*len = got;
	return 0;
}

int hp_journal_open(const char *path, struct hp_journal *j, char *err, size_t errlen)
{
	char *buf;
	size_t len, count;
	bool torn;
	struct stat st;
	int r;

	memset(j, 0, sizeof(*j));
	snprintf(j->path, sizeof(j->path), "%s", path);
	if ((j->fd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open the journal %s: %s", path, strerror(-r));
		return r;
	}
	if ((r = slurp_fd(j->fd, &buf, &len)) < 0 || fstat(j->fd, &st) < 0) {
		snprintf(err, errlen, "cannot read the journal %s: %s", path, strerror(r < 0 ? -r : errno));
		close(j->fd);
		j->fd = -1;
		return r < 0 ? r : -EIO;
	}
	j->end = valid_prefix(buf, len, NULL, &count, &torn);
	j->records = count;
	j->reserved = (uint64_t)st.st_size;
	free(buf);
	/* Clear a torn tail so the next record starts clean. */
	if (torn && j->end < j->reserved) {
		static const char zeros[256];
		for (uint64_t o = j->end; o < j->reserved; o += sizeof(zeros))
			if (pwrite(j->fd, zeros,
				   j->reserved - o < sizeof(zeros) ? (size_t)(j->reserved - o) : sizeof(zeros),
				   (off_t)o) < 0)
				break;
		fdatasync(j->fd);
	}
	return 0;
}

int hp_journal_append(struct hp_journal *j, json_t *const *recs, size_t n, char *err, size_t errlen)
{
	char *out = NULL;
	size_t olen = 0;
	FILE *mf = open_memstream(&out, &olen);
	int r;

	if (!mf) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		char *s = json_dumps(recs[i], JSON_COMPACT);
		if (!s) {
			fclose(mf);
			free(out);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		size_t sl = strlen(s);
		fprintf(mf, "HPJ1 %zu %08lx %s\n", sl, crc32(0, (const Bytef *)s, (uInt)sl), s);
		free(s);
	}
	fclose(mf);
	if ((r = reserve(j, j->end + olen + 1)) < 0) {
		snprintf(err, errlen, "cannot grow the journal %s: %s%s", j->path, strerror(-r),
			 r == -ENOSPC ? " (the state folder's disk is full)" : "");
		free(out);
		return r;
	}
	ssize_t w = pwrite(j->fd, out, olen, (off_t)j->end);
	free(out);
	if (w != (ssize_t)olen || fdatasync(j->fd) < 0) {
		r = w < 0 ? -errno : -EIO;
		if (r == -EIO && errno)
			r = -errno;
		snprintf(err, errlen, "cannot write the journal %s: %s", j->path, strerror(-r));
		/* Nothing after end counts: zero what may have landed. */
		return r;
	}
	j->end += olen;
	j->records += n;
	return 0;
}

int hp_journal_add(struct hp_journal *j, json_t *rec, char *err, size_t errlen)
{
	int r;
	if (!rec) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r = hp_journal_append(j, &rec, 1, err, errlen);
	json_decref(rec);
	return r;
}

int hp_journal_read(const char *path, json_t **records, bool *torn, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;
	char *buf;
	size_t len, count;

	*records = NULL;
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open the journal %s: %s", path, strerror(-r));
		return r;
	}
	r = slurp_fd(fd, &buf, &len);
	close(fd);
	if (r < 0) {
		snprintf(err, errlen, "cannot read the journal %s: %s", path, strerror(-r));
		return r;
	}
	*records = json_array();
	valid_prefix(buf, len, *records, &count, torn);
	free(buf);
	return 0;
}

int hp_journal_retire(struct hp_journal *j)
{
	int r = 0;

	if (unlink(j->path) < 0)
		r = -errno;
	else
		r = fsync_dir_of(j->path);
	hp_journal_close(j);
	return r;
}

void hp_journal_close(struct hp_journal *j)
{
	if (j->fd >= 0)
		close(j->fd);
	j->fd = -1;
}

int hp_write_file_durably(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
	char tmp[4200];
	int fd, r = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(-r));
		return r;
	}
	if (write(fd, data, len) != (ssize_t)len || fsync(fd) < 0)
		r = errno ? -errno : -EIO;
	close(fd);
	if (!r && rename(tmp, path) < 0)
		r = -errno;
	if (!r)
		r = fsync_dir_of(path);
	if (r) {
		unlink(tmp);
		snprintf(err, errlen, "cannot write %s: %s%s", path, strerror(-r),
			 r == -ENOSPC ? " (the state folder's disk is full)" : "");
	}
	return r;
}
