/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Messages the daemon's other threads (the command worker, the measurement
 * thread) have for the stream: command progress and results, target
 * updates. The stream is driven by one thread only, so they queue packed
 * AgentMessages here and the stream loop sends them, oldest first, while a
 * stream is up. At most HP_REPLIES_MAX wait; beyond that the oldest progress
 * reports are dropped first (a result or a targets update is never dropped
 * for a progress report), and the backend asks again for anything it lacks.
 * A reply may wait for data: queued with an outbox mark (daemon/outbox.h),
 * it goes out only once every data message kept up to that mark has been
 * handed to the stream, so a measurement's stop result never arrives before
 * the measurement's last interval.
 */
#ifndef HOTPATH_DAEMON_REPLIES_H
#define HOTPATH_DAEMON_REPLIES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotpath/v1/agent.pb-c.h"

#define HP_REPLIES_MAX 1024

struct hp_reply {
	uint8_t *buf;
	size_t len;
	bool progress;
	uint64_t after; /* the outbox mark it waits for (0: none) */
};

struct hp_replies {
	pthread_mutex_t lock;
	struct hp_reply v[HP_REPLIES_MAX];
	size_t head, n;
};

void hp_replies_init(struct hp_replies *q);
void hp_replies_free(struct hp_replies *q);
/* Pack m and queue it; 0 or -ENOMEM (or -ENOSPC when full of results). */
int hp_replies_push(struct hp_replies *q, Hotpath__V1__AgentMessage *m);
/* The same, to go out only after the outbox's data up to mark after. */
int hp_replies_push_after(struct hp_replies *q, Hotpath__V1__AgentMessage *m, uint64_t after);
/* Take the oldest, unless it waits for data beyond sent (the outbox's
 * hp_outbox_sent_mark): 1 with a malloc'd *buf the caller owns, 0 when
 * empty or when the oldest must wait (those after it wait with it). */
int hp_replies_pop(struct hp_replies *q, uint64_t sent, uint8_t **buf, size_t *len);

#endif
