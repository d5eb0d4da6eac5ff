// SPDX-License-Identifier: Apache-2.0
#include "base/file_replace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int hp_file_replace(const char *path, const char *buf, size_t len, char *why, size_t whylen)
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
