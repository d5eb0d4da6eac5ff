/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Messages the daemon's other threads (the command worker, the measurement
 * thread) have for the stream: command progress and results, target
 * updates. The stream is driven by one thread only, so they queue packed
 * AgentMessages here and the stream loop sends them, oldest first, while a
 * stream is up. At most HP_REPLIES_MAX wait; beyond that the oldest progress
 * reports are dropped first (a result or a targets update is never dropped
 * for a progress report), and the backend asks again for anything it lacks.
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
/* Take the oldest; 1 with a malloc'd *buf the caller owns, 0 when empty. */
int hp_replies_pop(struct hp_replies *q, uint8_t **buf, size_t *len);

#endif
