/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `hotpathd run`: the agent daemon. It parses the whole live kernel once and
 * keeps the model in memory, samples every CPU continuously, and keeps one
 * gRPC stream open to the backend: Hello first, the catalog pieces the
 * backend asks for in Welcome, one MetricBatch per interval, and exactly one
 * CommandResult per Command. When the stream ends it backs off (1 s doubling
 * to 30 s) and reconnects with a fresh Hello; the model and the sampler live
 * on across connections. SIGINT/SIGTERM cancel the call and exit 0.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "caps.h"
#include "catalog.h"
#include "commands.h"
#include "hostinfo.h"
#include "model.h"
#include "sampler.h"
#include "transport.h"
#include "hotpath/v1/agent.pb-c.h"

#define AGENT_VERSION "0.1.0"
#define BACKOFF_MAX_MS 30000
/* Catalog chunks queued ahead of the network: enough to keep it busy,
 * little enough not to hold a whole kernel's catalog in memory. */
#define CATALOG_QUEUE 4
#define SEND_BACKLOG_MAX 64

static volatile sig_atomic_t stop_requested;
static bool quiet;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void logmsg(bool info, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logmsg(bool info, const char *fmt, ...)
{
	if (info && quiet)
		return;
	char ts[32];
	time_t t = time(NULL);
	struct tm tm;
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", localtime_r(&t, &tm));
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s hotpathd: ", ts);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: hotpathd run --server HOST:PORT [--token-file FILE] [options]\n"
		"\n"
		"Parse the live kernel, sample every CPU and stream code catalog and sample\n"
		"counts to the Hotpath backend over one gRPC stream (AgentService.Connect).\n"
		"\n"
		"  --server HOST:PORT   backend gRPC address to dial\n"
		"  --token-file FILE    file holding the agent token, sent as\n"
		"                       'authorization: Bearer TOKEN'; without it the token\n"
		"                       comes from the HOTPATH_AGENT_TOKEN environment variable\n"
		"  --host-id ID         host identity to report (default: /etc/machine-id)\n"
		"  --interval-ms MS     length of one metric interval (default 1000, 100..60000)\n"
		"  --frequency HZ       samples per second per CPU (default 997, 1..10000)\n"
		"  --quiet              log only errors and ended connections\n"
		"  --help               show this help\n");
}

static int read_token(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
	if (!path) {
		const char *env = getenv("HOTPATH_AGENT_TOKEN");
		if (!env || !*env) {
			snprintf(err, errlen, "no agent token: pass --token-file FILE or set HOTPATH_AGENT_TOKEN");
			return -1;
		}
		snprintf(out, outlen, "%s", env);
	} else {
		FILE *f = fopen(path, "re");
		if (!f) {
			snprintf(err, errlen, "cannot read token file %s: %s", path, strerror(errno));
			return -1;
		}
		size_t n = fread(out, 1, outlen - 1, f);
		fclose(f);
		out[n] = '\0';
	}
	/* Trim surrounding whitespace (files usually end in a newline). */
	char *s = out;
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	memmove(out, s, strlen(s) + 1);
	size_t n = strlen(out);
	while (n && (out[n - 1] == ' ' || out[n - 1] == '\t' || out[n - 1] == '\n' || out[n - 1] == '\r'))
		out[--n] = '\0';
	if (!n) {
		snprintf(err, errlen, "the agent token%s%s is empty", path ? " in " : "", path ? path : "");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)out[i] < 0x21 || (unsigned char)out[i] > 0x7e) {
			snprintf(err, errlen, "the agent token contains a space or control character");
			return -1;
		}
	}
	return 0;
}

struct agent {
	struct hp_model *model;
	struct hp_sampler *sampler;
	struct hp_hostinfo host;
	struct hp_caps caps;
	uint32_t *block_counts; /* per module */
	unsigned interval_ms, frequency;
	double parse_seconds;
	/* Catalog pieces still to send on the current stream. */
	size_t *catalog_queue;
	size_t ncatalog, catalog_pos;
	struct hp_catalog_iter catalog_it;
	bool catalog_active;
	uint64_t dropped_batches;
};

static int send_msg(struct hp_stream *st, Hotpath__V1__AgentMessage *m)
{
	size_t n = hotpath__v1__agent_message__get_packed_size(m);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return -ENOMEM;
	hotpath__v1__agent_message__pack(m, buf);
	return hp_stream_send(st, buf, n);
}

static int send_hello(struct agent *ag, struct hp_stream *st)
{
	Hotpath__V1__Hello h = HOTPATH__V1__HELLO__INIT;
	Hotpath__V1__CacheGeometry l1i = HOTPATH__V1__CACHE_GEOMETRY__INIT;
	h.host_id = ag->host.host_id;
	h.hostname = ag->host.hostname;
	h.kernel_release = ag->host.release;
	h.kernel_build_id = ag->host.build_id;
	h.cpu_model = ag->host.cpu_model;
	h.cpu_count = ag->host.cpu_count;
	l1i.size_bytes = ag->host.l1i.size_bytes;
	l1i.line_bytes = ag->host.l1i.line_bytes;
	l1i.ways = ag->host.l1i.ways;
	h.l1i = &l1i;

	Hotpath__V1__Capability caps[HP_CAP_MAX], *capp[HP_CAP_MAX];
	for (size_t i = 0; i < ag->caps.n; i++) {
		hotpath__v1__capability__init(&caps[i]);
		caps[i].name = (char *)ag->caps.caps[i].name;
		caps[i].available = ag->caps.caps[i].available;
		caps[i].detail = ag->caps.caps[i].detail;
		capp[i] = &caps[i];
	}
	h.n_capabilities = ag->caps.n;
	h.capabilities = capp;

	size_t nm = ag->model->nmods;
	Hotpath__V1__ModuleRef *mods = calloc(nm ? nm : 1, sizeof(*mods));
	Hotpath__V1__ModuleRef **modp = calloc(nm ? nm : 1, sizeof(*modp));
	if (!mods || !modp) {
		free(mods);
		free(modp);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nm; i++) {
		const struct hp_module *m = &ag->model->mods[i];
		hotpath__v1__module_ref__init(&mods[i]);
		mods[i].name = m->name;
		mods[i].digest = (char *)m->digest;
		mods[i].base_address = m->base;
		mods[i].function_count = (uint32_t)m->nfuncs;
		mods[i].block_count = ag->block_counts[i];
		modp[i] = &mods[i];
	}
	h.n_modules = nm;
	h.modules = modp;
	h.agent_version = (char *)AGENT_VERSION;
	h.metric_interval_ms = ag->interval_ms;
	h.sample_frequency_hz = ag->frequency;
	h.sample_event = (char *)(ag->sampler ? hp_sampler_event(ag->sampler) : "");
	h.parse_seconds = ag->parse_seconds;

	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_HELLO;
	msg.hello = &h;
	int r = send_msg(st, &msg);
	free(mods);
	free(modp);
	return r;
}

static int send_batch(struct agent *ag, struct hp_stream *st, const struct hp_sample_interval *iv)
{
	Hotpath__V1__MetricBatch b = HOTPATH__V1__METRIC_BATCH__INIT;
	b.interval_start_unix_ns = iv->start_unix_ns;
	b.interval_ms = (uint32_t)((iv->end_unix_ns - iv->start_unix_ns + 500000) / 1000000);
	b.total_samples = iv->total;
	b.user_samples = iv->user;
	b.unmapped_samples = iv->unmapped;
	b.lost_samples = iv->lost;
	size_t n = iv->nblocks;
	Hotpath__V1__BlockSamples *bs = calloc(n ? n : 1, sizeof(*bs));
	Hotpath__V1__BlockSamples **bp = calloc(n ? n : 1, sizeof(*bp));
	if (!bs || !bp) {
		free(bs);
		free(bp);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		hotpath__v1__block_samples__init(&bs[i]);
		bs[i].module = ag->model->mods[iv->blocks[i].mod].name;
		bs[i].function_index = iv->blocks[i].fn;
		bs[i].block_offset = iv->blocks[i].offset;
		bs[i].count = iv->blocks[i].count;
		bp[i] = &bs[i];
	}
	b.n_blocks = n;
	b.blocks = bp;
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_METRICS;
	msg.metrics = &b;
	int r = send_msg(st, &msg);
	free(bs);
	free(bp);
	return r;
}

static void send_result(struct hp_stream *st, const char *id, bool ok, const char *error,
			Hotpath__V1__FunctionDisassembly *dis)
{
	Hotpath__V1__CommandResult r = HOTPATH__V1__COMMAND_RESULT__INIT;
	r.command_id = (char *)id;
	r.ok = ok;
	r.error = (char *)(error ? error : "");
	if (dis) {
		r.kind_case = HOTPATH__V1__COMMAND_RESULT__KIND_DISASSEMBLY;
		r.disassembly = dis;
	}
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_RESULT;
	msg.result = &r;
	if (send_msg(st, &msg) < 0)
		logmsg(false, "out of memory sending the result of command %s", id);
}

static void inspect_function(struct agent *ag, struct hp_stream *st, const char *id,
			     const Hotpath__V1__InspectFunction *cmd)
{
	char err[256];
	const struct hp_module *mod = NULL;
	for (size_t i = 0; i < ag->model->nmods; i++)
		if (strcmp(ag->model->mods[i].name, cmd->module ? cmd->module : "") == 0)
			mod = &ag->model->mods[i];
	if (!mod) {
		snprintf(err, sizeof(err), "unknown module \"%.100s\"", cmd->module ? cmd->module : "");
		send_result(st, id, false, err, NULL);
		return;
	}
	if (cmd->function_index >= mod->nfuncs) {
		snprintf(err, sizeof(err), "function index %u out of range: module %s has %zu functions",
			 cmd->function_index, mod->name, mod->nfuncs);
		send_result(st, id, false, err, NULL);
		return;
	}
	const struct hp_function *f = &mod->funcs[cmd->function_index];
	struct hp_insn *insns = NULL;
	err[0] = '\0';
	int n = hp_function_disassemble(ag->model, mod, f, &insns, err, sizeof(err));
	if (n < 0) {
		char msg[400];
		snprintf(msg, sizeof(msg), "cannot disassemble %s: %s", f->name, err[0] ? err : strerror(-n));
		send_result(st, id, false, msg, NULL);
		return;
	}
	Hotpath__V1__FunctionDisassembly d = HOTPATH__V1__FUNCTION_DISASSEMBLY__INIT;
	d.module = mod->name;
	d.function_index = cmd->function_index;
	d.address = f->addr;
	Hotpath__V1__Instruction *in = calloc(n ? (size_t)n : 1, sizeof(*in));
	Hotpath__V1__Instruction **inp = calloc(n ? (size_t)n : 1, sizeof(*inp));
	if (!in || !inp) {
		send_result(st, id, false, "out of memory", NULL);
	} else {
		for (int i = 0; i < n; i++) {
			hotpath__v1__instruction__init(&in[i]);
			in[i].offset = (uint32_t)(insns[i].addr - f->addr);
			in[i].length = insns[i].len;
			in[i].text = insns[i].text;
			in[i].bytes.data = insns[i].bytes;
			in[i].bytes.len = insns[i].len;
			inp[i] = &in[i];
		}
		d.n_instructions = (size_t)n;
		d.instructions = inp;
		send_result(st, id, true, NULL, &d);
	}
	free(in);
	free(inp);
	free(insns);
}

static void handle_command(struct agent *ag, struct hp_stream *st, const Hotpath__V1__Command *c)
{
	const char *id = c->id ? c->id : "";
	switch (c->kind_case) {
	case HOTPATH__V1__COMMAND__KIND_INSPECT_FUNCTION:
		inspect_function(ag, st, id, c->inspect_function);
		break;
	default:
		send_result(st, id, false, "unsupported command", NULL);
		break;
	}
}

static void handle_welcome(struct agent *ag, const Hotpath__V1__Welcome *w)
{
	free(ag->catalog_queue);
	ag->catalog_queue = calloc(w->n_missing_digests ? w->n_missing_digests : 1, sizeof(size_t));
	ag->ncatalog = ag->catalog_pos = 0;
	ag->catalog_active = false;
	for (size_t i = 0; i < w->n_missing_digests && ag->catalog_queue; i++) {
		bool found = false;
		for (size_t m = 0; m < ag->model->nmods; m++) {
			if (strcmp(ag->model->mods[m].digest, w->missing_digests[i]) == 0) {
				ag->catalog_queue[ag->ncatalog++] = m;
				found = true;
				break;
			}
		}
		if (!found)
			logmsg(false, "the backend asked for catalog %.64s, which this agent does not have; ignored",
			       w->missing_digests[i]);
	}
	logmsg(true, "welcome: session %s, %zu catalog piece(s) to send", w->session_id, ag->ncatalog);
}

/* Queue catalog chunks while the send queue has room. */
static void pump_catalog(struct agent *ag, struct hp_stream *st)
{
	while (hp_stream_pending(st) < CATALOG_QUEUE) {
		if (!ag->catalog_active) {
			if (ag->catalog_pos >= ag->ncatalog)
				return;
			hp_catalog_iter_init(&ag->catalog_it, ag->model, ag->catalog_queue[ag->catalog_pos++]);
			ag->catalog_active = true;
		}
		uint8_t *buf;
		size_t len;
		uint32_t nf;
		bool last;
		int r = hp_catalog_next_chunk(&ag->catalog_it, HP_CATALOG_CHUNK_FUNCS, HP_CATALOG_CHUNK_BYTES,
					      &buf, &len, &nf, &last);
		if (r < 0) {
			logmsg(false, "cannot build a catalog chunk of %s: %s",
			       ag->model->mods[ag->catalog_it.mod_idx].name, strerror(-r));
			ag->catalog_active = false;
			continue;
		}
		if (r == 0) {
			ag->catalog_active = false;
			continue;
		}
		hp_stream_send(st, buf, len);
		if (last) {
			const struct hp_module *m = &ag->model->mods[ag->catalog_it.mod_idx];
			logmsg(true, "catalog %s (%zu functions) queued in %u chunk(s)", m->name, m->nfuncs,
			       ag->catalog_it.seq);
			ag->catalog_active = false;
		}
	}
}

static void handle_server_message(struct agent *ag, struct hp_stream *st, const uint8_t *buf, size_t len,
				  bool *welcomed)
{
	Hotpath__V1__ServerMessage *sm = hotpath__v1__server_message__unpack(NULL, len, buf);
	if (!sm) {
		logmsg(false, "ignored an undecodable server message (%zu bytes)", len);
		return;
	}
	switch (sm->kind_case) {
	case HOTPATH__V1__SERVER_MESSAGE__KIND_WELCOME:
		handle_welcome(ag, sm->welcome);
		*welcomed = true;
		break;
	case HOTPATH__V1__SERVER_MESSAGE__KIND_COMMAND:
		handle_command(ag, st, sm->command);
		break;
	default:
		logmsg(false, "ignored a server message of unknown kind");
		break;
	}
	hotpath__v1__server_message__free_unpacked(sm, NULL);
}

/* Take the sampler's interval if it is due; send it or count it as dropped. */
static void interval_tick(struct agent *ag, struct hp_stream *st, bool can_send, int64_t *next_ms)
{
	if (!ag->sampler || mono_ms() < *next_ms)
		return;
	*next_ms += ag->interval_ms;
	if (*next_ms <= mono_ms())
		*next_ms = mono_ms() + ag->interval_ms; /* fell behind: skip, do not burst */
	struct hp_sample_interval iv;
	if (hp_sampler_take(ag->sampler, &iv) < 0) {
		logmsg(false, "out of memory collecting an interval's samples");
		return;
	}
	/* A backlog means the network is slower than the batches: drop rather
	 * than let memory grow without bound. */
	if (can_send && st && hp_stream_pending(st) < SEND_BACKLOG_MAX) {
		if (send_batch(ag, st, &iv) < 0)
			ag->dropped_batches++;
	} else {
		ag->dropped_batches++;
	}
	hp_sample_interval_free(&iv);
}

/* One connection, from Hello to the end of the call. Returns true if the
 * backend accepted the agent (sent Welcome). */
static bool serve_stream(struct agent *ag, const char *server, const char *token, int64_t *next_ms)
{
	char err[256];
	struct hp_stream *st = hp_stream_open(server, token, err, sizeof(err));
	if (!st) {
		logmsg(false, "%s", err);
		return false;
	}
	bool welcomed = false, cancelled = false;
	ag->ncatalog = ag->catalog_pos = 0;
	ag->catalog_active = false;
	if (send_hello(ag, st) < 0)
		logmsg(false, "out of memory building Hello");
	for (;;) {
		if (stop_requested && !cancelled) {
			hp_stream_cancel(st);
			cancelled = true;
		}
		if (welcomed)
			pump_catalog(ag, st);
		uint8_t *msg;
		size_t len;
		enum hp_stream_event ev = hp_stream_poll(st, 50, &msg, &len);
		if (ev == HP_STREAM_MESSAGE) {
			bool was = welcomed;
			handle_server_message(ag, st, msg, len, &welcomed);
			free(msg);
			if (welcomed && !was && ag->dropped_batches) {
				logmsg(true, "%llu metric batch(es) were dropped while not connected",
				       (unsigned long long)ag->dropped_batches);
				ag->dropped_batches = 0;
			}
		} else if (ev == HP_STREAM_ENDED) {
			break;
		}
		interval_tick(ag, st, welcomed, next_ms);
	}
	const char *details = "";
	int code = hp_stream_status(st, &details);
	if (stop_requested) {
		logmsg(true, "stream closed for shutdown");
	} else if (code == 16 /* UNAUTHENTICATED */) {
		logmsg(false, "the backend rejected the agent token (UNAUTHENTICATED: %s)", details);
	} else if (code == 7 /* PERMISSION_DENIED */) {
		logmsg(false, "the backend refused this agent (PERMISSION_DENIED: %s)", details);
	} else {
		logmsg(false, "stream to %s ended: %s%s%s", server, code >= 0 ? hp_grpc_status_name(code) : "no status",
		       details && *details ? ": " : "", details ? details : "");
	}
	size_t unsent = hp_stream_pending(st);
	if (unsent && welcomed && !stop_requested)
		logmsg(true, "%zu queued message(s) were not sent", unsent);
	hp_stream_close(st);
	return welcomed;
}

int cmd_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "token-file", required_argument, NULL, 't' },
		{ "host-id", required_argument, NULL, 'H' },
		{ "interval-ms", required_argument, NULL, 'i' },
		{ "frequency", required_argument, NULL, 'f' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *server = NULL, *token_file = NULL, *host_id = NULL;
	struct agent ag;
	memset(&ag, 0, sizeof(ag));
	ag.interval_ms = 1000;
	ag.frequency = 997;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's': server = optarg; break;
		case 't': token_file = optarg; break;
		case 'H': host_id = optarg; break;
		case 'i':
			if (hp_parse_uint(optarg, 100, 60000, &ag.interval_ms) < 0) {
				fprintf(stderr, "hotpathd run: --interval-ms must be a number from 100 to 60000\n");
				return HP_EXIT_USAGE;
			}
			break;
		case 'f':
			if (hp_parse_uint(optarg, 1, 10000, &ag.frequency) < 0) {
				fprintf(stderr, "hotpathd run: --frequency must be a number from 1 to 10000\n");
				return HP_EXIT_USAGE;
			}
			break;
		case 'q': quiet = true; break;
		case 'h': usage(stdout); return HP_EXIT_OK;
		default: usage(stderr); return HP_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "hotpathd run: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return HP_EXIT_USAGE;
	}
	if (!server || !*server) {
		fprintf(stderr, "hotpathd run: --server HOST:PORT is required\n");
		usage(stderr);
		return HP_EXIT_USAGE;
	}
	if (host_id && (!*host_id || strlen(host_id) > 127)) {
		fprintf(stderr, "hotpathd run: --host-id must be 1 to 127 characters\n");
		return HP_EXIT_USAGE;
	}
	char token[4096], err[512];
	if (read_token(token_file, token, sizeof(token), err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd run: %s\n", err);
		return HP_EXIT_USAGE;
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	int ret = HP_EXIT_ERROR;
	if (hp_hostinfo_collect(&ag.host, host_id, err, sizeof(err)) < 0) {
		logmsg(false, "%s", err);
		return HP_EXIT_ERROR;
	}

	/* Parse the whole kernel once; the model serves every connection. */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct hp_open_opts oo = { .only_function = NULL, .threads = 0, .quiet = quiet };
	int r = hp_model_open_kernel(&oo, &ag.model, err, sizeof(err));
	if (r < 0) {
		logmsg(false, "cannot parse the live kernel: %s", err);
		return HP_EXIT_ERROR;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ag.parse_seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if ((r = hp_catalog_digest_all(ag.model)) < 0) {
		logmsg(false, "cannot compute catalog digests: %s", strerror(-r));
		goto out;
	}
	ag.block_counts = calloc(ag.model->nmods ? ag.model->nmods : 1, sizeof(*ag.block_counts));
	if (!ag.block_counts)
		goto out;
	size_t nfuncs = 0, nblocks = 0;
	for (size_t i = 0; i < ag.model->nmods; i++) {
		ag.block_counts[i] = (uint32_t)hp_catalog_block_count(&ag.model->mods[i]);
		nfuncs += ag.model->mods[i].nfuncs;
		nblocks += ag.block_counts[i];
	}
	logmsg(true, "parsed %zu functions, %zu blocks in %zu module(s) in %.2f s", nfuncs, nblocks,
	       ag.model->nmods, ag.parse_seconds);

	char detail[256];
	snprintf(detail, sizeof(detail),
		 "kernel text read through a BPF syscall program (bpf_probe_read_kernel): %zu functions parsed", nfuncs);
	hp_caps_probe(&ag.caps, true, detail);
	for (size_t i = 0; i < ag.caps.n; i++)
		logmsg(true, "capability %s: %s (%s)", ag.caps.caps[i].name,
		       ag.caps.caps[i].available ? "yes" : "no", ag.caps.caps[i].detail);

	struct hp_sampler_opts so = { .frequency = ag.frequency };
	ag.sampler = hp_sampler_open(ag.model, &so, err, sizeof(err));
	if (!ag.sampler) {
		logmsg(false, "sampling disabled: %s", err);
		/* The probe opened one event; the sampler needs one per CPU and a
		 * ring each. Report what actually failed. */
		for (size_t i = 0; i < ag.caps.n; i++) {
			if (strcmp(ag.caps.caps[i].name, "perf_sampling") == 0) {
				ag.caps.caps[i].available = false;
				snprintf(ag.caps.caps[i].detail, sizeof(ag.caps.caps[i].detail), "%.250s", err);
			}
		}
	} else
		logmsg(true, "sampling %u CPU(s) with %s at %u Hz", hp_sampler_ncpus(ag.sampler),
		       hp_sampler_event(ag.sampler), ag.frequency);

	hp_transport_init();
	int64_t next_ms = mono_ms() + ag.interval_ms;
	unsigned backoff_ms = 1000;
	while (!stop_requested) {
		logmsg(true, "connecting to %s", server);
		if (serve_stream(&ag, server, token, &next_ms))
			backoff_ms = 1000;
		if (stop_requested)
			break;
		logmsg(true, "reconnecting in %.0f s", backoff_ms / 1000.0);
		int64_t until = mono_ms() + backoff_ms;
		while (!stop_requested && mono_ms() < until) {
			struct timespec ts = { 0, 50 * 1000000L };
			nanosleep(&ts, NULL);
			interval_tick(&ag, NULL, false, &next_ms);
		}
		backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
	}
	hp_transport_shutdown();
	logmsg(true, "stopped");
	ret = HP_EXIT_OK;
out:
	hp_sampler_close(ag.sampler);
	free(ag.catalog_queue);
	free(ag.block_counts);
	hp_model_free(ag.model);
	return ret;
}
