/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's credentials: its key, its host certificate and the CA it trusts,
 * kept in its state folder; the certificate signing request for enrolment;
 * and the one-time enrolment token, read from a file or HOTPATH_ENROLL_TOKEN.
 */
#ifndef HOTPATH_DAEMON_CREDENTIALS_H
#define HOTPATH_DAEMON_CREDENTIALS_H

#include <stddef.h>

/* Key, certificate and CA as NUL-terminated PEM text. */
struct hp_credentials {
	char *key_pem;
	char *cert_pem;
	char *ca_pem;
};

/* Read a token from path (or the environment when path is NULL), trimmed of
 * surrounding whitespace. Returns 0, or -1 with a one-line reason in err
 * (missing, unreadable, empty, or holding spaces or control characters). */
int hp_read_token(const char *path, char *out, size_t outlen, char *err, size_t errlen);

/* Read a whole file of at most max bytes into a malloc'd NUL-terminated
 * buffer; 0, or a negative errno with a reason in err. */
int hp_read_file(const char *path, size_t max, char **out, char *err, size_t errlen);

/* Create the state folder (mode 0700) if needed; 0 or a negative errno. */
int hp_state_dir_prepare(const char *dir, char *err, size_t errlen);

/* Load host.key, host.pem and ca.pem from dir; -ENOENT when not enrolled. */
int hp_credentials_load(const char *dir, struct hp_credentials *c, char *err, size_t errlen);
void hp_credentials_free(struct hp_credentials *c);

/* A PEM certificate signing request for host_id (its common name), signed
 * with dir/host.key, which is generated (P-256, mode 0600) on first use. */
int hp_credentials_csr(const char *dir, const char *host_id, char **csr_pem, char *err, size_t errlen);

/* Store an issued certificate and the CA (mode 0600). */
int hp_credentials_store(const char *dir, const char *cert_pem, const char *ca_pem, char *err, size_t errlen);

#endif
