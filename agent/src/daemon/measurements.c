// SPDX-License-Identifier: Apache-2.0
/*
 * The daemon's measurements (see measurements.h). A request names resources
 * by (catalog digest, function index, kind, offset); they become the measure
 * layer's resource words as absolute addresses in the target ("0xADDR" for a
 * function or an instruction address, "0xFUNC+0xOFF" for a block), so module
 * names never matter. The armed rows are described once (MeasurementInfo);
 * batches then refer to them by position, with units and mechanisms interned
 * per batch. One thread reads every due measurement under the registry lock;
 * starting one (slow: probes are attached) happens outside it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/agent.h"
#include "daemon/log.h"
#include "daemon/measurements.h"
#include "daemon/targets.h"
#include "daemon/worker.h"
#include "host/procmaps.h"
#include "measure/measure.h"
#include "plan/profile_measured.h"
#include "replace/install.h"

/* Rows one request may name (its functions then add their blocks, up to HP_MEASURE_MAX_ROWS). */
#define MAX_RESOURCE_REFS 65536
#define MIN_INTERVAL_MS   100
#define MAX_INTERVAL_MS   60000

struct hp_active {
	char id[HP_MEASUREMENT_ID_MAX + 1];
	char target_id[HP_TARGET_ID_LEN];
	struct hp_target *target;           /* referenced while the measurement runs */
	struct hp_measure *h;               /* NULL once it ended */
	Hotpath__V1__MeasurementInfo *info; /* unpacked, owned; state kept current */
	unsigned interval_ms;
	int64_t next_due_ms;
	/* Once ended: its block counts since it was armed, for MakePlan
	 * (NULL when it measured no block). */
	struct hp_profile *final;
};

static int64_t unix_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool valid_id(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (!n || n > HP_MEASUREMENT_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
		      c == '_'))
			return false;
	}
	return true;
}

static Hotpath__V1__MeasurementState state_of(enum hp_measure_state s)
{
	switch (s) {
	case HP_MEASURE_ARMED:
		return HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_ARMED;
	case HP_MEASURE_RUNNING:
		return HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_RUNNING;
	case HP_MEASURE_TARGET_EXITED:
		return HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_TARGET_EXITED;
	default:
		return HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_FAILED;
	}
}

/* The proto's metric for a measure-layer metric. */
static Hotpath__V1__Metric proto_metric(int m)
{
	static const Hotpath__V1__Metric map[HP_METRIC_N] = {
		[HP_METRIC_COUNT] = HOTPATH__V1__METRIC__METRIC_COUNT,
		[HP_METRIC_WALL] = HOTPATH__V1__METRIC__METRIC_WALL_NS,
		[HP_METRIC_VTIME] = HOTPATH__V1__METRIC__METRIC_VTIME_NS,
		[HP_METRIC_CONCURRENCY] = HOTPATH__V1__METRIC__METRIC_CONCURRENCY,
		[HP_METRIC_CYCLES] = HOTPATH__V1__METRIC__METRIC_CYCLES,
		[HP_METRIC_INSTRUCTIONS] = HOTPATH__V1__METRIC__METRIC_INSTRUCTIONS,
		[HP_METRIC_ICACHE_STALL] = HOTPATH__V1__METRIC__METRIC_ICACHE_STALL,
		[HP_METRIC_BRANCH_MISPREDICT] = HOTPATH__V1__METRIC__METRIC_BRANCH_MISPREDICT,
	};
	return m >= 0 && m < HP_METRIC_N ? map[m] : HOTPATH__V1__METRIC__METRIC_UNSPECIFIED;
}

static void set_detail(Hotpath__V1__MeasurementInfo *info, const char *s)
{
	if (info->detail && info->detail != protobuf_c_empty_string)
		free(info->detail);
	info->detail = strdup(s ? s : "");
}

/* ---- persistence ---------------------------------------------------------------------------- */

static void save(struct hp_measurements *ms, const struct hp_active *a)
{
	if (!ms->dir[0])
		return;
	char path[4400], tmp[4400];
	snprintf(path, sizeof(path), "%s/%s.pb", ms->dir, a->id);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", ms->dir, a->id);
	size_t len = hotpath__v1__measurement_info__get_packed_size(a->info);
	uint8_t *buf = malloc(len ? len : 1);
	FILE *f = buf ? fopen(tmp, "we") : NULL;
	bool ok = false;
	if (f) {
		hotpath__v1__measurement_info__pack(a->info, buf);
		ok = fwrite(buf, 1, len, f) == len;
		ok = fclose(f) == 0 && ok;
		ok = ok && rename(tmp, path) == 0;
	}
	if (!ok) {
		unlink(tmp);
		hp_log(false, "cannot keep measurement %s in %s: it will not survive a restart of the agent", a->id,
		       ms->dir);
	}
	free(buf);
}

static void unsave(struct hp_measurements *ms, const char *id)
{
	if (!ms->dir[0])
		return;
	char path[4400];
	snprintf(path, sizeof(path), "%s/%s.pb", ms->dir, id);
	unlink(path);
}

int hp_measurements_init(struct hp_measurements *ms, const char *state_dir)
{
	memset(ms, 0, sizeof(*ms));
	pthread_mutex_init(&ms->lock, NULL);
	ms->initialized = true;
	if (state_dir) {
		snprintf(ms->dir, sizeof(ms->dir), "%s/measurements", state_dir);
		if (mkdir(ms->dir, 0700) < 0 && errno != EEXIST) {
			hp_log(false, "cannot create %s: %s; measurements will not survive a restart", ms->dir,
			       strerror(errno));
			ms->dir[0] = '\0';
		}
	}
	return 0;
}

static void free_active(struct hp_active *a)
{
	hp_measure_close(a->h);
	if (a->final)
		hp_profile_free(a->final);
	free(a->final);
	if (a->info)
		hotpath__v1__measurement_info__free_unpacked(a->info, NULL);
	free(a);
}

/* ---- batches -------------------------------------------------------------------------------- */

/* Strings a batch names by position. */
struct interned {
	const char *s[64];
	size_t n;
};

static uint32_t intern(struct interned *t, const char *s)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->s[i], s) == 0)
			return (uint32_t)i;
	if (t->n == sizeof(t->s) / sizeof(t->s[0]))
		return 0;
	t->s[t->n] = s;
	return (uint32_t)t->n++;
}

static bool add_value(Hotpath__V1__MetricValue *slot, const struct hp_metric_value *v, Hotpath__V1__Metric metric,
		      struct interned *units, struct interned *mechs)
{
	if (!v->present)
		return false;
	hotpath__v1__metric_value__init(slot);
	slot->metric = metric;
	slot->value = v->value;
	slot->total = v->total;
	slot->unit = intern(units, v->unit ? v->unit : "");
	slot->label = (Hotpath__V1__ValueLabel)(v->label + 1);
	slot->mechanism = intern(mechs, v->mechanism ? v->mechanism : "");
	return true;
}

/* Queue one interval's values in the outbox. Rows whose values are all zero are left out. */
static int queue_batch(struct agent *ag, const struct hp_active *a, const struct hp_measure_reading *r, int state,
		       const char *detail)
{
	size_t n = r->nrows, per = HP_METRIC_N + 2;
	Hotpath__V1__ResourceValues *rv = calloc(n ? n : 1, sizeof(*rv));
	Hotpath__V1__ResourceValues **rvp = calloc(n ? n : 1, sizeof(*rvp));
	Hotpath__V1__MetricValue *vals = calloc(n ? n * per : 1, sizeof(*vals));
	Hotpath__V1__MetricValue **valp = calloc(n ? n * per : 1, sizeof(*valp));
	Hotpath__V1__EdgeCount *ec = NULL, **ecp = NULL;
	int ret = -ENOMEM;
	if (!rv || !rvp || !vals || !valp)
		goto out;
	struct interned units = { 0 }, mechs = { 0 };
	size_t nrv = 0;
	for (size_t i = 0; i < n; i++) {
		const struct hp_measure_row_values *row = &r->rows[i];
		Hotpath__V1__MetricValue *v = &vals[i * per];
		Hotpath__V1__MetricValue **vp = &valp[i * per];
		size_t k = 0;
		bool nonzero = row->samples || row->exits;
		for (int m = 0; m < HP_METRIC_N; m++)
			if (add_value(&v[k], &row->v[m], proto_metric(m), &units, &mechs)) {
				nonzero |= v[k].value != 0;
				vp[k] = &v[k];
				k++;
			}
		if (add_value(&v[k], &row->wall_per_call, HOTPATH__V1__METRIC__METRIC_WALL_PER_CALL_NS, &units, &mechs))
			vp[k] = &v[k], k++;
		if (add_value(&v[k], &row->vtime_per_call, HOTPATH__V1__METRIC__METRIC_VTIME_PER_CALL_NS, &units,
			      &mechs))
			vp[k] = &v[k], k++;
		if (!k || !nonzero)
			continue;
		hotpath__v1__resource_values__init(&rv[nrv]);
		rv[nrv].resource = (uint32_t)i;
		rv[nrv].n_values = k;
		rv[nrv].values = vp;
		rv[nrv].samples = row->samples;
		rv[nrv].exits = row->exits;
		rvp[nrv] = &rv[nrv];
		nrv++;
	}
	Hotpath__V1__MeasurementBatch b = HOTPATH__V1__MEASUREMENT_BATCH__INIT;
	b.measurement_id = (char *)a->id;
	b.interval_start_unix_ns = r->start_unix_ns;
	b.interval_end_unix_ns = r->end_unix_ns > r->start_unix_ns ? r->end_unix_ns : r->start_unix_ns + 1;
	b.state = (Hotpath__V1__MeasurementState)state;
	b.detail = (char *)(detail ? detail : "");
	b.n_resources = nrv;
	b.resources = rvp;
	b.n_units = units.n;
	b.units = (char **)units.s;
	b.n_mechanisms = mechs.n;
	b.mechanisms = (char **)mechs.s;
	b.samples_total = r->samples_total;
	b.samples_lost = r->samples_lost;
	b.frames_dropped = r->frames_dropped;
	b.exits_unmatched = r->exits_unmatched;
	/* Edges of the functions measured with their blocks (measure/edges.c);
	 * edges that carried nothing in the interval are left out. */
	struct hp_function_edges *fe = NULL;
	size_t nfe = 0, nedges = 0;
	if (hp_measure_edges_from(a->h, r, true, &fe, &nfe) < 0)
		goto out;
	for (size_t i = 0; i < nfe; i++)
		nedges += fe[i].edges.nedges;
	ec = calloc(nedges ? nedges : 1, sizeof(*ec));
	ecp = calloc(nedges ? nedges : 1, sizeof(*ecp));
	if (!ec || !ecp)
		goto out_edges;
	size_t k = 0;
	for (size_t i = 0; i < nfe; i++)
		for (size_t j = 0; j < fe[i].edges.nedges; j++) {
			const struct hp_edge *e = &fe[i].edges.edges[j];
			if (!e->count)
				continue; /* absent means none in this interval, as for values */
			hotpath__v1__edge_count__init(&ec[k]);
			ec[k].function_row = (uint32_t)fe[i].function_row;
			ec[k].from_offset = e->from < fe[i].nblocks ? fe[i].block_offsets[e->from] : 0;
			ec[k].to_offset = e->to < fe[i].nblocks ? fe[i].block_offsets[e->to] : 0;
			ec[k].count = e->count;
			ec[k].kind = (Hotpath__V1__EdgeKind)(e->kind + 1);
			ec[k].label = fe[i].sampled           ? HOTPATH__V1__EDGE_LABEL__EDGE_LABEL_SAMPLED_ESTIMATE :
				      e->how == HP_EDGE_EXACT ? HOTPATH__V1__EDGE_LABEL__EDGE_LABEL_EXACT_DERIVED :
								HOTPATH__V1__EDGE_LABEL__EDGE_LABEL_ESTIMATED;
			ecp[k] = &ec[k];
			k++;
		}
	b.n_edges = k;
	b.edges = ecp;
	Hotpath__V1__AgentMessage msg = HOTPATH__V1__AGENT_MESSAGE__INIT;
	msg.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_MEASUREMENT;
	msg.measurement = &b;
	ret = hp_outbox_add(&ag->outbox, &msg, b.interval_start_unix_ns, b.interval_end_unix_ns);
out_edges:
	hp_measure_edges_free(fe, nfe);
out:
	free(ec);
	free(ecp);
	free(rv);
	free(rvp);
	free(vals);
	free(valp);
	return ret;
}

/* End a measurement: its last interval (read now) carries the end state. Locked. */
static struct hp_active *find(struct hp_measurements *ms, const char *id);

/* The block counts of a running measurement since it was armed, as a profile. Locked. */
static int counts_of(struct hp_active *a, struct hp_profile *out, size_t *nblocks, char *err, size_t errlen)
{
	struct hp_measure_reading r;
	memset(out, 0, sizeof(*out));
	out->weight = 1;
	if (hp_measure_total(a->h, &r) < 0) {
		snprintf(err, errlen, "out of memory reading measurement %s", a->id);
		return -ENOMEM;
	}
	int rc = hp_profile_from_reading(a->h, &r, out, nblocks, err, errlen);
	hp_measure_reading_free(&r);
	if (rc < 0)
		hp_profile_free(out);
	return rc;
}

/* Before a measurement's handle closes: keep its block counts. Locked. */
static void keep_counts(struct hp_active *a)
{
	struct hp_profile p;
	size_t n = 0;
	char err[256];
	if (counts_of(a, &p, &n, err, sizeof(err)) < 0)
		return;
	if (!n || !(a->final = malloc(sizeof(*a->final)))) {
		hp_profile_free(&p);
		return;
	}
	*a->final = p;
}

int hp_measurements_profile(struct agent *ag, const char *id, const char *target_id, struct hp_profile *out, char *err,
			    size_t errlen)
{
	struct hp_measurements *ms = &ag->measurements;
	size_t n = 0;
	int r = 0;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&ms->lock);
	struct hp_active *a = find(ms, id ? id : "");
	if (!a) {
		snprintf(err, errlen, "no measurement %.64s on this agent (or it ended before the agent restarted)",
			 id ? id : "");
		r = -ENOENT;
	} else if (strcmp(a->target_id, target_id)) {
		snprintf(err, errlen, "measurement %s measured target %s, not %s", a->id, a->target_id, target_id);
		r = -EINVAL;
	} else if (a->h) {
		r = counts_of(a, out, &n, err, errlen);
	} else if (a->final) {
		r = hp_profile_copy(a->final, out);
		n = 1;
	}
	if (r == 0 && !n) {
		hp_profile_free(out);
		snprintf(err, errlen, "measurement %s counted no basic block (measure with blocks for a plan)", a->id);
		r = -ENODATA;
	}
	if (r == 0)
		snprintf(out->source, sizeof(out->source), "measurement %s (%s counts)", a->id,
			 out->estimated ? "estimated" : "exact");
	pthread_mutex_unlock(&ms->lock);
	return r;
}

/* One byte of the file mapped at addr in process pid (-1 when it cannot be read). */
static int file_byte(int pid, uint64_t addr, char *path, size_t plen, int *fd)
{
	struct hp_code_location loc;
	uint8_t b;
	if (hp_code_location(pid, addr, &loc) < 0)
		return -1;
	if (*fd < 0 || strcmp(path, loc.path)) {
		if (*fd >= 0)
			close(*fd);
		snprintf(path, plen, "%s", loc.path);
		*fd = open(loc.path, O_RDONLY | O_CLOEXEC);
	}
	if (*fd < 0 || pread(*fd, &b, 1, (off_t)loc.file_offset) != 1)
		return -1;
	return b;
}

int hp_measurements_probe_bytes(struct agent *ag, const char *target_id, struct hp_byte_patch **out, size_t *n)
{
	struct hp_measurements *ms = &ag->measurements;
	size_t cap = 0;
	char path[128] = "";
	int fd = -1;
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&ms->lock);
	for (size_t i = 0; i < ms->n; i++) {
		struct hp_active *a = ms->v[i];
		if (!a->h || !a->target || strcmp(a->target_id, target_id) ||
		    a->target->kind != HOTPATH__V1__TARGET_KIND__TARGET_KIND_PROCESS)
			continue;
		const struct hp_measure_row *rows = hp_measure_rows(a->h);
		for (size_t k = 0; k < hp_measure_nrows(a->h); k++) {
			uint64_t at = rows[k].kind == HP_ROW_BLOCK ? rows[k].block_address : rows[k].function_address;
			if (rows[k].run_address != at)
				continue; /* probed in an installed copy: the model does not read it */
			int b = file_byte(a->target->pid, at, path, sizeof(path), &fd);
			if (b < 0)
				continue;
			if (*n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				struct hp_byte_patch *v = realloc(*out, nc * sizeof(*v));
				if (!v)
					goto out;
				*out = v;
				cap = nc;
			}
			(*out)[(*n)++] = (struct hp_byte_patch){ .addr = at, .len = 1, .bytes = { (uint8_t)b } };
		}
	}
out:
	pthread_mutex_unlock(&ms->lock);
	if (fd >= 0)
		close(fd);
	return 0;
}

static void end_active(struct agent *ag, struct hp_active *a, int state, const char *detail)
{
	if (a->h) {
		struct hp_measure_reading r;
		if (hp_measure_read(a->h, &r) == 0) {
			if (queue_batch(ag, a, &r, state, detail) < 0)
				hp_log(false, "measurement %s: out of memory keeping its last interval", a->id);
			hp_measure_reading_free(&r);
		}
		keep_counts(a);
		hp_measure_close(a->h);
		a->h = NULL;
	}
	a->info->state = (Hotpath__V1__MeasurementState)state;
	set_detail(a->info, detail);
	a->info->ended_unix_ns = unix_ns();
	hp_targets_release(&ag->targets, a->target);
	a->target = NULL;
	unsave(&ag->measurements, a->id);
	hp_log(true, "measurement %s ended: %s", a->id, detail ? detail : "");
}

/* Read every measurement that is due. Locked. */
static void tick(struct agent *ag, int64_t now_ms)
{
	struct hp_measurements *ms = &ag->measurements;
	for (size_t i = 0; i < ms->n; i++) {
		struct hp_active *a = ms->v[i];
		if (!a->h || now_ms < a->next_due_ms)
			continue;
		a->next_due_ms += a->interval_ms;
		if (a->next_due_ms <= now_ms)
			a->next_due_ms = now_ms + a->interval_ms; /* fell behind: skip, do not burst */
		char detail[512] = "";
		enum hp_measure_state s = hp_measure_state(a->h, detail, sizeof(detail));
		if (s >= HP_MEASURE_TARGET_EXITED) {
			end_active(ag, a, state_of(s), detail);
			continue;
		}
		struct hp_measure_reading r;
		if (hp_measure_read(a->h, &r) < 0) {
			hp_log(false, "measurement %s: out of memory reading an interval", a->id);
			continue;
		}
		int st = state_of(r.state);
		a->info->state = (Hotpath__V1__MeasurementState)st;
		if (queue_batch(ag, a, &r, st, "") < 0)
			hp_log(false, "measurement %s: out of memory keeping an interval", a->id);
		hp_measure_reading_free(&r);
	}
}

static void *thread_main(void *arg)
{
	struct agent *ag = arg;
	struct hp_measurements *ms = &ag->measurements;
	while (!ms->stop) {
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
		if (hp_targets_poll_exits(&ag->targets)) {
			uint8_t *buf;
			size_t len;
			if (hp_targets_pack_update(&ag->targets, &buf, &len) == 0) {
				Hotpath__V1__AgentMessage *m = hotpath__v1__agent_message__unpack(NULL, len, buf);
				if (m) {
					hp_replies_push(&ag->replies, m);
					hotpath__v1__agent_message__free_unpacked(m, NULL);
				}
				free(buf);
			}
		}
		pthread_mutex_lock(&ms->lock);
		tick(ag, hp_mono_ms());
		pthread_mutex_unlock(&ms->lock);
	}
	return NULL;
}

int hp_measurements_run(struct agent *ag)
{
	struct hp_measurements *ms = &ag->measurements;
	ms->stop = false;
	int r = pthread_create(&ms->thread, NULL, thread_main, ag);
	if (r)
		return -r;
	ms->thread_started = true;
	return 0;
}

void hp_measurements_free(struct hp_measurements *ms)
{
	if (!ms->initialized)
		return;
	if (ms->thread_started) {
		ms->stop = true;
		pthread_join(ms->thread, NULL);
		ms->thread_started = false;
	}
	for (size_t i = 0; i < ms->n; i++)
		free_active(ms->v[i]); /* still persisted: the next run arms them again */
	pthread_mutex_destroy(&ms->lock);
	memset(ms, 0, sizeof(*ms));
}

/* ---- starting ------------------------------------------------------------------------------- */

/* The measure layer's words for a request's resources, in the target's model. */
static int request_words(const struct hp_model *m, const Hotpath__V1__StartMeasurement *req, char ***words_out,
			 bool **blocks_out, char *err, size_t errlen)
{
	size_t n = req->n_resources;
	char **words = calloc(n, sizeof(char *));
	bool *blocks = calloc(n, sizeof(bool));
	if (!words || !blocks) {
		free(words);
		free(blocks);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	int ret = 0;
	for (size_t i = 0; i < n && !ret; i++) {
		const Hotpath__V1__ResourceRef *rr = req->resources[i];
		const struct hp_module *mod = NULL;
		for (size_t k = 0; k < m->nmods && !mod; k++)
			if (strcmp(m->mods[k].digest, rr->digest ? rr->digest : "") == 0)
				mod = &m->mods[k];
		if (!mod) {
			snprintf(err, errlen, "resource %zu: the target has no module with catalog %.16s", i,
				 rr->digest ? rr->digest : "");
			ret = -ENOENT;
			break;
		}
		if (rr->function_index >= mod->nfuncs) {
			snprintf(err, errlen, "resource %zu: function %u of %s does not exist (%zu functions)", i,
				 rr->function_index, mod->name, mod->nfuncs);
			ret = -ENOENT;
			break;
		}
		const struct hp_function *f = &mod->funcs[rr->function_index];
		char w[64];
		switch (rr->kind) {
		case HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_FUNCTION:
			snprintf(w, sizeof(w), "0x%" PRIx64, f->addr);
			blocks[i] = rr->blocks;
			break;
		case HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_BLOCK:
			snprintf(w, sizeof(w), "0x%" PRIx64 "+0x%x", f->addr, rr->offset);
			break;
		case HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_ADDRESS:
			if (rr->offset >= f->size) {
				snprintf(err, errlen, "resource %zu: offset 0x%x is outside %s (size 0x%x)", i,
					 rr->offset, f->name, f->size);
				ret = -ENOENT;
				break;
			}
			snprintf(w, sizeof(w), "0x%" PRIx64, f->addr + rr->offset);
			break;
		default:
			snprintf(err, errlen, "resource %zu: unknown resource kind %d", i, (int)rr->kind);
			ret = -EINVAL;
			break;
		}
		if (!ret && !(words[i] = strdup(w))) {
			snprintf(err, errlen, "out of memory");
			ret = -ENOMEM;
		}
	}
	if (ret) {
		for (size_t i = 0; i < n; i++)
			free(words[i]);
		free(words);
		free(blocks);
		return ret;
	}
	*words_out = words;
	*blocks_out = blocks;
	return 0;
}

/* The armed measurement described as MeasurementInfo (unpacked and owned). */
static Hotpath__V1__MeasurementInfo *describe(struct hp_measure *h, const struct hp_model *m, const char *target_id,
					      const Hotpath__V1__StartMeasurement *req, unsigned interval_ms)
{
	size_t n = hp_measure_nrows(h);
	const struct hp_measure_row *rows = hp_measure_rows(h);
	Hotpath__V1__MeasuredResource *res = calloc(n ? n : 1, sizeof(*res));
	Hotpath__V1__MeasuredResource **resp = calloc(n ? n : 1, sizeof(*resp));
	Hotpath__V1__MetricPlan *plans = calloc(n ? n * HP_METRIC_N : 1, sizeof(*plans));
	Hotpath__V1__MetricPlan **planp = calloc(n ? n * HP_METRIC_N : 1, sizeof(*planp));
	uint32_t pids32[HP_MEASURE_MAX_PIDS];
	int pids[HP_MEASURE_MAX_PIDS];
	Hotpath__V1__MeasurementInfo *out = NULL;
	if (!res || !resp || !plans || !planp)
		goto done;
	for (size_t i = 0; i < n; i++) {
		const struct hp_measure_row *row = &rows[i];
		Hotpath__V1__MeasuredResource *r = &res[i];
		hotpath__v1__measured_resource__init(r);
		r->digest = (char *)m->mods[row->module_index].digest;
		r->function_index = row->function_index;
		bool block = row->kind == HP_ROW_BLOCK;
		r->kind = block ? HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_BLOCK :
				  HOTPATH__V1__RESOURCE_KIND__RESOURCE_KIND_FUNCTION;
		r->block_offset = block ? row->block_offset : 0;
		r->function = (char *)row->function;
		r->address = block ? row->block_address : row->function_address;
		r->size = block ? row->block_size : row->function_size;
		r->function_row = block && row->function_row != HP_ROW_NONE ? row->function_row + 1 : 0;
		r->metrics = &planp[i * HP_METRIC_N];
		for (int k = 0; k < HP_METRIC_N; k++) {
			const struct hp_metric_info *mi = &row->metric[k];
			if (!mi->requested)
				continue;
			Hotpath__V1__MetricPlan *p = &plans[i * HP_METRIC_N + k];
			hotpath__v1__metric_plan__init(p);
			p->metric = proto_metric(k);
			p->available = mi->available;
			p->label = (Hotpath__V1__ValueLabel)(mi->label + 1);
			p->mechanism = (char *)(mi->mechanism ? mi->mechanism : "");
			p->reason = (char *)(mi->reason ? mi->reason : "");
			p->unit = (char *)(k == HP_METRIC_COUNT && mi->label == HP_LABEL_SAMPLED ?
						   "samples" :
						   hp_metric_unit((enum hp_metric)k, block));
			r->metrics[r->n_metrics++] = p;
		}
		resp[i] = r;
	}
	Hotpath__V1__MeasurementInfo info = HOTPATH__V1__MEASUREMENT_INFO__INIT;
	info.measurement_id = req->measurement_id;
	info.target = (char *)target_id;
	info.state = HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_ARMED;
	info.detail = (char *)hp_measure_target_desc(h);
	info.n_resources = n;
	info.resources = resp;
	info.interval_ms = interval_ms;
	info.started_unix_ns = unix_ns();
	info.request = (Hotpath__V1__StartMeasurement *)req;
	size_t np = hp_measure_pids(h, pids, HP_MEASURE_MAX_PIDS);
	for (size_t i = 0; i < np && i < HP_MEASURE_MAX_PIDS; i++)
		pids32[i] = (uint32_t)pids[i];
	info.n_pids = np < HP_MEASURE_MAX_PIDS ? np : HP_MEASURE_MAX_PIDS;
	info.pids = pids32;
	/* Pack and unpack: one owned copy that outlives the handle. */
	size_t len = hotpath__v1__measurement_info__get_packed_size(&info);
	uint8_t *buf = malloc(len ? len : 1);
	if (buf) {
		hotpath__v1__measurement_info__pack(&info, buf);
		out = hotpath__v1__measurement_info__unpack(NULL, len, buf);
		free(buf);
	}
done:
	free(res);
	free(resp);
	free(plans);
	free(planp);
	return out;
}

/* Whether two descriptions measure the same rows. */
static bool same_rows(const Hotpath__V1__MeasurementInfo *a, const Hotpath__V1__MeasurementInfo *b)
{
	if (a->n_resources != b->n_resources)
		return false;
	for (size_t i = 0; i < a->n_resources; i++) {
		const Hotpath__V1__MeasuredResource *x = a->resources[i], *y = b->resources[i];
		if (strcmp(x->digest, y->digest) || x->function_index != y->function_index || x->kind != y->kind ||
		    x->block_offset != y->block_offset)
			return false;
	}
	return true;
}

static int open_measurement(struct agent *ag, struct hp_target *t, const Hotpath__V1__StartMeasurement *req,
			    struct hp_measure **out, unsigned *interval_ms, char *err, size_t errlen)
{
	uint32_t mask = 0;
	for (size_t i = 0; i < req->n_metrics; i++) {
		uint32_t one = 0;
		if (hp_metrics_parse(req->metrics[i], &one, err, errlen) < 0)
			return -EINVAL;
		mask |= one;
	}
	if (!mask) {
		snprintf(err, errlen, "no metrics to measure");
		return -EINVAL;
	}
	if (!req->n_resources) {
		snprintf(err, errlen, "no resources to measure");
		return -EINVAL;
	}
	if (req->n_resources > MAX_RESOURCE_REFS) {
		snprintf(err, errlen, "%zu resources in one request; at most %d", req->n_resources, MAX_RESOURCE_REFS);
		return -E2BIG;
	}
	*interval_ms = req->interval_ms ? req->interval_ms : ag->interval_ms;
	if (*interval_ms < MIN_INTERVAL_MS || *interval_ms > MAX_INTERVAL_MS) {
		snprintf(err, errlen, "interval %u ms is out of range (%d..%d)", *interval_ms, MIN_INTERVAL_MS,
			 MAX_INTERVAL_MS);
		return -EINVAL;
	}
	char **words = NULL;
	bool *blocks = NULL;
	int r = request_words(t->model, req, &words, &blocks, err, errlen);
	if (r < 0)
		return r;
	struct hp_measure_spec spec = {
		.target = t->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_KERNEL ? HP_MEASURE_KERNEL : HP_MEASURE_PID,
		.pid = t->pid,
		.resources = (const char *const *)words,
		.nresources = req->n_resources,
		.metrics = mask,
		.resource_blocks = blocks,
		.where_pid = (int)req->where_pid,
		.where_comm = req->where_comm && *req->where_comm ? req->where_comm : NULL,
		.where_cgroup = req->where_cgroup && *req->where_cgroup ? req->where_cgroup : NULL,
		.allow_partial = req->allow_partial,
		.sample_hz = req->sample_hz,
	};
	struct hp_measure_env env = { .kernel = ag->model,
				      .caps = &ag->caps,
				      .process = spec.target == HP_MEASURE_PID ? t->model : NULL };
	/* Plans installed in the process: their functions are measured where they run now (the copy),
	 * the process's code modelled with the original bytes under the patches, as `hotpathd measure`
	 * does. Without this, calls that go straight to a copy would never reach a probe. */
	struct hp_moved_code *moved = NULL;
	struct hp_byte_patch *bp = NULL;
	size_t nmoved = 0, nbp = 0;
	if (spec.target == HP_MEASURE_PID && ag->state_dir) {
		char merr[256];
		if (hp_moved_code_of(ag->state_dir, t->pid, &moved, &nmoved, merr, sizeof(merr)) == 0) {
			env.moved = moved;
			env.nmoved = nmoved;
		}
		if (hp_installed_patches(ag->state_dir, t->pid, &bp, &nbp) == 0) {
			env.overlay = bp;
			env.noverlay = nbp;
		}
	}
	r = hp_measure_open(&spec, &env, out, err, errlen);
	hp_moved_code_free(moved, nmoved);
	free(bp);
	for (size_t i = 0; i < req->n_resources; i++)
		free(words[i]);
	free(words);
	free(blocks);
	return r < 0 ? -EINVAL : 0;
}

/* Publish a running measurement; false when the registry is full of running ones. Locked. */
static bool publish(struct hp_measurements *ms, struct hp_active *a)
{
	if (ms->n == HP_MEASUREMENTS_MAX) {
		for (size_t i = 0; i < ms->n; i++) {
			if (!ms->v[i]->h) {
				free_active(ms->v[i]);
				memmove(ms->v + i, ms->v + i + 1, (ms->n - i - 1) * sizeof(*ms->v));
				ms->n--;
				break;
			}
		}
		if (ms->n == HP_MEASUREMENTS_MAX)
			return false;
	}
	ms->v[ms->n++] = a;
	return true;
}

static struct hp_active *find(struct hp_measurements *ms, const char *id)
{
	for (size_t i = 0; i < ms->n; i++)
		if (strcmp(ms->v[i]->id, id) == 0)
			return ms->v[i];
	return NULL;
}

static Hotpath__V1__MeasurementInfo *copy_info(const Hotpath__V1__MeasurementInfo *info)
{
	size_t len = hotpath__v1__measurement_info__get_packed_size(info);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return NULL;
	hotpath__v1__measurement_info__pack(info, buf);
	Hotpath__V1__MeasurementInfo *c = hotpath__v1__measurement_info__unpack(NULL, len, buf);
	free(buf);
	return c;
}

int hp_measurements_start(struct agent *ag, struct hp_job *job, const Hotpath__V1__StartMeasurement *req,
			  Hotpath__V1__MeasurementInfo **info, char *err, size_t errlen)
{
	struct hp_measurements *ms = &ag->measurements;
	*info = NULL;
	if (!valid_id(req->measurement_id)) {
		snprintf(err, errlen, "a measurement id is 1 to %d letters, digits, '-' or '_'", HP_MEASUREMENT_ID_MAX);
		return -EINVAL;
	}
	pthread_mutex_lock(&ms->lock);
	struct hp_active *have = find(ms, req->measurement_id);
	if (have)
		*info = copy_info(have->info);
	pthread_mutex_unlock(&ms->lock);
	if (have)
		return *info ? 0 : -ENOMEM; /* started before: the same measurement */
	struct hp_target *t = hp_targets_get(&ag->targets, req->target);
	if (!t) {
		snprintf(err, errlen, "no target %.60s (attach the process first)", req->target ? req->target : "");
		return -ENOENT;
	}
	if (t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED || !t->model) {
		snprintf(err, errlen, "target %s has ended: %s", t->id, t->detail);
		hp_targets_release(&ag->targets, t);
		return -ESRCH;
	}
	hp_job_progress(ag, job, 0.1, "resolving resources and choosing mechanisms");
	struct hp_measure *h = NULL;
	unsigned interval_ms = 0;
	int r = open_measurement(ag, t, req, &h, &interval_ms, err, errlen);
	if (r < 0) {
		hp_targets_release(&ag->targets, t);
		return r;
	}
	if (hp_job_cancelled(job)) {
		hp_measure_close(h);
		hp_targets_release(&ag->targets, t);
		snprintf(err, errlen, "cancelled");
		return -ECANCELED;
	}
	hp_job_progress(ag, job, 0.9, "armed; describing the rows");
	struct hp_active *a = calloc(1, sizeof(*a));
	if (!a || !(a->info = describe(h, t->model, t->id, req, interval_ms))) {
		free(a);
		hp_measure_close(h);
		hp_targets_release(&ag->targets, t);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	snprintf(a->id, sizeof(a->id), "%s", req->measurement_id);
	snprintf(a->target_id, sizeof(a->target_id), "%s", t->id);
	a->target = t;
	a->h = h;
	a->interval_ms = interval_ms;
	a->next_due_ms = hp_mono_ms() + interval_ms;
	pthread_mutex_lock(&ms->lock);
	bool ok = publish(ms, a);
	if (ok) {
		save(ms, a);
		*info = copy_info(a->info);
	}
	pthread_mutex_unlock(&ms->lock);
	if (!ok) {
		free_active(a);
		hp_targets_release(&ag->targets, t);
		snprintf(err, errlen, "the agent runs %d measurements already; stop some first", HP_MEASUREMENTS_MAX);
		return -E2BIG;
	}
	hp_log(true, "measurement %s armed on %s: %zu row(s) every %u ms", a->id, t->id, a->info->n_resources,
	       interval_ms);
	return *info ? 0 : -ENOMEM;
}

int hp_measurements_stop(struct agent *ag, const char *id, Hotpath__V1__MeasurementInfo **info, char *err,
			 size_t errlen)
{
	struct hp_measurements *ms = &ag->measurements;
	*info = NULL;
	pthread_mutex_lock(&ms->lock);
	struct hp_active *a = find(ms, id ? id : "");
	if (a && a->h)
		end_active(ag, a, HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_STOPPED, "stopped on request");
	if (a)
		*info = copy_info(a->info);
	pthread_mutex_unlock(&ms->lock);
	if (!a) {
		snprintf(err, errlen, "no measurement %.64s on this agent", id ? id : "");
		return -ENOENT;
	}
	return *info ? 0 : -ENOMEM;
}

void hp_measurements_stop_target(struct agent *ag, const char *target_id, const char *why)
{
	struct hp_measurements *ms = &ag->measurements;
	pthread_mutex_lock(&ms->lock);
	for (size_t i = 0; i < ms->n; i++)
		if (ms->v[i]->h && strcmp(ms->v[i]->target_id, target_id) == 0)
			end_active(ag, ms->v[i], HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_STOPPED, why);
	pthread_mutex_unlock(&ms->lock);
}

int hp_measurements_rearm(struct agent *ag, const char *target_id)
{
	struct hp_measurements *ms = &ag->measurements;
	static char ids[HP_MEASUREMENTS_MAX][HP_MEASUREMENT_ID_MAX + 1];
	static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER; /* ids is shared: one re-arm at a time */
	size_t n = 0;
	int moved = 0;

	pthread_mutex_lock(&one);
	pthread_mutex_lock(&ms->lock);
	for (size_t i = 0; i < ms->n; i++) {
		struct hp_active *a = ms->v[i];
		if (a->h && a->target && !strcmp(a->target_id, target_id) &&
		    a->target->kind == HOTPATH__V1__TARGET_KIND__TARGET_KIND_PROCESS)
			snprintf(ids[n++], sizeof(ids[0]), "%s", a->id);
	}
	pthread_mutex_unlock(&ms->lock);
	for (size_t i = 0; i < n; i++) {
		char err[1024] = "";
		uint8_t *req = NULL;
		size_t len = 0;
		/* The request, copied: the measurement may end while the new probes are armed. */
		pthread_mutex_lock(&ms->lock);
		struct hp_active *a = find(ms, ids[i]);
		if (a && a->h && a->info->request) {
			len = hotpath__v1__start_measurement__get_packed_size(a->info->request);
			if ((req = malloc(len ? len : 1)))
				hotpath__v1__start_measurement__pack(a->info->request, req);
		}
		pthread_mutex_unlock(&ms->lock);
		if (!req)
			continue;
		Hotpath__V1__StartMeasurement *rq = hotpath__v1__start_measurement__unpack(NULL, len, req);
		free(req);
		struct hp_target *t = rq ? hp_targets_get(&ag->targets, target_id) : NULL;
		struct hp_measure *h = NULL, *old = NULL;
		unsigned interval_ms = 0;
		Hotpath__V1__MeasurementInfo *now = NULL;
		if (t && t->state == HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED && t->model &&
		    open_measurement(ag, t, rq, &h, &interval_ms, err, sizeof(err)) == 0)
			now = describe(h, t->model, t->id, rq, interval_ms);
		pthread_mutex_lock(&ms->lock);
		a = find(ms, ids[i]);
		if (a && a->h && now && same_rows(now, a->info)) {
			/* The old probes' last interval, then the new ones count on. */
			struct hp_measure_reading r;
			if (hp_measure_read(a->h, &r) == 0) {
				if (queue_batch(ag, a, &r, state_of(r.state), "") < 0)
					hp_log(false, "measurement %s: out of memory keeping an interval", a->id);
				hp_measure_reading_free(&r);
			}
			old = a->h;
			a->h = h;
			h = NULL;
			moved++;
		} else if (a && a->h) {
			hp_log(false,
			       "measurement %s: not armed on %s's changed code (%s); its probes stay where they were",
			       ids[i], target_id, err[0] ? err : "its rows differ now");
		}
		pthread_mutex_unlock(&ms->lock);
		if (old)
			hp_log(true, "measurement %s armed again on %s's code as it runs now", ids[i], target_id);
		hp_measure_close(old); /* after the new probes are attached: no hit falls between */
		hp_measure_close(h);
		if (now)
			hotpath__v1__measurement_info__free_unpacked(now, NULL);
		hp_targets_release(&ag->targets, t);
		if (rq)
			hotpath__v1__start_measurement__free_unpacked(rq, NULL);
	}
	pthread_mutex_unlock(&one);
	return moved;
}

int hp_measurements_infos(struct hp_measurements *ms, Hotpath__V1__MeasurementInfo ***out, size_t *n)
{
	pthread_mutex_lock(&ms->lock);
	Hotpath__V1__MeasurementInfo **v = calloc(ms->n ? ms->n : 1, sizeof(*v));
	size_t k = 0;
	for (size_t i = 0; v && i < ms->n; i++)
		if ((v[k] = copy_info(ms->v[i]->info)))
			k++;
	pthread_mutex_unlock(&ms->lock);
	*out = v;
	*n = k;
	return v ? 0 : -ENOMEM;
}

void hp_measurements_infos_free(Hotpath__V1__MeasurementInfo **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		hotpath__v1__measurement_info__free_unpacked(v[i], NULL);
	free(v);
}

/* ---- restoring after a restart -------------------------------------------------------------- */

/* Keep an ended measurement to report in Hello. Locked by the caller. */
static void keep_ended(struct hp_measurements *ms, Hotpath__V1__MeasurementInfo *info, const char *detail, int state)
{
	struct hp_active *a = calloc(1, sizeof(*a));
	if (!a) {
		hotpath__v1__measurement_info__free_unpacked(info, NULL);
		return;
	}
	snprintf(a->id, sizeof(a->id), "%s", info->measurement_id);
	snprintf(a->target_id, sizeof(a->target_id), "%s", info->target);
	a->info = info;
	info->state = (Hotpath__V1__MeasurementState)state;
	set_detail(info, detail);
	info->ended_unix_ns = unix_ns();
	if (!publish(ms, a))
		free_active(a);
}

static void restore_one(struct agent *ag, const char *path)
{
	struct hp_measurements *ms = &ag->measurements;
	FILE *f = fopen(path, "re");
	uint8_t *buf = malloc(16 << 20);
	size_t len = f && buf ? fread(buf, 1, 16 << 20, f) : 0;
	if (f)
		fclose(f);
	Hotpath__V1__MeasurementInfo *saved = len ? hotpath__v1__measurement_info__unpack(NULL, len, buf) : NULL;
	free(buf);
	unlink(path); /* saved again below if it runs */
	if (!saved || !saved->request || !valid_id(saved->measurement_id)) {
		if (saved)
			hotpath__v1__measurement_info__free_unpacked(saved, NULL);
		hp_log(false, "ignored %s: not a measurement of this agent", path);
		return;
	}
	char err[1024] = "";
	const char *id = saved->measurement_id;
	struct hp_target *t = hp_targets_get(&ag->targets, saved->target);
	if (!t || t->state != HOTPATH__V1__TARGET_STATE__TARGET_STATE_ATTACHED || !t->model) {
		hp_targets_release(&ag->targets, t);
		hp_log(true, "measurement %s: its target %s is gone", id, saved->target);
		pthread_mutex_lock(&ms->lock);
		keep_ended(ms, saved, "the process exited while the agent was not running; its data until then is kept",
			   HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_TARGET_EXITED);
		pthread_mutex_unlock(&ms->lock);
		return;
	}
	struct hp_measure *h = NULL;
	unsigned interval_ms = 0;
	Hotpath__V1__MeasurementInfo *now = NULL;
	if (open_measurement(ag, t, saved->request, &h, &interval_ms, err, sizeof(err)) < 0 ||
	    !(now = describe(h, t->model, t->id, saved->request, interval_ms)) || !same_rows(now, saved)) {
		if (!err[0])
			snprintf(err, sizeof(err), "the code changed since it started: its rows differ now");
		hp_log(false, "measurement %s cannot be armed again: %s", id, err);
		char detail[1100];
		snprintf(detail, sizeof(detail), "not armed again after the agent restarted: %s", err);
		hp_measure_close(h);
		hp_targets_release(&ag->targets, t);
		if (now)
			hotpath__v1__measurement_info__free_unpacked(now, NULL);
		pthread_mutex_lock(&ms->lock);
		keep_ended(ms, saved, detail, HOTPATH__V1__MEASUREMENT_STATE__MEASUREMENT_STATE_FAILED);
		pthread_mutex_unlock(&ms->lock);
		return;
	}
	now->started_unix_ns = saved->started_unix_ns; /* the same measurement, continued */
	hotpath__v1__measurement_info__free_unpacked(saved, NULL);
	struct hp_active *a = calloc(1, sizeof(*a));
	if (!a) {
		hp_measure_close(h);
		hp_targets_release(&ag->targets, t);
		hotpath__v1__measurement_info__free_unpacked(now, NULL);
		return;
	}
	snprintf(a->id, sizeof(a->id), "%s", now->measurement_id);
	snprintf(a->target_id, sizeof(a->target_id), "%s", t->id);
	a->target = t;
	a->h = h;
	a->info = now;
	a->interval_ms = interval_ms;
	a->next_due_ms = hp_mono_ms() + interval_ms;
	pthread_mutex_lock(&ms->lock);
	if (publish(ms, a))
		save(ms, a);
	else
		free_active(a);
	pthread_mutex_unlock(&ms->lock);
	hp_log(true, "measurement %s armed again on %s after a restart", now->measurement_id, t->id);
}

int hp_measurements_restore(struct agent *ag)
{
	struct hp_measurements *ms = &ag->measurements;
	if (!ms->dir[0])
		return 0;
	DIR *d = opendir(ms->dir);
	if (!d)
		return 0;
	char(*paths)[4400] = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || l < 4 || strcmp(de->d_name + l - 3, ".pb") != 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			void *p = realloc(paths, cap * sizeof(*paths));
			if (!p)
				break;
			paths = p;
		}
		snprintf(paths[n++], sizeof(*paths), "%s/%s", ms->dir, de->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < n; i++)
		restore_one(ag, paths[i]);
	free(paths);
	int running = 0;
	pthread_mutex_lock(&ms->lock);
	for (size_t i = 0; i < ms->n; i++)
		running += ms->v[i]->h != NULL;
	pthread_mutex_unlock(&ms->lock);
	return running;
}
