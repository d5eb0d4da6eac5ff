/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent daemon's life: parse the whole live kernel once and keep the
 * model in memory, probe capabilities, start sampling every CPU, then serve
 * the backend one stream at a time (daemon/session.c). When a stream ends it
 * backs off (1 s doubling to 30 s) and reconnects with a fresh Hello; the
 * model and the sampler live on across connections. SIGINT/SIGTERM cancel
 * the call and end the run with status 0.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/agent.h"
#include "daemon/daemon.h"
#include "daemon/log.h"
#include "daemon/session.h"
#include "daemon/transport.h"
#include "target/target.h"

#define BACKOFF_MAX_MS 30000

volatile sig_atomic_t hp_stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	hp_stop_requested = 1;
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
	hp_caps_probe(&ag->caps, true, detail);
	for (size_t i = 0; i < ag->caps.n; i++)
		hp_log(true, "capability %s: %s (%s)", ag->caps.caps[i].name, ag->caps.caps[i].available ? "yes" : "no",
		       ag->caps.caps[i].detail);

	struct hp_sampler_opts so = { .frequency = ag->frequency };
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
		hp_log(true, "sampling %u CPU(s) with %s at %u Hz", hp_sampler_ncpus(ag->sampler),
		       hp_sampler_event(ag->sampler), ag->frequency);
	}
}

/* Serve the backend until a stop is requested, reconnecting with backoff. */
static void serve_forever(struct agent *ag, const char *server, const char *token)
{
	int64_t next_ms = hp_mono_ms() + ag->interval_ms;
	unsigned backoff_ms = 1000;
	while (!hp_stop_requested) {
		hp_log(true, "connecting to %s", server);
		if (hp_serve_stream(ag, server, token, &next_ms))
			backoff_ms = 1000;
		if (hp_stop_requested)
			break;
		hp_log(true, "reconnecting in %.0f s", backoff_ms / 1000.0);
		int64_t until = hp_mono_ms() + backoff_ms;
		while (!hp_stop_requested && hp_mono_ms() < until) {
			struct timespec ts = { 0, 50 * 1000000L };
			nanosleep(&ts, NULL);
			hp_interval_tick(ag, NULL, false, &next_ms);
		}
		backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
	}
}

int hp_daemon_run(const struct hp_daemon_opts *o)
{
	struct agent ag;
	memset(&ag, 0, sizeof(ag));
	ag.interval_ms = o->interval_ms;
	ag.frequency = o->frequency;
	hp_log_set_quiet(o->quiet);
	install_signals();

	char err[512];
	int ret = -1;
	if (hp_hostinfo_collect(&ag.host, o->host_id, err, sizeof(err)) < 0) {
		hp_log(false, "%s", err);
		return -1;
	}
	if (open_model(&ag, err, sizeof(err)) < 0) {
		hp_log(false, "cannot parse the live kernel: %s", err);
		goto out;
	}
	probe_and_sample(&ag);

	hp_transport_init();
	serve_forever(&ag, o->server, o->token);
	hp_transport_shutdown();
	hp_log(true, "stopped");
	ret = 0;
out:
	hp_sampler_close(ag.sampler);
	free(ag.catalog_queue);
	free(ag.block_counts);
	hp_model_free(ag.model);
	return ret;
}
