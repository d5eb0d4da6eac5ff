// SPDX-License-Identifier: Apache-2.0
#include "base/private_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int hp_private_file_read(const char *path, uid_t owner, size_t max, char **buf, size_t *len, char *why, size_t whylen)
{
	struct stat st;
	char *b = NULL;
	size_t got = 0;
	int fd, r;

	*buf = NULL;
	*len = 0;
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		r = -errno;
		if (r != -ENOENT)
			snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		snprintf(why, whylen, "cannot stat %s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != owner || (st.st_mode & 077)) {
		r = -EPERM;
		if (owner == 0)
			snprintf(why, whylen, "%s is not a file only root can read and write", path);
		else
			snprintf(why, whylen, "%s is not a file only user %u can read and write", path,
				 (unsigned)owner);
		goto fail;
	}
	if ((uint64_t)st.st_size > max) {
		r = -EBADMSG;
		snprintf(why, whylen, "%s has %lld bytes, more than any cache", path, (long long)st.st_size);
		goto fail;
	}
	if (!(b = malloc((size_t)st.st_size + 1))) {
		r = -ENOMEM;
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	while (got < (size_t)st.st_size) {
		ssize_t m = read(fd, b + got, (size_t)st.st_size - got);
		if (m <= 0) {
			r = m < 0 ? -errno : -EBADMSG;
			snprintf(why, whylen, "reading %s failed", path);
			goto fail;
		}
		got += (size_t)m;
	}
	close(fd);
	b[got] = '\0';
	*buf = b;
	*len = got;
	return 0;
fail:
	free(b);
	close(fd);
	return r;
}

int hp_private_file_replace(const char *path, const char *buf, size_t len, char *why, size_t whylen)
{
	char tmp[4200];
	size_t put = 0;
	int fd, r;

	if (snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
		snprintf(why, whylen, "the path %.80s... is too long", path);
		return -ENAMETOOLONG;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
		r = -errno;
		snprintf(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
		return r;
	}
	while (put < len) {
		ssize_t m = write(fd, buf + put, len - put);
		if (m <= 0) {
			r = m < 0 ? -errno : -EIO;
			snprintf(why, whylen, "writing %s failed", tmp);
			close(fd);
			unlink(tmp);
			return r;
		}
		put += (size_t)m;
	}
	if (close(fd) < 0) {
		r = -errno;
		snprintf(why, whylen, "writing %s failed", tmp);
		unlink(tmp);
		return r;
	}
	if (rename(tmp, path) < 0) {
		r = -errno;
		snprintf(why, whylen, "cannot rename %s: %s", tmp, strerror(errno));
		unlink(tmp);
		return r;
	}
	return 0;
}
