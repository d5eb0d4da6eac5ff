/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Enrolment over AgentService.Enroll (server-authenticated TLS on the
 * enrolment port). The key is created or reused by daemon/credentials.c and
 * never leaves the host; only its certificate signing request is sent. While
 * an admin has not yet approved a request made without a token, the backend
 * answers FAILED_PRECONDITION and, with `wait`, the request is repeated every
 * few seconds until it is approved or refused, or a stop is requested.
 */
#include <errno.h>
#include <grpc/status.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/agent.h"
#include "daemon/credentials.h"
#include "daemon/enroll.h"
#include "daemon/log.h"
#include "daemon/transport.h"

#define POLL_MS 5000

int hp_enroll_address(const char *server, char *out, size_t outlen)
{
	const char *colon = strrchr(server, ':');
	char *end;
	long port = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || *end || port <= 0 || port >= 65535)
		return -EINVAL;
	snprintf(out, outlen, "%.*s:%ld", (int)(colon - server), server, port + 1);
	return 0;
}

static int ask(const struct hp_enroll_opts *o, const char *ca_pem, const char *csr, char *err, size_t errlen)
{
	Hotpath__V1__EnrollRequest req = HOTPATH__V1__ENROLL_REQUEST__INIT;
	req.host_id = (char *)o->host_id;
	req.hostname = (char *)o->hostname;
	req.token = (char *)(o->token ? o->token : "");
	req.csr_pem = (char *)csr;
	size_t n = hotpath__v1__enroll_request__get_packed_size(&req);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	hotpath__v1__enroll_request__pack(&req, buf);
	uint8_t *resp = NULL;
	size_t rlen = 0;
	char details[512];
	int code = hp_unary_call(o->server, ca_pem, "/hotpath.v1.AgentService/Enroll", buf, n, 20000, &resp, &rlen,
				 details, sizeof(details));
	free(buf);
	if (code != GRPC_STATUS_OK) {
		snprintf(err, errlen, "enrolment at %s: %s%s%s", o->server,
			 code >= 0 ? hp_grpc_status_name(code) : "failed", *details ? ": " : "", details);
		free(resp);
		if (code == GRPC_STATUS_FAILED_PRECONDITION)
			return -EAGAIN;
		if (code == GRPC_STATUS_PERMISSION_DENIED || code == GRPC_STATUS_UNAUTHENTICATED ||
		    code == GRPC_STATUS_INVALID_ARGUMENT)
			return -EACCES;
		return -EIO;
	}
	Hotpath__V1__EnrollResponse *r = hotpath__v1__enroll_response__unpack(NULL, rlen, resp);
	free(resp);
	if (!r || !r->certificate_pem || !*r->certificate_pem || !r->ca_pem || !*r->ca_pem) {
		if (r)
			hotpath__v1__enroll_response__free_unpacked(r, NULL);
		snprintf(err, errlen, "enrolment at %s: the answer carries no certificate", o->server);
		return -EIO;
	}
	int ret = hp_credentials_store(o->state_dir, r->certificate_pem, r->ca_pem, err, errlen);
	hotpath__v1__enroll_response__free_unpacked(r, NULL);
	return ret;
}

int hp_enroll(const struct hp_enroll_opts *o, char *err, size_t errlen)
{
	char path[4096], *ca_pem = NULL, *csr = NULL;
	int r = hp_state_dir_prepare(o->state_dir, err, errlen);
	if (r < 0)
		return r;
	if (o->ca_file) {
		snprintf(path, sizeof(path), "%s", o->ca_file);
	} else {
		snprintf(path, sizeof(path), "%s/ca.pem", o->state_dir);
	}
	if ((r = hp_read_file(path, 64 * 1024, &ca_pem, err, errlen)) < 0) {
		if (r == -ENOENT)
			snprintf(err, errlen,
				 "no CA certificate to verify the backend with: pass --ca-file FILE (the "
				 "backend's tls/ca.pem, also in the answer that creates an enrolment token)");
		return r;
	}
	if ((r = hp_credentials_csr(o->state_dir, o->host_id, &csr, err, errlen)) < 0)
		goto out;
	for (;;) {
		r = ask(o, ca_pem, csr, err, errlen);
		if (r != -EAGAIN || !o->wait || hp_stop_requested)
			break;
		hp_log(true, "%s; asking again in %d s", err, POLL_MS / 1000);
		for (int i = 0; i < POLL_MS / 100 && !hp_stop_requested; i++) {
			struct timespec ts = { 0, 100 * 1000000L };
			nanosleep(&ts, NULL);
		}
	}
	if (r == 0)
		hp_log(true, "enrolled as host %s; credentials stored in %s", o->host_id, o->state_dir);
out:
	free(csr);
	free(ca_pem);
	return r;
}
