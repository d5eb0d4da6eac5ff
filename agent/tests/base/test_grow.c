// SPDX-License-Identifier: Apache-2.0
/*
 * The growable-array helper (base/grow.h): contents survive growth, the
 * capacity at least doubles (a million pushes resize it a few dozen times,
 * not once per push), and a size that cannot be allocated fails with the
 * array left as it was.
 */
#include <errno.h>
#include <stdint.h>

#include "base/grow.h"
#include "harness.h"

struct item {
	uint64_t a;
	uint32_t b;
};

static void grows_and_keeps_contents(void)
{
	struct item *v = NULL;
	size_t n = 0, cap = 0;

	for (uint32_t i = 0; i < 1000; i++) {
		REQUIRE(HP_GROW(v, cap, n + 1) == 0, "push %u failed", i);
		REQUIRE(cap >= n + 1, "capacity %zu after asking for %zu", cap, n + 1);
		v[n++] = (struct item){ (uint64_t)i * 3, i };
	}
	for (uint32_t i = 0; i < 1000; i++)
		EXPECT(v[i].a == (uint64_t)i * 3 && v[i].b == i, "element %u changed", i);
	free(v);
}

static void capacity_doubles(void)
{
	uint8_t *v = NULL;
	size_t cap = 0, resizes = 0, last = 0;

	for (size_t n = 0; n < 1000000; n++) {
		REQUIRE(HP_GROW(v, cap, n + 1) == 0, "push %zu failed", n);
		if (cap != last) {
			EXPECT(!last || cap >= 2 * last, "capacity went from %zu to %zu", last, cap);
			resizes++;
			last = cap;
		}
		v[n] = (uint8_t)n;
	}
	/* 8, 16, ..., 2^20: 18 capacities. */
	EXPECT(resizes <= 20, "%zu resizes for a million pushes", resizes);
	free(v);
}

static void room_already_there_is_kept(void)
{
	int *v = NULL;
	size_t cap = 0;

	REQUIRE(HP_GROW(v, cap, 100) == 0, "first growth failed");
	int *before = v;
	size_t cap_before = cap;
	EXPECT(HP_GROW(v, cap, 50) == 0 && v == before && cap == cap_before, "a smaller need reallocated");
	EXPECT(HP_GROW(v, cap, cap) == 0 && v == before && cap == cap_before, "an exact need reallocated");
	free(v);
}

static void impossible_size_leaves_array(void)
{
	uint64_t *v = NULL;
	size_t cap = 0;

	REQUIRE(HP_GROW(v, cap, 4) == 0, "first growth failed");
	v[3] = 42;
	uint64_t *before = v;
	size_t cap_before = cap;
	errno = 0;
	EXPECT(HP_GROW(v, cap, SIZE_MAX / 4) == -1 && errno == ENOMEM, "an impossible size did not fail with ENOMEM");
	EXPECT(v == before && cap == cap_before && v[3] == 42, "a failed growth changed the array");
	free(v);
}

int main(void)
{
	RUN(grows_and_keeps_contents);
	RUN(capacity_doubles);
	RUN(room_already_there_is_kept);
	RUN(impossible_size_leaves_array);
	TEST_EXIT();
}
