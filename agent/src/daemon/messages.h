/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Packing AgentMessages onto the stream: any message, Hello, and MetricBatch.
 */
#ifndef HOTPATH_DAEMON_MESSAGES_H
#define HOTPATH_DAEMON_MESSAGES_H

#include "hotpath/v1/agent.pb-c.h"

struct agent;
struct hp_stream;
struct hp_sample_interval;

/* Pack m and queue it on st; 0 or -ENOMEM. */
int hp_send_msg(struct hp_stream *st, Hotpath__V1__AgentMessage *m);
/* Who this host is, what it can do, and its modules with their catalog digests. */
int hp_send_hello(struct agent *ag, struct hp_stream *st);
/* One interval's sample counts, numbered and kept in the outbox. */
int hp_queue_batch(struct agent *ag, const struct hp_sample_interval *iv);

#endif
