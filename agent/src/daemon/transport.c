/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gRPC core client for AgentService.Connect.
 *
 * Pattern: one channel, one completion queue and one call per connection
 * attempt, all driven by the daemon's main thread. hp_stream_poll starts the
 * next queued send when none is in flight, then waits on the completion
 * queue with a short deadline, so the same loop also gets to sample
 * intervals, commands and shutdown requests. At most one SEND_MESSAGE and one
 * RECV_MESSAGE batch are outstanding at any time (gRPC's rule for streams);
 * RECV_STATUS_ON_CLIENT is posted once at the start and completes when the
 * call ends for any reason, carrying the status code and details we log.
 * A fresh channel per attempt keeps the reconnect backoff entirely in the
 * daemon's hands rather than in the channel's own (much longer) one.
 *
 * Messages are protobuf-c packed bytes carried in raw byte buffers. A dead
 * connection is found by HTTP/2 keepalive pings (HP_KEEPALIVE_MS, each
 * answered within HP_KEEPALIVE_TIMEOUT_MS or the call fails), which the
 * peer's transport answers even while its application reads nothing: TCP
 * alone would take many minutes to give up on a dead network. A send that
 * stays in flight for HP_SEND_STALL_MS also cancels the call; that bounds a
 * backend that is alive but has stopped reading this stream, and is long,
 * because a loaded backend may read slowly for a while (a catalog upload
 * restarted every time it did would never end).
 *
 * Every channel is TLS: the stream presents the host's certificate (mutual
 * TLS) and both it and enrolment verify the backend against the
 * installation's CA. hp_unary_call runs one request/response call (Enroll)
 * as a single batch of operations with a deadline.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "daemon/credentials.h"
#include "daemon/plan_commands.h"
#include "daemon/transport.h"

#define HP_SEND_STALL_S         300
#define HP_SEND_STALL_MS        (HP_SEND_STALL_S * 1000)
#define HP_STR_(x)              #x
#define HP_STR(x)               HP_STR_(x)
/* The backend permits a ping every 10 s (grpc.http2.min_ping_interval_without_data_ms). */
#define HP_KEEPALIVE_MS         20000
#define HP_KEEPALIVE_TIMEOUT_MS 20000

enum { TAG_START = 1, TAG_STATUS, TAG_RECV, TAG_SEND };

struct outmsg {
	struct outmsg *next;
	uint8_t *buf;
	size_t len;
};

struct hp_stream {
	grpc_channel *channel;
	grpc_completion_queue *cq;
	grpc_call *call;
	grpc_metadata_array init_md, trailing_md;
	grpc_byte_buffer *recv_buf, *send_buf;
	grpc_status_code status;
	grpc_slice details;
	const char *error_string;
	char details_str[512];
	int outstanding; /* batches started, not yet completed */
	bool start_busy, status_busy, recv_busy, send_busy;
	bool ended;  /* status received */
	bool broken; /* a send failed: no further sends */
	struct timespec send_started;
	struct outmsg *qhead, *qtail;
	size_t qlen;
};

static void *tag(int t)
{
	return (void *)(intptr_t)t;
}

void hp_transport_init(void)
{
	grpc_init();
}

void hp_transport_shutdown(void)
{
	grpc_shutdown();
}

const char *hp_grpc_status_name(int code)
{
	static const char *const names[] = {
		"OK",        "CANCELLED",       "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
		"NOT_FOUND", "ALREADY_EXISTS",  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
		"ABORTED",   "OUT_OF_RANGE",    "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
		"DATA_LOSS", "UNAUTHENTICATED",
	};
	if (code >= 0 && (size_t)code < sizeof(names) / sizeof(names[0]))
		return names[code];
	return "UNKNOWN_STATUS";
}

static int start_batch(struct hp_stream *st, const grpc_op *ops, size_t n, int t)
{
	grpc_call_error e = grpc_call_start_batch(st->call, ops, n, tag(t), NULL);
	if (e != GRPC_CALL_OK)
		return -EIO;
	st->outstanding++;
	return 0;
}

static int start_recv(struct hp_stream *st, bool with_initial_metadata)
{
	grpc_op ops[2];
	size_t n = 0;
	memset(ops, 0, sizeof(ops));
	if (with_initial_metadata) {
		ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
		ops[n].data.recv_initial_metadata.recv_initial_metadata = &st->init_md;
		n++;
	}
	ops[n].op = GRPC_OP_RECV_MESSAGE;
	ops[n].data.recv_message.recv_message = &st->recv_buf;
	n++;
	st->recv_buf = NULL;
	if (start_batch(st, ops, n, TAG_RECV) < 0)
		return -EIO;
	st->recv_busy = true;
	return 0;
}

/* A TLS channel to target trusting ca_pem, presenting key/cert when given. */
static grpc_channel *tls_channel(const char *target, const char *ca_pem, const char *key_pem, const char *cert_pem)
{
	grpc_arg args[] = {
		{ .type = GRPC_ARG_STRING,
		  .key = (char *)GRPC_ARG_PRIMARY_USER_AGENT_STRING,
		  .value.string = (char *)"hotpathd/0.1.0" },
		/* gRPC's default (4 MiB) would refuse an InstallPlan of a large plan. */
		{ .type = GRPC_ARG_INTEGER,
		  .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
		  .value.integer = (int)HP_MAX_RECEIVE_BYTES },
		{ .type = GRPC_ARG_INTEGER,
		  .key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS,
		  .value.integer = HP_KEEPALIVE_MS },
		{ .type = GRPC_ARG_INTEGER,
		  .key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
		  .value.integer = HP_KEEPALIVE_TIMEOUT_MS },
		/* Pings also while a send waits for the peer's window: that is no data sent. */
		{ .type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, .value.integer = 0 },
	};
	grpc_channel_args cargs = { .num_args = sizeof(args) / sizeof(args[0]), .args = args };
	grpc_ssl_pem_key_cert_pair pair = { .private_key = key_pem, .cert_chain = cert_pem };
	grpc_channel_credentials *creds =
		grpc_ssl_credentials_create(ca_pem, key_pem && cert_pem ? &pair : NULL, NULL, NULL);
	if (!creds)
		return NULL;
	grpc_channel *ch = grpc_channel_create(target, creds, &cargs);
	grpc_channel_credentials_release(creds);
	return ch;
}

struct hp_stream *hp_stream_open(const char *target, const struct hp_credentials *id, char *err, size_t errlen)
{
	struct hp_stream *st = calloc(1, sizeof(*st));
	if (!st) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	grpc_metadata_array_init(&st->init_md);
	grpc_metadata_array_init(&st->trailing_md);
	st->details = grpc_empty_slice();

	st->channel = tls_channel(target, id->ca_pem, id->key_pem, id->cert_pem);
	st->cq = grpc_completion_queue_create_for_next(NULL);
	if (!st->channel || !st->cq) {
		snprintf(err, errlen, "cannot create a gRPC channel to %s", target);
		goto fail;
	}
	st->call = grpc_channel_create_call(st->channel, NULL, GRPC_PROPAGATE_DEFAULTS, st->cq,
					    grpc_slice_from_static_string("/hotpath.v1.AgentService/Connect"), NULL,
					    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	if (!st->call) {
		snprintf(err, errlen, "cannot create the Connect call to %s", target);
		goto fail;
	}
	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_INITIAL_METADATA;
	op.data.send_initial_metadata.count = 0;
	if (start_batch(st, &op, 1, TAG_START) < 0) {
		snprintf(err, errlen, "cannot start the Connect call");
		goto fail;
	}
	st->start_busy = true;

	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	op.data.recv_status_on_client.trailing_metadata = &st->trailing_md;
	op.data.recv_status_on_client.status = &st->status;
	op.data.recv_status_on_client.status_details = &st->details;
	op.data.recv_status_on_client.error_string = &st->error_string;
	if (start_batch(st, &op, 1, TAG_STATUS) < 0) {
		snprintf(err, errlen, "cannot start the Connect call (status)");
		goto fail;
	}
	st->status_busy = true;
	if (start_recv(st, true) < 0) {
		snprintf(err, errlen, "cannot start receiving on the Connect call");
		goto fail;
	}
	return st;
fail:
	hp_stream_close(st);
	return NULL;
}

int hp_stream_send(struct hp_stream *st, uint8_t *buf, size_t len)
{
	struct outmsg *m = malloc(sizeof(*m));
	if (!m) {
		free(buf);
		return -ENOMEM;
	}
	m->next = NULL;
	m->buf = buf;
	m->len = len;
	if (st->qtail)
		st->qtail->next = m;
	else
		st->qhead = m;
	st->qtail = m;
	st->qlen++;
	return 0;
}

size_t hp_stream_pending(const struct hp_stream *st)
{
	return st->qlen;
}

static void free_buf(void *p)
{
	free(p);
}

static void maybe_start_send(struct hp_stream *st)
{
	if (st->send_busy || !st->qhead || st->ended || st->broken)
		return;
	struct outmsg *m = st->qhead;
	/* The slice takes the buffer over: no copy of large catalog chunks. */
	grpc_slice s = grpc_slice_new(m->buf, m->len, free_buf);
	m->buf = NULL;
	st->send_buf = grpc_raw_byte_buffer_create(&s, 1);
	grpc_slice_unref(s);
	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = st->send_buf;
	if (start_batch(st, &op, 1, TAG_SEND) < 0) {
		grpc_byte_buffer_destroy(st->send_buf);
		st->send_buf = NULL;
		st->broken = true;
		return;
	}
	st->send_busy = true;
	clock_gettime(CLOCK_MONOTONIC, &st->send_started);
}

static void pop_sent(struct hp_stream *st)
{
	struct outmsg *m = st->qhead;
	if (!m)
		return;
	st->qhead = m->next;
	if (!st->qhead)
		st->qtail = NULL;
	st->qlen--;
	free(m->buf);
	free(m);
}

static bool send_stalled(const struct hp_stream *st)
{
	if (!st->send_busy)
		return false;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	long ms = (now.tv_sec - st->send_started.tv_sec) * 1000 + (now.tv_nsec - st->send_started.tv_nsec) / 1000000;
	return ms > HP_SEND_STALL_MS;
}

static void record_status(struct hp_stream *st)
{
	size_t n = GRPC_SLICE_LENGTH(st->details);
	if (n >= sizeof(st->details_str))
		n = sizeof(st->details_str) - 1;
	memcpy(st->details_str, GRPC_SLICE_START_PTR(st->details), n);
	st->details_str[n] = '\0';
	if (!n && st->error_string)
		snprintf(st->details_str, sizeof(st->details_str), "%s", st->error_string);
}

/* Handle one completion; returns a message event if it carried one. */
static enum hp_stream_event handle(struct hp_stream *st, grpc_event ev, uint8_t **msg, size_t *len)
{
	st->outstanding--;
	switch ((int)(intptr_t)ev.tag) {
	case TAG_START:
		st->start_busy = false;
		break;
	case TAG_STATUS:
		st->status_busy = false;
		st->ended = true;
		record_status(st);
		break;
	case TAG_SEND:
		st->send_busy = false;
		grpc_byte_buffer_destroy(st->send_buf);
		st->send_buf = NULL;
		pop_sent(st);
		if (!ev.success)
			st->broken = true;
		break;
	case TAG_RECV: {
		st->recv_busy = false;
		grpc_byte_buffer *bb = st->recv_buf;
		st->recv_buf = NULL;
		if (!ev.success || !bb) {
			/* The server closed its side; the status follows. */
			if (bb)
				grpc_byte_buffer_destroy(bb);
			break;
		}
		grpc_byte_buffer_reader rd;
		uint8_t *out = NULL;
		size_t n = 0;
		if (grpc_byte_buffer_reader_init(&rd, bb)) {
			grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
			n = GRPC_SLICE_LENGTH(s);
			out = malloc(n ? n : 1);
			if (out)
				memcpy(out, GRPC_SLICE_START_PTR(s), n);
			grpc_slice_unref(s);
			grpc_byte_buffer_reader_destroy(&rd);
		}
		grpc_byte_buffer_destroy(bb);
		if (!st->ended)
			start_recv(st, false);
		if (out) {
			*msg = out;
			*len = n;
			return HP_STREAM_MESSAGE;
		}
		break;
	}
	}
	return HP_STREAM_IDLE;
}

enum hp_stream_event hp_stream_poll(struct hp_stream *st, int timeout_ms, uint8_t **msg, size_t *len)
{
	*msg = NULL;
	*len = 0;
	if (send_stalled(st)) {
		grpc_call_cancel_with_status(st->call, GRPC_STATUS_UNAVAILABLE,
					     "a send made no progress for " HP_STR(HP_SEND_STALL_S) " s", NULL);
	}
	gpr_timespec deadline =
		gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
	for (;;) {
		maybe_start_send(st);
		if (st->ended && !st->recv_busy)
			return HP_STREAM_ENDED;
		grpc_event ev = grpc_completion_queue_next(st->cq, deadline, NULL);
		if (ev.type == GRPC_QUEUE_TIMEOUT)
			return HP_STREAM_IDLE;
		if (ev.type != GRPC_OP_COMPLETE)
			return HP_STREAM_ENDED;
		if (handle(st, ev, msg, len) == HP_STREAM_MESSAGE)
			return HP_STREAM_MESSAGE;
	}
}

int hp_stream_status(const struct hp_stream *st, const char **details)
{
	if (details)
		*details = st->details_str;
	return st->ended ? (int)st->status : -1;
}

void hp_stream_cancel(struct hp_stream *st)
{
	if (st && st->call)
		grpc_call_cancel(st->call, NULL);
}

void hp_stream_close(struct hp_stream *st)
{
	if (!st)
		return;
	if (st->call) {
		if (st->outstanding)
			grpc_call_cancel(st->call, NULL);
		while (st->outstanding > 0) {
			grpc_event ev = grpc_completion_queue_next(st->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
			if (ev.type != GRPC_OP_COMPLETE)
				break;
			uint8_t *m = NULL;
			size_t n;
			st->ended = true; /* no new receives */
			if (handle(st, ev, &m, &n) == HP_STREAM_MESSAGE)
				free(m);
		}
		grpc_call_unref(st->call);
	}
	if (st->cq) {
		grpc_completion_queue_shutdown(st->cq);
		while (grpc_completion_queue_next(st->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
		       GRPC_QUEUE_SHUTDOWN)
			;
		grpc_completion_queue_destroy(st->cq);
	}
	if (st->channel)
		grpc_channel_destroy(st->channel);
	while (st->qhead)
		pop_sent(st);
	grpc_metadata_array_destroy(&st->init_md);
	grpc_metadata_array_destroy(&st->trailing_md);
	grpc_slice_unref(st->details);
	if (st->error_string)
		gpr_free((void *)st->error_string);
	free(st);
}

int hp_unary_call(const char *target, const char *ca_pem, const char *method, const uint8_t *req, size_t reqlen,
		  int timeout_ms, uint8_t **resp, size_t *resplen, char *details, size_t detlen)
{
	*resp = NULL;
	*resplen = 0;
	details[0] = '\0';
	int code = -1;
	grpc_channel *ch = tls_channel(target, ca_pem, NULL, NULL);
	grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
	grpc_call *call = NULL;
	grpc_byte_buffer *send = NULL, *recv = NULL;
	grpc_metadata_array init_md, trailing_md;
	grpc_metadata_array_init(&init_md);
	grpc_metadata_array_init(&trailing_md);
	grpc_slice status_details = grpc_empty_slice();
	grpc_status_code status = GRPC_STATUS_UNKNOWN;
	const char *error_string = NULL;
	if (!ch || !cq) {
		snprintf(details, detlen, "cannot create a TLS channel to %s", target);
		goto out;
	}
	gpr_timespec deadline =
		gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
	call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, grpc_slice_from_static_string(method),
					NULL, deadline, NULL);
	if (!call) {
		snprintf(details, detlen, "cannot create the call %s", method);
		goto out;
	}
	grpc_slice s = grpc_slice_from_copied_buffer((const char *)req, reqlen);
	send = grpc_raw_byte_buffer_create(&s, 1);
	grpc_slice_unref(s);
	grpc_op ops[6];
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = send;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &recv;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
	ops[5].data.recv_status_on_client.status = &status;
	ops[5].data.recv_status_on_client.status_details = &status_details;
	ops[5].data.recv_status_on_client.error_string = &error_string;
	if (grpc_call_start_batch(call, ops, 6, tag(TAG_START), NULL) != GRPC_CALL_OK) {
		snprintf(details, detlen, "cannot start the call %s", method);
		goto out;
	}
	grpc_event ev = grpc_completion_queue_pluck(cq, tag(TAG_START), gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	if (ev.type != GRPC_OP_COMPLETE) {
		snprintf(details, detlen, "the call %s did not complete", method);
		goto out;
	}
	code = (int)status;
	size_t n = GRPC_SLICE_LENGTH(status_details);
	if (n) {
		snprintf(details, detlen, "%.*s", (int)n, (const char *)GRPC_SLICE_START_PTR(status_details));
	} else if (error_string) {
		snprintf(details, detlen, "%s", error_string);
	}
	if (code == GRPC_STATUS_OK && recv) {
		grpc_byte_buffer_reader rd;
		if (grpc_byte_buffer_reader_init(&rd, recv)) {
			grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
			*resplen = GRPC_SLICE_LENGTH(all);
			*resp = malloc(*resplen ? *resplen : 1);
			if (*resp)
				memcpy(*resp, GRPC_SLICE_START_PTR(all), *resplen);
			grpc_slice_unref(all);
			grpc_byte_buffer_reader_destroy(&rd);
		}
		if (!*resp) {
			snprintf(details, detlen, "out of memory reading the answer");
			code = GRPC_STATUS_RESOURCE_EXHAUSTED;
		}
	}
out:
	if (send)
		grpc_byte_buffer_destroy(send);
	if (recv)
		grpc_byte_buffer_destroy(recv);
	if (call)
		grpc_call_unref(call);
	if (cq) {
		grpc_completion_queue_shutdown(cq);
		while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
		       GRPC_QUEUE_SHUTDOWN)
			;
		grpc_completion_queue_destroy(cq);
	}
	if (ch)
		grpc_channel_destroy(ch);
	grpc_metadata_array_destroy(&init_md);
	grpc_metadata_array_destroy(&trailing_md);
	grpc_slice_unref(status_details);
	if (error_string)
		gpr_free((void *)error_string);
	return code;
}
