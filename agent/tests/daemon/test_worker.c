/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The command worker's idle handler (the daemon's periodic retry of kept
 * code heaps runs there): called on the worker's thread after idle_ms
 * without a command, again and again while none comes, never when none was
 * given, and not after the worker stopped.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "daemon/agent.h"
#include "daemon/worker.h"
#include "harness.h"

static atomic_int idles;

static void on_idle(struct agent *ag)
{
	(void)ag;
	atomic_fetch_add(&idles, 1);
}

static void no_job(struct agent *ag, struct hp_job *job)
{
	(void)ag;
	(void)job;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void idle_handler_runs_while_idle(void)
{
	struct agent *ag = calloc(1, sizeof(*ag));
	REQUIRE(ag, "out of memory");
	atomic_store(&idles, 0);
	REQUIRE(hp_worker_start(ag, no_job, on_idle, 20) == 0, "the worker did not start");
	/* Twice at least (a hang bound, not a timing: 20 ms apart, 30 s allowed). */
	for (double end = now_s() + 30; atomic_load(&idles) < 2 && now_s() < end;)
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	hp_worker_stop(ag);
	int seen = atomic_load(&idles);
	EXPECT(seen >= 2, "the idle handler ran %d times", seen);
	nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);
	EXPECT(atomic_load(&idles) == seen, "the idle handler ran after the worker stopped");
	free(ag);
}

static void no_idle_handler_no_call(void)
{
	struct agent *ag = calloc(1, sizeof(*ag));
	REQUIRE(ag, "out of memory");
	atomic_store(&idles, 0);
	REQUIRE(hp_worker_start(ag, no_job, NULL, 20) == 0, "the worker did not start");
	nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);
	hp_worker_stop(ag);
	EXPECT(atomic_load(&idles) == 0, "an idle handler ran though none was given");
	free(ag);
}

int main(void)
{
	RUN(idle_handler_runs_while_idle);
	RUN(no_idle_handler_no_call);
	TEST_EXIT();
}
