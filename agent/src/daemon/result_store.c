// SPDX-License-Identifier: Apache-2.0
/*
 * The kept results of InstallPlan and RevertPlan (see result_store.h): one
 * file per command under STATE/results/, named by the SHA-256 of the
 * command id (ids are any text up to 127 bytes; the hash makes a safe,
 * fixed-length name), holding the packed AgentMessage the agent sent.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/grow.h"
#include "base/hex.h"
#include "daemon/result_store.h"

#define MAX_RESULT_BYTES (1u << 20)

static int path_of(const char *state_dir, const char *id, char *out, size_t len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (!EVP_Digest(id, strlen(id), md, &mdlen, EVP_sha256(), NULL))
		return -EIO;
	char hex[2 * EVP_MAX_MD_SIZE + 1];
	hp_hex(md, mdlen, hex);
	int n = snprintf(out, len, "%s/results/%s.result", state_dir, hex);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Remove the oldest results beyond HP_RESULT_STORE_MAX. */
static void prune(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct kept {
		char name[80];
		time_t mtime;
	} *all = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (!strstr(e->d_name, ".result") || strlen(e->d_name) >= sizeof(all->name) ||
		    fstatat(dirfd(d), e->d_name, &st, 0) < 0)
			continue;
		if (HP_GROW(all, cap, n + 1))
			break;
		snprintf(all[n].name, sizeof(all[n].name), "%s", e->d_name);
		all[n++].mtime = st.st_mtime;
	}
	while (n > HP_RESULT_STORE_MAX) {
		size_t oldest = 0;
		for (size_t i = 1; i < n; i++)
			if (all[i].mtime < all[oldest].mtime)
				oldest = i;
		unlinkat(dirfd(d), all[oldest].name, 0);
		all[oldest] = all[--n];
	}
	free(all);
	closedir(d);
}

int hp_result_store_put(const char *state_dir, const char *id, const uint8_t *buf, size_t len)
{
	char path[4200], tmp[4300], dir[4200];
	int r = path_of(state_dir, id, path, sizeof(path));
	if (r < 0)
		return r;
	snprintf(dir, sizeof(dir), "%s/results", state_dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	size_t off = 0;
	r = 0;
	while (off < len) {
		ssize_t w = write(fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			r = w < 0 ? -errno : -EIO;
			goto out;
		}
		off += (size_t)w;
	}
	if (fsync(fd) < 0) {
		r = -errno;
		goto out;
	}
	if (rename(tmp, path) < 0)
		r = -errno;
out:
	close(fd);
	if (r < 0)
		unlink(tmp);
	else
		prune(dir);
	return r;
}

int hp_result_store_get(const char *state_dir, const char *id, uint8_t **buf, size_t *len)
{
	char path[4200];
	*buf = NULL;
	*len = 0;
	int r = path_of(state_dir, id, path, sizeof(path));
	if (r < 0)
		return r;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	uint8_t *b = NULL;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (st.st_size <= 0 || st.st_size > MAX_RESULT_BYTES) {
		r = -EBADMSG;
		goto out;
	}
	b = malloc((size_t)st.st_size);
	if (!b) {
		r = -ENOMEM;
		goto out;
	}
	size_t off = 0;
	while (off < (size_t)st.st_size) {
		ssize_t g = read(fd, b + off, (size_t)st.st_size - off);
		if (g < 0 && errno == EINTR)
			continue;
		if (g <= 0) {
			r = g < 0 ? -errno : -EIO;
			goto out;
		}
		off += (size_t)g;
	}
	*buf = b;
	*len = off;
	b = NULL;
out:
	free(b);
	close(fd);
	return r;
}
