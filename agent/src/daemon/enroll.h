/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Enrolment: how an agent gets its identity. It sends a certificate signing
 * request for its host id (with a one-time enrolment token, or without one to
 * wait for an admin's approval) to AgentService.Enroll and stores the issued
 * certificate and the CA in its state folder.
 */
#ifndef HOTPATH_DAEMON_ENROLL_H
#define HOTPATH_DAEMON_ENROLL_H

#include <stdbool.h>
#include <stddef.h>

struct hp_enroll_opts {
	const char *server;    /* enrolment address, "host:port" */
	const char *state_dir; /* where the key, certificate and CA live */
	const char *host_id;   /* identity to enrol */
	const char *hostname;  /* shown to the admin who approves */
	const char *token;     /* one-time enrolment token; NULL asks for approval */
	const char *ca_file;   /* CA to verify the backend with; NULL: state_dir/ca.pem */
	bool wait;             /* keep asking every few seconds while approval is pending */
};

/* Enrol; 0 when the certificate is stored, -EAGAIN while approval is pending
 * (and !wait), -EACCES when refused, another negative errno otherwise; the
 * reason is in err. */
int hp_enroll(const struct hp_enroll_opts *o, char *err, size_t errlen);

/* The default enrolment address for an agent address: same host, port + 1. */
int hp_enroll_address(const char *server, char *out, size_t outlen);

#endif
