/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Replies that wait for data (daemon/replies.h, daemon/outbox.h): a result
 * queued with the outbox's mark goes out only once every data message kept
 * before it has been handed to the stream, whatever order the stream loop
 * asks in (replies first, as it does); replies with no mark go at once, and
 * a reconnect (everything handed to the old stream is sent again) makes a
 * waiting reply wait for the resend.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/outbox.h"
#include "daemon/replies.h"
#include "harness.h"

static void keep_batch(struct hp_outbox *ob, const char *mid)
{
	Hotpath__V1__MeasurementBatch b = HOTPATH__V1__MEASUREMENT_BATCH__INIT;
	b.measurement_id = (char *)mid;
	Hotpath__V1__AgentMessage m = HOTPATH__V1__AGENT_MESSAGE__INIT;
	m.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_MEASUREMENT;
	m.measurement = &b;
	REQUIRE(hp_outbox_add(ob, &m, 1, 2) == 0, "the outbox kept nothing");
}

static void queue_result(struct hp_replies *q, const char *id, uint64_t after)
{
	Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
	r.command_id = (char *)id;
	r.ok = true;
	Hotpath__V1__AgentMessage m = HOTPATH__V1__AGENT_MESSAGE__INIT;
	m.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_RESULT;
	m.result = &r;
	REQUIRE(hp_replies_push_after(q, &m, after) == 0, "the reply was not queued");
}

/* The command id of the reply popped now, or "" when none may go. */
static const char *pop_id(struct hp_replies *q, struct hp_outbox *ob, char *id, size_t idlen)
{
	uint8_t *buf;
	size_t len;
	id[0] = 0;
	if (hp_replies_pop(q, hp_outbox_sent_mark(ob), &buf, &len) != 1)
		return id;
	Hotpath__V1__AgentMessage *m = hotpath__v1__agent_message__unpack(NULL, len, buf);
	free(buf);
	if (m && m->result)
		snprintf(id, idlen, "%s", m->result->command_id);
	hotpath__v1__agent_message__free_unpacked(m, NULL);
	return id;
}

/* Hand the outbox's next message to the (imagined) stream. */
static bool hand_one(struct hp_outbox *ob)
{
	uint8_t *buf;
	size_t len;
	if (hp_outbox_next(ob, &buf, &len) != 1)
		return false;
	free(buf);
	return true;
}

static void a_result_waits_for_the_data_kept_before_it(void)
{
	struct hp_outbox ob;
	struct hp_replies q;
	char err[256], id[64];
	REQUIRE(hp_outbox_init(&ob, NULL, 1 << 20, 0, err, sizeof(err)) == 0, "outbox: %s", err);
	hp_replies_init(&q);
	EXPECT(hp_outbox_mark(&ob) == 0 && hp_outbox_sent_mark(&ob) == 0, "an empty outbox has marks");

	keep_batch(&ob, "m1");
	keep_batch(&ob, "m1"); /* its last interval */
	queue_result(&q, "stop-m1", hp_outbox_mark(&ob));
	EXPECT(hp_outbox_mark(&ob) == 2, "mark %llu after two batches", (unsigned long long)hp_outbox_mark(&ob));
	EXPECT(!*pop_id(&q, &ob, id, sizeof(id)), "the stop's result went before any batch: %s", id);
	EXPECT(hand_one(&ob), "the first batch was not handed over");
	EXPECT(!*pop_id(&q, &ob, id, sizeof(id)), "the stop's result went before the last batch: %s", id);
	keep_batch(&ob, "m2"); /* kept after the result: it does not hold it back */
	EXPECT(hand_one(&ob), "the last batch was not handed over");
	EXPECT(hp_outbox_sent_mark(&ob) == 2, "sent mark %llu", (unsigned long long)hp_outbox_sent_mark(&ob));
	EXPECT(!strcmp(pop_id(&q, &ob, id, sizeof(id)), "stop-m1"), "the stop's result did not go: '%s'", id);

	/* No mark: at once, even with data waiting. */
	queue_result(&q, "inspect", 0);
	EXPECT(!strcmp(pop_id(&q, &ob, id, sizeof(id)), "inspect"), "a reply with no mark waited: '%s'", id);

	/* A reconnect: what the old stream had is sent again, and a result
	 * waiting for it waits for the resend. */
	queue_result(&q, "stop-m2", hp_outbox_mark(&ob));
	hp_outbox_rewind(&ob);
	EXPECT(hp_outbox_sent_mark(&ob) == 0, "after a rewind the sent mark is %llu",
	       (unsigned long long)hp_outbox_sent_mark(&ob));
	EXPECT(!*pop_id(&q, &ob, id, sizeof(id)), "a result went before the resend: %s", id);
	while (hand_one(&ob))
		;
	EXPECT(!strcmp(pop_id(&q, &ob, id, sizeof(id)), "stop-m2"), "the result did not follow the resend: '%s'", id);

	/* Acknowledged messages are out of the outbox: nothing to wait for. */
	hp_outbox_ack(&ob, ob.instance, 3);
	keep_batch(&ob, "m3");
	queue_result(&q, "stop-m3", hp_outbox_mark(&ob) - 1);
	EXPECT(!strcmp(pop_id(&q, &ob, id, sizeof(id)), "stop-m3"), "a result waited for acknowledged data: '%s'", id);
	hp_replies_free(&q);
	hp_outbox_free(&ob);
}

int main(void)
{
	RUN(a_result_waits_for_the_data_kept_before_it);
	TEST_EXIT();
}
