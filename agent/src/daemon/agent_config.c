/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the agent's config file: `label.NAME = VALUE` lines checked by the
 * backend's label rules, so a bad file stops the agent at start with the line
 * that is wrong (see agent_config.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/agent_config.h"

#define MAX_CONFIG_BYTES (64 * 1024)

static bool key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
	       c == '-' || c == '/';
}

static const char *trim(const char *s, const char *end, const char **out_end)
{
	while (s < end && (*s == ' ' || *s == '\t'))
		s++;
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		end--;
	*out_end = end;
	return s;
}

static int add_label(struct hp_agent_config *cfg, const char *k, size_t klen, const char *v, size_t vlen,
		     const char *name, unsigned line, char *err, size_t errlen)
{
	if (klen == 0 || klen > HP_MAX_LABEL_KEY) {
		snprintf(err, errlen, "%s:%u: a label name must be 1 to %d characters", name, line, HP_MAX_LABEL_KEY);
		return -EINVAL;
	}
	for (size_t i = 0; i < klen; i++)
		if (!key_char(k[i])) {
			snprintf(err, errlen, "%s:%u: a label name may hold only letters, digits, '.', '_', '-' or '/'",
				 name, line);
			return -EINVAL;
		}
	if (vlen > HP_MAX_LABEL_VALUE) {
		snprintf(err, errlen, "%s:%u: label %.*s: the value is %zu bytes long (at most %d)", name, line,
			 (int)klen, k, vlen, HP_MAX_LABEL_VALUE);
		return -EINVAL;
	}
	for (size_t i = 0; i < vlen; i++)
		if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) {
			snprintf(err, errlen, "%s:%u: label %.*s: the value holds a NUL or control character", name,
				 line, (int)klen, k);
			return -EINVAL;
		}
	for (size_t i = 0; i < cfg->nlabels; i++)
		if (strlen(cfg->labels[i].key) == klen && !memcmp(cfg->labels[i].key, k, klen)) {
			snprintf(err, errlen, "%s:%u: label %.*s is given twice", name, line, (int)klen, k);
			return -EINVAL;
		}
	if (cfg->nlabels == HP_MAX_LABELS) {
		snprintf(err, errlen, "%s:%u: more than %d labels", name, line, HP_MAX_LABELS);
		return -EINVAL;
	}
	struct hp_label *l = &cfg->labels[cfg->nlabels++];
	memcpy(l->key, k, klen);
	l->key[klen] = '\0';
	memcpy(l->value, v, vlen);
	l->value[vlen] = '\0';
	return 0;
}

int hp_agent_config_parse(const char *buf, size_t len, const char *name, struct hp_agent_config *cfg, char *err,
			  size_t errlen)
{
	memset(cfg, 0, sizeof(*cfg));
	const char *p = buf, *end = buf + len;
	for (unsigned line = 1; p < end; line++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end, *lend;
		const char *s = trim(p, eol, &lend);
		p = nl ? nl + 1 : end;
		if (s == lend || *s == '#')
			continue;
		const char *eq = memchr(s, '=', (size_t)(lend - s));
		if (!eq) {
			snprintf(err, errlen, "%s:%u: expected key = value", name, line);
			return -EINVAL;
		}
		const char *kend, *vend;
		const char *k = trim(s, eq, &kend);
		const char *v = trim(eq + 1, lend, &vend);
		if ((size_t)(kend - k) <= 6 || strncmp(k, "label.", 6) != 0) {
			snprintf(err, errlen, "%s:%u: unknown key %.*s (the keys are label.NAME)", name, line,
				 (int)(kend - k > 64 ? 64 : kend - k), k);
			return -EINVAL;
		}
		int r = add_label(cfg, k + 6, (size_t)(kend - k - 6), v, (size_t)(vend - v), name, line, err, errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

int hp_agent_config_load(const char *path, struct hp_agent_config *cfg, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	char *buf = malloc(MAX_CONFIG_BYTES + 1);
	int r = -ENOMEM;
	if (!buf) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto cleanup;
	}
	size_t n = 0;
	for (;;) {
		ssize_t got = read(fd, buf + n, MAX_CONFIG_BYTES + 1 - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			r = -errno;
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
			goto cleanup;
		}
		if (got == 0)
			break;
		n += (size_t)got;
		if (n > MAX_CONFIG_BYTES) {
			r = -EFBIG;
			snprintf(err, errlen, "%s: larger than %d bytes", path, MAX_CONFIG_BYTES);
			goto cleanup;
		}
	}
	r = hp_agent_config_parse(buf, n, path, cfg, err, errlen);
cleanup:
	free(buf);
	close(fd);
	return r;
}
