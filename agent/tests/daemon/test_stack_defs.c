/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which stack definitions a batch carries: every batch until one that carried
 * the definition is acknowledged, none after, all again on a new stream or an
 * hour after the acknowledgement; and stack ids that depend on the frames'
 * content (module digest, function, offset, file path), nothing else.
 */
#include "harness.h"
#include "daemon/stack_defs.h"

static void definitions_travel_until_acknowledged(void)
{
	struct hp_stack_defs d;
	REQUIRE(hp_stack_defs_init(&d) == 0, "out of memory");
	uint64_t a = 0x1234567890abcdefULL, b = 42;
	EXPECT(hp_stack_defs_needed(&d, a, 1000), "a new stack needs its definition");
	hp_stack_defs_sent(&d, a, 5);
	EXPECT(hp_stack_defs_needed(&d, a, 1000), "sent but not acknowledged: send again");
	hp_stack_defs_sent(&d, a, 6);
	hp_stack_defs_sent(&d, b, 6);
	hp_stack_defs_ack(&d, 5, 2000);
	EXPECT(hp_stack_defs_needed(&d, a, 2000), "its latest carrier (6) is not acknowledged yet");
	hp_stack_defs_ack(&d, 6, 3000);
	EXPECT(!hp_stack_defs_needed(&d, a, 3000) && !hp_stack_defs_needed(&d, b, 3000), "acknowledged: id only");
	EXPECT(hp_stack_defs_needed(&d, a, 3000 + HP_STACK_DEF_TTL_MS + 1), "an hour later: defined again");
	hp_stack_defs_reset(&d);
	EXPECT(hp_stack_defs_needed(&d, a, 3000), "a new stream knows nothing");
	hp_stack_defs_free(&d);
}

static void ids_depend_on_the_frames_only(void)
{
	struct hp_module mods[2] = { { .name = "vmlinux" }, { .name = "ext4" } };
	memset(mods[0].digest, 'a', 64);
	memset(mods[1].digest, 'b', 64);
	struct hp_model m = { .mods = mods, .nmods = 2 };
	char *paths[] = { "/usr/bin/dd" };
	struct hp_frame frames[] = {
		{ HP_FRAME_KERNEL, 0, 7, 0x10 }, { HP_FRAME_KERNEL, 1, 3, 0x2a }, { HP_FRAME_USER, 0, 0, 0x1234 },
		{ HP_FRAME_KERNEL, 0, 7, 0x10 }, { HP_FRAME_KERNEL, 1, 3, 0x2b }, { HP_FRAME_USER, 0, 0, 0x1234 },
	};
	struct hp_stack_set set = { .frames = frames, .nframes = 6, .paths = paths, .npaths = 1 };
	struct hp_stack s1 = { 0, 3 }, s2 = { 3, 3 }, s3 = { 0, 2 };
	uint64_t id1 = hp_stack_id(&m, &set, &s1);
	EXPECT(id1 != 0, "no id");
	EXPECT(id1 == hp_stack_id(&m, &set, &s1), "ids are not stable");
	EXPECT(id1 != hp_stack_id(&m, &set, &s2), "one offset differs, the ids do not");
	EXPECT(id1 != hp_stack_id(&m, &set, &s3), "a frame fewer, the same id");
	/* The digest names the module, not its position: another model with the same digests agrees. */
	struct hp_module other[3] = { { .name = "x" }, { .name = "vmlinux" }, { .name = "ext4" } };
	memcpy(other[1].digest, mods[0].digest, 65);
	memcpy(other[2].digest, mods[1].digest, 65);
	struct hp_model m2 = { .mods = other, .nmods = 3 };
	struct hp_frame moved[] = { { HP_FRAME_KERNEL, 1, 7, 0x10 },
				    { HP_FRAME_KERNEL, 2, 3, 0x2a },
				    { HP_FRAME_USER, 0, 0, 0x1234 } };
	struct hp_stack_set set2 = { .frames = moved, .nframes = 3, .paths = paths, .npaths = 1 };
	EXPECT(hp_stack_id(&m2, &set2, &s1) == id1, "the same frames under other module positions differ");
}

int main(void)
{
	RUN(definitions_travel_until_acknowledged);
	RUN(ids_depend_on_the_frames_only);
	TEST_EXIT();
}
