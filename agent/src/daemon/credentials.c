/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the agent token. Files usually end in a newline, so surrounding
 * whitespace is trimmed; anything else outside printable ASCII is refused,
 * because the token travels as gRPC metadata.
 */
#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/credentials.h"

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int hp_read_token(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
	if (!path) {
		const char *env = getenv("HOTPATH_AGENT_TOKEN");
		if (!env || !*env) {
			snprintf(err, errlen, "no agent token: pass --token-file FILE or set HOTPATH_AGENT_TOKEN");
			return -1;
		}
		snprintf(out, outlen, "%s", env);
	} else {
		FILE *f = fopen(path, "re");
		if (!f) {
			snprintf(err, errlen, "cannot read token file %s: %s", path, strerror(errno));
			return -1;
		}
		size_t n = fread(out, 1, outlen - 1, f);
		fclose(f);
		out[n] = '\0';
	}
	/* Trim surrounding whitespace. */
	char *s = out;
	while (is_space(*s))
		s++;
	memmove(out, s, strlen(s) + 1);
	size_t n = strlen(out);
	while (n && is_space(out[n - 1]))
		out[--n] = '\0';
	if (!n) {
		snprintf(err, errlen, "the agent token%s%s is empty", path ? " in " : "", path ? path : "");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)out[i] < 0x21 || (unsigned char)out[i] > 0x7e) {
			snprintf(err, errlen, "the agent token contains a space or control character");
			return -1;
		}
	}
	return 0;
}
