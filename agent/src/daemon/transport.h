/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's one gRPC stream to the backend (AgentService.Connect), over the
 * gRPC core C API. Messages cross this interface as packed protobuf bytes;
 * the caller owns framing into AgentMessage/ServerMessage. The stream is
 * driven by the caller's thread through hp_stream_poll, which also starts
 * queued sends, so no locking is needed around it.
 */
#ifndef HOTPATH_TRANSPORT_H
#define HOTPATH_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hp_stream;
struct hp_credentials;

/* Process-wide gRPC setup and teardown (grpc_init / grpc_shutdown). */
void hp_transport_init(void);
void hp_transport_shutdown(void);

/*
 * Start a Connect call to target ("host:port") over mutual TLS with the
 * host's key and certificate, verifying the backend against the CA in id.
 * Returns NULL with a reason in err if the call cannot even be created;
 * connection failures show up later as the stream ending.
 */
struct hp_stream *hp_stream_open(const char *target, const struct hp_credentials *id, char *err, size_t errlen);

/* Queue a packed AgentMessage; the stream takes ownership of buf (malloc'd). */
int hp_stream_send(struct hp_stream *st, uint8_t *buf, size_t len);
/* Messages queued or in flight. */
size_t hp_stream_pending(const struct hp_stream *st);

enum hp_stream_event {
	HP_STREAM_IDLE = 0, /* nothing arrived before the timeout */
	HP_STREAM_MESSAGE,  /* msg and len hold one packed ServerMessage (free it) */
	HP_STREAM_ENDED,    /* the call is over; see hp_stream_status */
};

/* Drive the stream for at most timeout_ms. */
enum hp_stream_event hp_stream_poll(struct hp_stream *st, int timeout_ms, uint8_t **msg, size_t *len);

/* Why the call ended: gRPC status code (0 = OK), details text. */
int hp_stream_status(const struct hp_stream *st, const char **details);
/* Name of a gRPC status code, e.g. "UNAUTHENTICATED". */
const char *hp_grpc_status_name(int code);

/*
 * One unary call of method (e.g. "/hotpath.v1.AgentService/Enroll") over TLS
 * verified against ca_pem, with no client certificate. Returns the gRPC
 * status code (0 = OK, then *resp holds the malloc'd answer) or -1 if the
 * call could not run; details holds the status text.
 */
int hp_unary_call(const char *target, const char *ca_pem, const char *method, const uint8_t *req, size_t reqlen,
		  int timeout_ms, uint8_t **resp, size_t *resplen, char *details, size_t detlen);

/* Cancel the call (it then ends with CANCELLED). */
void hp_stream_cancel(struct hp_stream *st);
/* Tear down call, queue and channel; waits for outstanding operations. */
void hp_stream_close(struct hp_stream *st);

#endif
