/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's identity on disk, in its state folder (mode 0700): its private
 * key (host.key, an ECDSA P-256 key generated here and never sent anywhere),
 * the certificate the backend issued for it at enrolment (host.pem) and the
 * CA certificate it verifies the backend with (ca.pem), all mode 0600. Also
 * the certificate signing request enrolment sends, and reading a one-time
 * enrolment token from a file. Files are written to a temporary name and
 * renamed, so a crash never leaves half a credential.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "daemon/credentials.h"

#define MAX_PEM (64 * 1024)

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int hp_read_token(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
	if (!path) {
		const char *env = getenv("HOTPATH_ENROLL_TOKEN");
		if (!env || !*env) {
			snprintf(err, errlen, "no enrolment token: pass --token-file FILE or set HOTPATH_ENROLL_TOKEN");
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
		snprintf(err, errlen, "the enrolment token%s%s is empty", path ? " in " : "", path ? path : "");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)out[i] < 0x21 || (unsigned char)out[i] > 0x7e) {
			snprintf(err, errlen, "the enrolment token contains a space or control character");
			return -1;
		}
	}
	return 0;
}

int hp_read_file(const char *path, size_t max, char **out, char *err, size_t errlen)
{
	*out = NULL;
	FILE *f = fopen(path, "re");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
		return -e;
	}
	char *buf = malloc(max + 1);
	if (!buf) {
		fclose(f);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	size_t n = fread(buf, 1, max + 1, f);
	fclose(f);
	if (n > max) {
		free(buf);
		snprintf(err, errlen, "%s is larger than %zu bytes", path, max);
		return -EFBIG;
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

/* Write data to dir/name with mode 0600, through a temporary file and rename. */
static int write_private(const char *dir, const char *name, const char *data, size_t len, char *err, size_t errlen)
{
	char path[4096], tmp[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(e));
		return -e;
	}
	fchmod(fd, 0600);
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(e));
			return -e;
		}
		off += (size_t)w;
	}
	if (fsync(fd) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		snprintf(err, errlen, "cannot store %s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

int hp_state_dir_prepare(const char *dir, char *err, size_t errlen)
{
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int e = errno;
		snprintf(err, errlen, "cannot create the state folder %s: %s", dir, strerror(e));
		return -e;
	}
	if (chmod(dir, 0700) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot make the state folder %s private: %s", dir, strerror(e));
		return -e;
	}
	return 0;
}

void hp_credentials_free(struct hp_credentials *c)
{
	if (c->key_pem)
		OPENSSL_cleanse(c->key_pem, strlen(c->key_pem));
	free(c->key_pem);
	free(c->cert_pem);
	free(c->ca_pem);
	memset(c, 0, sizeof(*c));
}

int hp_credentials_load(const char *dir, struct hp_credentials *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	char path[4096];
	const char *names[] = { "host.key", "host.pem", "ca.pem" };
	char **slots[] = { &c->key_pem, &c->cert_pem, &c->ca_pem };
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		int r = hp_read_file(path, MAX_PEM, slots[i], err, errlen);
		if (r < 0) {
			hp_credentials_free(c);
			if (r == -ENOENT)
				snprintf(err, errlen, "this agent is not enrolled yet (no %s)", path);
			return r;
		}
	}
	return 0;
}

/* Load dir/host.key, or generate a P-256 key and store it. */
static EVP_PKEY *host_key(const char *dir, char *err, size_t errlen)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/host.key", dir);
	FILE *f = fopen(path, "re");
	if (f) {
		EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
		fclose(f);
		if (!k)
			snprintf(err, errlen, "%s is not a PEM private key", path);
		return k;
	}
	if (errno != ENOENT) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return NULL;
	}
	EVP_PKEY *k = EVP_EC_gen("P-256");
	BIO *b = BIO_new(BIO_s_mem());
	char *pem = NULL;
	long n = 0;
	if (!k || !b || PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) != 1 ||
	    (n = BIO_get_mem_data(b, &pem)) <= 0 || write_private(dir, "host.key", pem, (size_t)n, err, errlen) < 0) {
		if (!*err)
			snprintf(err, errlen, "cannot generate the host key (OpenSSL)");
		EVP_PKEY_free(k);
		k = NULL;
	}
	BIO_free(b);
	return k;
}

int hp_credentials_csr(const char *dir, const char *host_id, char **csr_pem, char *err, size_t errlen)
{
	*csr_pem = NULL;
	err[0] = '\0';
	int ret = -EIO;
	EVP_PKEY *key = host_key(dir, err, errlen);
	X509_REQ *req = X509_REQ_new();
	BIO *b = BIO_new(BIO_s_mem());
	if (!key || !req || !b)
		goto out;
	X509_NAME *name = X509_REQ_get_subject_name(req);
	if (X509_REQ_set_version(req, 0) != 1 ||
	    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)host_id, -1, -1, 0) != 1 ||
	    X509_REQ_set_pubkey(req, key) != 1 || X509_REQ_sign(req, key, EVP_sha256()) <= 0 ||
	    PEM_write_bio_X509_REQ(b, req) != 1) {
		snprintf(err, errlen, "cannot build the certificate signing request (OpenSSL)");
		goto out;
	}
	char *data;
	long n = BIO_get_mem_data(b, &data);
	*csr_pem = malloc((size_t)n + 1);
	if (!*csr_pem) {
		snprintf(err, errlen, "out of memory");
		ret = -ENOMEM;
		goto out;
	}
	memcpy(*csr_pem, data, (size_t)n);
	(*csr_pem)[n] = '\0';
	ret = 0;
out:
	BIO_free(b);
	X509_REQ_free(req);
	EVP_PKEY_free(key);
	return ret;
}

int hp_credentials_store(const char *dir, const char *cert_pem, const char *ca_pem, char *err, size_t errlen)
{
	int r = write_private(dir, "ca.pem", ca_pem, strlen(ca_pem), err, errlen);
	if (r == 0)
		r = write_private(dir, "host.pem", cert_pem, strlen(cert_pem), err, errlen);
	return r;
}
