/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent daemon's life: make sure it is enrolled (daemon/enroll.c), parse
 * the whole live kernel once and keep the model in memory, probe
 * capabilities, start sampling every CPU, then serve the backend one stream
 * at a time (daemon/session.c). When a stream ends it backs off (0.5 s
 * doubling to 4 s, each wait drawn at random between half and all of it, so
 * a fleet does not reconnect in step) and reconnects with a fresh Hello; the
 * model, the sampler, the targets, the measurements (read by their own
 * thread), the command worker and the outbox of unacknowledged data live on
 * across connections. At start the processes and measurements a previous run
 * left in the state folder are attached and armed again, before the first
 * connection. SIGINT/SIGTERM cancel the call, stop the worker and the
 * measurements (which stay in the state folder for the next run), write the
 * outbox to the spool and end the run with status 0.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/agent.h"
#include "daemon/catalog_pump.h"
#include "daemon/commands.h"
#include "daemon/daemon.h"
#include "daemon/enroll.h"
#include "daemon/log.h"
#include "daemon/plan_commands.h"
#include "daemon/session.h"
#include "daemon/transport.h"
#include "host/caps_cache.h"
#include "host/processes.h"
#include "target/target.h"

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 4000

_Static_assert(ATOMIC_BOOL_LOCK_FREE == 2, "a signal handler sets hp_stop_requested");
_Atomic bool hp_stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	hp_stop_requested = true;
}

static void install_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* Parse the whole kernel once; the model serves every connection. */
static int open_model(struct agent *ag, char *err, size_t errlen)
{
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct hp_open_opts oo = { .only_function = NULL, .threads = 0, .quiet = hp_log_quiet() };
	int r = hp_model_open_kernel(&oo, &ag->model, err, errlen);
	if (r < 0)
		return r;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ag->parse_seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if ((r = hp_catalog_digest_all(ag->model)) < 0) {
		snprintf(err, errlen, "cannot compute catalog digests: %s", strerror(-r));
		return r;
	}
	ag->block_counts = calloc(ag->model->nmods ? ag->model->nmods : 1, sizeof(*ag->block_counts));
	if (!ag->block_counts) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	size_t nfuncs = 0, nblocks = 0;
	for (size_t i = 0; i < ag->model->nmods; i++) {
		ag->block_counts[i] = (uint32_t)hp_catalog_block_count(&ag->model->mods[i]);
		nfuncs += ag->model->mods[i].nfuncs;
		nblocks += ag->block_counts[i];
	}
	hp_log(true, "parsed %zu functions, %zu blocks in %zu module(s) in %.2f s", nfuncs, nblocks, ag->model->nmods,
	       ag->parse_seconds);
	return 0;
}

/* Probe capabilities, then start the sampler; a sampler that fails to open
 * turns its capability off with the real reason. */
static void probe_and_sample(struct agent *ag)
{
	char detail[256], err[512];
	size_t nfuncs = 0;
	for (size_t i = 0; i < ag->model->nmods; i++)
		nfuncs += ag->model->mods[i].nfuncs;
	snprintf(detail, sizeof(detail),
		 "kernel text read through a BPF syscall program (bpf_probe_read_kernel): %zu functions parsed",
		 nfuncs);
	char note[512];
	enum hp_caps_source from = hp_caps_get(&ag->caps, true, detail, NULL, false, note, sizeof(note));
	if (note[0])
		hp_log(false, "%s", note);
	hp_log(true, "capabilities %s",
	       from == HP_CAPS_CACHED ? "of BPF probes from this boot's cache (" HP_CAPS_CACHE_DIR
					"/" HP_CAPS_CACHE_FILE "), the others probed" :
					"probed");
	for (size_t i = 0; i < ag->caps.n; i++)
		hp_log(true, "capability %s: %s (%s)", ag->caps.caps[i].name, ag->caps.caps[i].available ? "yes" : "no",
		       ag->caps.caps[i].detail);

	struct hp_sampler_opts so = { .frequency = ag->frequency,
				      .stacks = ag->stacks,
				      .stack_depth = ag->stack_depth };
	ag->sampler = hp_sampler_open(ag->model, &so, err, sizeof(err));
	if (!ag->sampler) {
		hp_log(false, "sampling disabled: %s", err);
		/* The probe opened one event; the sampler needs one per CPU and a
		 * ring each. Report what actually failed. */
		for (size_t i = 0; i < ag->caps.n; i++) {
			if (strcmp(ag->caps.caps[i].name, "perf_sampling") == 0) {
				ag->caps.caps[i].available = false;
				snprintf(ag->caps.caps[i].detail, sizeof(ag->caps.caps[i].detail), "%.250s", err);
			}
		}
	} else {
		hp_log(true, "sampling %u CPU(s) with %s at %u Hz%s", hp_sampler_ncpus(ag->sampler),
		       hp_sampler_event(ag->sampler), ag->frequency, ag->stacks ? ", with call chains" : "");
	}
}

/* Attach the processes the command line names (a pid or a command name each). */
static void attach_from_options(struct agent *ag, const struct hp_daemon_opts *o)
{
	for (size_t i = 0; i < o->nattach; i++) {
		const char *a = o->attach[i];
		char err[600];
		struct hp_target *got[HP_ATTACH_MAX_BY_COMM];
		int n;
		char *end;
		long pid = strtol(a, &end, 10);
		if (*a && !*end && pid > 0 && pid < 0x40000000) {
			n = hp_targets_attach_pid(&ag->targets, (int)pid, &got[0], err, sizeof(err));
			n = n == 0 ? 1 : n;
		} else {
			n = hp_targets_attach_comm(&ag->targets, a, got, HP_ATTACH_MAX_BY_COMM, err, sizeof(err));
		}
		if (n < 0) {
			hp_log(false, "--attach %s: %s", a, err);
			continue;
		}
		for (int k = 0; k < n; k++)
			hp_targets_release(&ag->targets, got[k]);
	}
}

/* Wait about backoff_ms (at random between half and all of it), sampling meanwhile. */
static void back_off(struct agent *ag, unsigned backoff_ms, int64_t *next_ms)
{
	unsigned wait_ms = backoff_ms / 2 + (unsigned)(random() % (backoff_ms / 2 + 1));
	hp_log(true, "reconnecting in %.1f s", wait_ms / 1000.0);
	int64_t until = hp_mono_ms() + wait_ms;
	while (!hp_stop_requested && hp_mono_ms() < until) {
		struct timespec ts = { 0, 50 * 1000000L };
		nanosleep(&ts, NULL);
		hp_interval_tick(ag, next_ms);
	}
}

/* Enrol (again) and load the credentials; 0, or a negative errno (logged). */
static int enroll_and_load(struct agent *ag, const struct hp_daemon_opts *o, const char *enroll_server)
{
	char err[512];
	struct hp_enroll_opts eo = { .server = enroll_server,
				     .state_dir = o->state_dir,
				     .host_id = ag->host.host_id,
				     .hostname = ag->host.hostname,
				     .token = o->token,
				     .ca_file = o->ca_file,
				     .wait = true };
	hp_log(true, "enrolling host %s at %s%s", ag->host.host_id, enroll_server,
	       o->token ? " with an enrolment token" : " (waiting for an admin to approve it in the console)");
	unsigned backoff_ms = BACKOFF_MIN_MS;
	for (;;) {
		int r = hp_enroll(&eo, err, sizeof(err));
		if (r == 0)
			break;
		hp_log(false, "%s", err);
		if (r != -EIO || hp_stop_requested)
			return r;
		int64_t until = hp_mono_ms() + backoff_ms;
		while (!hp_stop_requested && hp_mono_ms() < until) {
			struct timespec ts = { 0, 50 * 1000000L };
			nanosleep(&ts, NULL);
		}
		backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
	}
	hp_credentials_free(&ag->id);
	int r = hp_credentials_load(o->state_dir, &ag->id, err, sizeof(err));
	if (r < 0)
		hp_log(false, "%s", err);
	return r;
}

/* Serve the backend until a stop is requested, reconnecting with backoff. */
static void serve_forever(struct agent *ag, const struct hp_daemon_opts *o, const char *enroll_server)
{
	int64_t next_ms = hp_mono_ms() + ag->interval_ms;
	unsigned backoff_ms = BACKOFF_MIN_MS;
	bool token_spent = false;
	while (!hp_stop_requested) {
		hp_log(true, "connecting to %s", o->server);
		int r = hp_serve_stream(ag, o->server, &next_ms);
		if (r == 1)
			backoff_ms = BACKOFF_MIN_MS;
		if (r == -2 && o->token && !token_spent && !hp_stop_requested) {
			/* The backend no longer knows this certificate (deleted host, new
			 * installation): enrol again with the token we were given. */
			token_spent = true;
			enroll_and_load(ag, o, enroll_server);
		}
		if (hp_stop_requested)
			break;
		back_off(ag, backoff_ms, &next_ms);
		backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
	}
}

int hp_daemon_run(const struct hp_daemon_opts *o)
{
	struct agent ag;
	memset(&ag, 0, sizeof(ag));
	ag.interval_ms = o->interval_ms;
	ag.frequency = o->frequency;
	ag.stacks = !o->no_stacks;
	ag.stack_depth = o->stack_depth;
	ag.state_dir = o->state_dir;
	ag.config = o->config;
	hp_log_set_quiet(o->quiet);
	install_signals();

	char err[512], enroll_server[512], spool[4200];
	int ret = -1;
	bool ready = false;
	srandom((unsigned)(hp_mono_ms() ^ getpid()));
	if (hp_hostinfo_collect(&ag.host, o->host_id, err, sizeof(err)) < 0) {
		hp_log(false, "%s", err);
		return -1;
	}
	if (o->enroll_server) {
		snprintf(enroll_server, sizeof(enroll_server), "%s", o->enroll_server);
	} else if (hp_enroll_address(o->server, enroll_server, sizeof(enroll_server)) < 0) {
		hp_log(false, "--server %s is not HOST:PORT", o->server);
		return -1;
	}
	if (hp_state_dir_prepare(o->state_dir, err, sizeof(err)) < 0) {
		hp_log(false, "%s", err);
		return -1;
	}
	hp_transport_init();
	int r = hp_credentials_load(o->state_dir, &ag.id, err, sizeof(err));
	if (r == -ENOENT)
		r = enroll_and_load(&ag, o, enroll_server);
	else if (r < 0)
		hp_log(false, "%s", err);
	if (r < 0 || hp_stop_requested)
		goto out;
	snprintf(spool, sizeof(spool), "%s/spool", o->state_dir);
	if (hp_outbox_init(&ag.outbox, spool, o->buffer_bytes, o->spool_bytes, err, sizeof(err)) < 0) {
		hp_log(false, "%s", err);
		goto out;
	}
	if (hp_outbox_count(&ag.outbox))
		hp_log(true, "%zu data message(s) from an earlier run wait in %s", hp_outbox_count(&ag.outbox), spool);
	if (hp_stack_defs_init(&ag.stack_defs) < 0) {
		hp_log(false, "out of memory");
		goto out;
	}
	if (open_model(&ag, err, sizeof(err)) < 0) {
		hp_log(false, "cannot parse the live kernel: %s", err);
		goto out;
	}
	probe_and_sample(&ag);
	if (hp_targets_init(&ag.targets, ag.model, o->state_dir) < 0 ||
	    hp_measurements_init(&ag.measurements, o->state_dir) < 0) {
		hp_log(false, "out of memory");
		goto out;
	}
	hp_replies_init(&ag.replies);
	ready = true;
	/* Installs an earlier run left half-done are finished before anything else runs. */
	int recovered = hp_plans_recover(&ag);
	if (recovered)
		hp_log(true, "%d install journal(s) from an earlier run brought to a clean state", recovered);
	int restored = hp_targets_restore(&ag.targets);
	if (restored)
		hp_log(true, "attached %d process(es) again that the previous run served", restored);
	attach_from_options(&ag, o);
	restored = hp_measurements_restore(&ag);
	if (restored)
		hp_log(true, "armed %d measurement(s) again that the previous run left running", restored);
	if (hp_worker_start(&ag, hp_run_command, hp_plans_idle, HP_PLANS_IDLE_MS) < 0 || hp_measurements_run(&ag) < 0) {
		hp_log(false, "cannot start the agent's threads");
		goto out;
	}

	serve_forever(&ag, o, enroll_server);
	hp_worker_stop(&ag);
	hp_measurements_free(&ag.measurements);
	size_t lost = hp_outbox_persist(&ag.outbox);
	if (hp_outbox_count(&ag.outbox))
		hp_log(true, "%zu unacknowledged data message(s) kept in %s for the next run%s",
		       hp_outbox_count(&ag.outbox), spool, lost ? " (some did not fit and are lost)" : "");
	hp_log(true, "stopped");
	ret = 0;
out:
	if (ready) {
		hp_worker_stop(&ag);
		hp_measurements_free(&ag.measurements);
		hp_catalog_pump_reset(&ag);
		hp_targets_free(&ag.targets);
		hp_replies_free(&ag.replies);
	}
	hp_transport_shutdown();
	hp_outbox_free(&ag.outbox);
	hp_stack_defs_free(&ag.stack_defs);
	hp_credentials_free(&ag.id);
	hp_sampler_close(ag.sampler);
	free(ag.catalog_queue);
	free(ag.block_counts);
	hp_model_free(ag.model);
	return ret;
}
