/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One connection to the backend, from Hello to the end of the call. The loop
 * polls the stream with a short deadline so that, between messages, it can
 * pump catalog chunks, take a due metric interval into the outbox, send what
 * the outbox holds (oldest first, a bounded window ahead of the network),
 * send what the command worker and the measurement thread queued (progress,
 * results, target updates), apply acknowledgements and notice a shutdown
 * request. Commands are handed to the worker, never run here. Why the call
 * ended is logged with its gRPC status.
 */
#include <grpc/status.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/agent.h"
#include "daemon/catalog_pump.h"
#include "daemon/log.h"
#include "daemon/messages.h"
#include "daemon/session.h"
#include "daemon/transport.h"
#include "daemon/worker.h"

/* Data messages handed to the stream ahead of the network. */
#define SEND_WINDOW 16

static void handle_server_message(struct agent *ag, const uint8_t *buf, size_t len, bool *welcomed)
{
	Hotpath__V1__ServerMessage *sm = hotpath__v1__server_message__unpack(NULL, len, buf);
	if (!sm) {
		hp_log(false, "ignored an undecodable server message (%zu bytes)", len);
		return;
	}
	switch (sm->kind_case) {
	case HOTPATH__V1__SERVER_MESSAGE__KIND_WELCOME:
		/* A new stream: stack definitions go out again as batches need them. */
		hp_stack_defs_reset(&ag->stack_defs);
		for (size_t i = 0; i < sm->welcome->n_acks; i++)
			hp_outbox_ack(&ag->outbox, sm->welcome->acks[i]->instance_id, sm->welcome->acks[i]->seq);
		hp_outbox_rewind(&ag->outbox);
		hp_catalog_pump_start(ag, sm->welcome);
		*welcomed = true;
		break;
	case HOTPATH__V1__SERVER_MESSAGE__KIND_ACK:
		hp_outbox_ack(&ag->outbox, sm->ack->instance_id, sm->ack->seq);
		if (strcmp(sm->ack->instance_id, ag->outbox.instance) == 0)
			hp_stack_defs_ack(&ag->stack_defs, sm->ack->seq, hp_mono_ms());
		break;
	case HOTPATH__V1__SERVER_MESSAGE__KIND_CATALOG_REQUEST:
		hp_catalog_pump_request(ag, sm->catalog_request);
		break;
	case HOTPATH__V1__SERVER_MESSAGE__KIND_COMMAND:
		hp_worker_submit(ag, sm->command);
		break;
	default:
		hp_log(false, "ignored a server message of unknown kind");
		break;
	}
	hotpath__v1__server_message__free_unpacked(sm, NULL);
}

void hp_interval_tick(struct agent *ag, int64_t *next_ms)
{
	if (!ag->sampler || hp_mono_ms() < *next_ms)
		return;
	*next_ms += ag->interval_ms;
	if (*next_ms <= hp_mono_ms())
		*next_ms = hp_mono_ms() + ag->interval_ms; /* fell behind: skip, do not burst */
	struct hp_sample_interval iv;
	if (hp_sampler_take(ag->sampler, &iv) < 0) {
		hp_log(false, "out of memory collecting an interval's samples");
		return;
	}
	uint64_t dropped = ag->outbox.dropped;
	if (hp_queue_batch(ag, &iv) < 0)
		hp_log(false, "out of memory keeping an interval's samples");
	if (ag->outbox.dropped > dropped)
		hp_log(false,
		       "the buffer of unacknowledged data is full: %llu interval(s) dropped so far (reported as "
		       "a gap)",
		       (unsigned long long)ag->outbox.dropped);
	hp_sample_interval_free(&iv);
}

static void log_end(const char *server, struct hp_stream *st)
{
	const char *details = "";
	int code = hp_stream_status(st, &details);
	if (hp_stop_requested) {
		hp_log(true, "stream closed for shutdown");
	} else if (code == GRPC_STATUS_UNAUTHENTICATED) {
		hp_log(false, "the backend did not accept this agent's certificate (UNAUTHENTICATED: %s)", details);
	} else if (code == GRPC_STATUS_PERMISSION_DENIED) {
		hp_log(false, "the backend refused this agent (PERMISSION_DENIED: %s)", details);
	} else {
		hp_log(false, "stream to %s ended: %s%s%s", server, code >= 0 ? hp_grpc_status_name(code) : "no status",
		       details && *details ? ": " : "", details ? details : "");
	}
}

/* Hand the replies other threads queued to the stream. */
static void send_replies(struct agent *ag, struct hp_stream *st)
{
	uint64_t sent = hp_outbox_sent_mark(&ag->outbox);
	while (hp_stream_pending(st) < SEND_WINDOW) {
		uint8_t *buf;
		size_t len;
		if (hp_replies_pop(&ag->replies, sent, &buf, &len) <= 0)
			return;
		hp_stream_send(st, buf, len);
	}
}

/* Hand the outbox's next messages to the stream, a bounded window ahead. */
static void send_data(struct agent *ag, struct hp_stream *st)
{
	while (hp_stream_pending(st) < SEND_WINDOW) {
		uint8_t *buf;
		size_t len;
		int r = hp_outbox_next(&ag->outbox, &buf, &len);
		if (r <= 0) {
			if (r < 0)
				hp_log(false, "out of memory reading the outbox");
			return;
		}
		hp_stream_send(st, buf, len);
	}
}

int hp_serve_stream(struct agent *ag, const char *server, int64_t *next_ms)
{
	char err[256];
	struct hp_stream *st = hp_stream_open(server, &ag->id, err, sizeof(err));
	if (!st) {
		hp_log(false, "%s", err);
		return -1;
	}
	bool welcomed = false, cancelled = false;
	hp_catalog_pump_reset(ag);
	if (hp_send_hello(ag, st) < 0)
		hp_log(false, "out of memory building Hello");
	for (;;) {
		if (hp_stop_requested && !cancelled) {
			hp_stream_cancel(st);
			cancelled = true;
		}
		if (welcomed) {
			send_replies(ag, st);
			hp_catalog_pump(ag, st);
			send_data(ag, st);
			send_replies(ag, st); /* those that waited for the data just handed over */
		}
		uint8_t *msg;
		size_t len;
		enum hp_stream_event ev = hp_stream_poll(st, 50, &msg, &len);
		if (ev == HP_STREAM_MESSAGE) {
			bool was = welcomed;
			handle_server_message(ag, msg, len, &welcomed);
			free(msg);
			if (welcomed && !was && hp_outbox_count(&ag->outbox))
				hp_log(true, "sending %zu unacknowledged data message(s)",
				       hp_outbox_count(&ag->outbox));
		} else if (ev == HP_STREAM_ENDED) {
			break;
		}
		hp_interval_tick(ag, next_ms);
	}
	log_end(server, st);
	int code = hp_stream_status(st, NULL);
	if (hp_outbox_count(&ag->outbox) && welcomed && !hp_stop_requested)
		hp_log(true, "%zu data message(s) wait for an acknowledgement; they are sent again after the reconnect",
		       hp_outbox_count(&ag->outbox));
	hp_stream_close(st);
	hp_catalog_pump_reset(ag);
	return welcomed ? 1 : code == GRPC_STATUS_UNAUTHENTICATED ? -2 : 0;
}
