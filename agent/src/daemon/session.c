/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One connection to the backend, from Hello to the end of the call. The loop
 * polls the stream with a short deadline so that, between messages, it can
 * pump catalog chunks, send a due metric interval and notice a shutdown
 * request. Why the call ended is logged with its gRPC status.
 */
#include <grpc/status.h>
#include <stdlib.h>

#include "daemon/agent.h"
#include "daemon/catalog_pump.h"
#include "daemon/commands.h"
#include "daemon/log.h"
#include "daemon/messages.h"
#include "daemon/session.h"
#include "daemon/transport.h"

/* Batches allowed to queue behind a slow network before new ones are dropped. */
#define SEND_BACKLOG_MAX 64

static void handle_server_message(struct agent *ag, struct hp_stream *st, const uint8_t *buf, size_t len,
				  bool *welcomed)
{
	Hotpath__V1__ServerMessage *sm = hotpath__v1__server_message__unpack(NULL, len, buf);
	if (!sm) {
		hp_log(false, "ignored an undecodable server message (%zu bytes)", len);
		return;
	}
	switch (sm->kind_case) {
	case HOTPATH__V1__SERVER_MESSAGE__KIND_WELCOME:
		hp_catalog_pump_start(ag, sm->welcome);
		*welcomed = true;
		break;
	case HOTPATH__V1__SERVER_MESSAGE__KIND_COMMAND:
		hp_handle_command(ag, st, sm->command);
		break;
	default:
		hp_log(false, "ignored a server message of unknown kind");
		break;
	}
	hotpath__v1__server_message__free_unpacked(sm, NULL);
}

void hp_interval_tick(struct agent *ag, struct hp_stream *st, bool can_send, int64_t *next_ms)
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
	/* A backlog means the network is slower than the batches: drop rather
	 * than let memory grow without bound. */
	if (can_send && st && hp_stream_pending(st) < SEND_BACKLOG_MAX) {
		if (hp_send_batch(ag, st, &iv) < 0)
			ag->dropped_batches++;
	} else {
		ag->dropped_batches++;
	}
	hp_sample_interval_free(&iv);
}

static void log_end(const char *server, struct hp_stream *st)
{
	const char *details = "";
	int code = hp_stream_status(st, &details);
	if (hp_stop_requested) {
		hp_log(true, "stream closed for shutdown");
	} else if (code == GRPC_STATUS_UNAUTHENTICATED) {
		hp_log(false, "the backend rejected the agent token (UNAUTHENTICATED: %s)", details);
	} else if (code == GRPC_STATUS_PERMISSION_DENIED) {
		hp_log(false, "the backend refused this agent (PERMISSION_DENIED: %s)", details);
	} else {
		hp_log(false, "stream to %s ended: %s%s%s", server, code >= 0 ? hp_grpc_status_name(code) : "no status",
		       details && *details ? ": " : "", details ? details : "");
	}
}

bool hp_serve_stream(struct agent *ag, const char *server, const char *token, int64_t *next_ms)
{
	char err[256];
	struct hp_stream *st = hp_stream_open(server, token, err, sizeof(err));
	if (!st) {
		hp_log(false, "%s", err);
		return false;
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
		if (welcomed)
			hp_catalog_pump(ag, st);
		uint8_t *msg;
		size_t len;
		enum hp_stream_event ev = hp_stream_poll(st, 50, &msg, &len);
		if (ev == HP_STREAM_MESSAGE) {
			bool was = welcomed;
			handle_server_message(ag, st, msg, len, &welcomed);
			free(msg);
			if (welcomed && !was && ag->dropped_batches) {
				hp_log(true, "%llu metric batch(es) were dropped while not connected",
				       (unsigned long long)ag->dropped_batches);
				ag->dropped_batches = 0;
			}
		} else if (ev == HP_STREAM_ENDED) {
			break;
		}
		hp_interval_tick(ag, st, welcomed, next_ms);
	}
	log_end(server, st);
	size_t unsent = hp_stream_pending(st);
	if (unsent && welcomed && !hp_stop_requested)
		hp_log(true, "%zu queued message(s) were not sent", unsent);
	hp_stream_close(st);
	return welcomed;
}
