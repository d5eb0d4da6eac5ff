// SPDX-License-Identifier: Apache-2.0
/*
 * The queue of messages other threads have for the stream (see replies.h):
 * a ring of packed AgentMessages under a mutex.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/replies.h"

void hp_replies_init(struct hp_replies *q)
{
	memset(q, 0, sizeof(*q));
	pthread_mutex_init(&q->lock, NULL);
}

void hp_replies_free(struct hp_replies *q)
{
	for (size_t i = 0; i < q->n; i++)
		free(q->v[(q->head + i) % HP_REPLIES_MAX].buf);
	pthread_mutex_destroy(&q->lock);
	memset(q, 0, sizeof(*q));
}

/* Drop the oldest progress report to make room; false if there is none. Locked. */
static bool drop_progress(struct hp_replies *q)
{
	for (size_t i = 0; i < q->n; i++) {
		size_t at = (q->head + i) % HP_REPLIES_MAX;
		if (!q->v[at].progress)
			continue;
		free(q->v[at].buf);
		for (size_t k = i; k + 1 < q->n; k++)
			q->v[(q->head + k) % HP_REPLIES_MAX] = q->v[(q->head + k + 1) % HP_REPLIES_MAX];
		q->n--;
		return true;
	}
	return false;
}

int hp_replies_push(struct hp_replies *q, Hotpath__V1__AgentMessage *m)
{
	return hp_replies_push_after(q, m, 0);
}

int hp_replies_push_after(struct hp_replies *q, Hotpath__V1__AgentMessage *m, uint64_t after)
{
	size_t len = hotpath__v1__agent_message__get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	hotpath__v1__agent_message__pack(m, buf);
	bool progress = m->kind_case == HOTPATH__V1__AGENT_MESSAGE__KIND_PROGRESS;
	pthread_mutex_lock(&q->lock);
	if (q->n == HP_REPLIES_MAX && (progress || !drop_progress(q))) {
		pthread_mutex_unlock(&q->lock);
		free(buf);
		return -ENOSPC;
	}
	q->v[(q->head + q->n) % HP_REPLIES_MAX] = (struct hp_reply){ buf, len, progress, after };
	q->n++;
	pthread_mutex_unlock(&q->lock);
	return 0;
}

int hp_replies_pop(struct hp_replies *q, uint64_t sent, uint8_t **buf, size_t *len)
{
	pthread_mutex_lock(&q->lock);
	if (!q->n || q->v[q->head].after > sent) {
		pthread_mutex_unlock(&q->lock);
		return 0;
	}
	struct hp_reply r = q->v[q->head];
	q->head = (q->head + 1) % HP_REPLIES_MAX;
	q->n--;
	pthread_mutex_unlock(&q->lock);
	*buf = r.buf;
	*len = r.len;
	return 1;
}
