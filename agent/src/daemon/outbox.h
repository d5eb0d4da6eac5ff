/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The outbox: data messages (metric and measurement batches, any batch kind alike) kept
 * until the backend acknowledges them, in memory up to a limit, then spilled
 * to files in the state folder up to a second limit. Each message is numbered
 * (AgentMessage.seq) per agent instance when it is produced. After a
 * reconnect everything not acknowledged is sent again, oldest first; the
 * backend stores each number once. When both limits are reached the oldest
 * messages are dropped and replaced, in place, by one DataGap per run of
 * dropped numbers, which is delivered like data. A clean stop writes what is
 * still in memory to the spool, and the next run sends it first under its
 * original numbers.
 */
#ifndef HOTPATH_DAEMON_OUTBOX_H
#define HOTPATH_DAEMON_OUTBOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotpath/v1/agent.pb-c.h"

struct hp_outbox_entry {
	uint64_t seq;
	const char *instance; /* one of hp_outbox.instances */
	int64_t start_ns, end_ns;
	uint64_t gap_first;    /* a DataGap for seqs gap_first..seq when gap_messages > 0 */
	uint32_t gap_messages; /* 0 for a data message */
	uint8_t *buf;          /* packed AgentMessage in memory; NULL on disk or for a gap */
	size_t len;
	bool on_disk;
	bool sent;    /* handed to the current stream */
	uint64_t ord; /* the order it was kept in, 1 up, across instances (hp_outbox_mark) */
};

struct hp_outbox {
	/* Held by every function below: the stream loop sends and applies acks
	 * while the measurement thread adds batches. */
	pthread_mutex_t lock;
	struct hp_outbox_entry *e;
	size_t head, n, cap; /* live entries are e[head..n), oldest first */
	size_t mem_bytes, mem_max, disk_bytes, disk_max;
	char dir[4096]; /* spool folder; "" keeps nothing on disk */
	char instance[33];
	char *instances[32];
	size_t ninstances;
	uint64_t next_seq;
	uint64_t dropped; /* data messages replaced by gaps, ever */
	uint64_t added;   /* entries kept so far: the newest's ord */
};

/* Set up with a fresh instance id; spool_dir (may be NULL) is created, and
 * messages a previous run left there are queued first. 0 or negative errno. */
int hp_outbox_init(struct hp_outbox *ob, const char *spool_dir, size_t mem_max, size_t disk_max, char *err,
		   size_t errlen);
/* Number a data message (its kind set), pack it and keep it; start/end are
 * the interval it covers (for a gap if it must be dropped). */
int hp_outbox_add(struct hp_outbox *ob, Hotpath__V1__AgentMessage *m, int64_t start_ns, int64_t end_ns);
/* The backend stored every message of instance up to seq: forget them. */
void hp_outbox_ack(struct hp_outbox *ob, const char *instance, uint64_t seq);
/* A new stream: everything not acknowledged is to be sent again. */
void hp_outbox_rewind(struct hp_outbox *ob);
/* The next message to send, as a malloc'd packed AgentMessage; 1, 0 when
 * none is waiting, or a negative errno. */
int hp_outbox_next(struct hp_outbox *ob, uint8_t **buf, size_t *len);
/* The mark of what is kept so far (the newest message's ord, 0 for none). */
uint64_t hp_outbox_mark(struct hp_outbox *ob);
/* The highest mark every message up to which has been handed to the
 * current stream (or acknowledged, or dropped): a reply queued with mark M
 * (daemon/replies.h) goes out once this is M or more, so that it never
 * overtakes data the agent kept before it. */
uint64_t hp_outbox_sent_mark(struct hp_outbox *ob);
/* Messages kept (not yet acknowledged). */
size_t hp_outbox_count(struct hp_outbox *ob);
/* Write what is in memory to the spool (clean stop); returns messages that
 * did not fit and are lost. */
size_t hp_outbox_persist(struct hp_outbox *ob);
void hp_outbox_free(struct hp_outbox *ob);

#endif
