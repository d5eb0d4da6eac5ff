/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's credential for the backend: a bearer token read from a file or
 * from the HOTPATH_AGENT_TOKEN environment variable.
 */
#ifndef HOTPATH_DAEMON_CREDENTIALS_H
#define HOTPATH_DAEMON_CREDENTIALS_H

#include <stddef.h>

/* Read the token from path (or the environment when path is NULL), trimmed of
 * surrounding whitespace. Returns 0, or -1 with a one-line reason in err
 * (missing, unreadable, empty, or holding spaces or control characters). */
int hp_read_token(const char *path, char *out, size_t outlen, char *err, size_t errlen);

#endif
