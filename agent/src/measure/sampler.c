/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_event_open sampler. Cost is what matters here (the target is well under
 * 1% of one CPU at 997 Hz): the hot path does no allocation and no system
 * call per sample. Each CPU's ring is drained by one thread every 250 ms (or
 * earlier when the ring is half full); each sample costs one binary search in
 * the model's address index, one in the function's blocks and one probe of
 * a preallocated open-addressing table. The counting tables are swapped under
 * a mutex when a consumer takes an interval.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/perf_event.h>

#include "measure/sampler.h"
#include "host/caps.h"
#include "host/hostinfo.h"

#define TABLE_BITS  16
#define TABLE_SIZE  (1u << TABLE_BITS)
/* Keep the table at most 3/4 full so probes stay short. */
#define TABLE_LIMIT (TABLE_SIZE / 4 * 3)
#define DRAIN_MS    250

struct slot {
	uint64_t key; /* 0 = empty */
	uint64_t count;
};

struct table {
	struct slot *slots;
	uint32_t *used; /* indices of occupied slots, for O(n) harvest and clear */
	uint32_t nused;
	uint64_t total, user, unmapped, lost;
};

struct ring {
	int fd;
	int cpu;
	void *base; /* metadata page followed by the data pages */
	size_t data_size;
};

struct hp_sampler {
	const struct hp_model *m;
	struct ring *rings;
	unsigned nrings;
	size_t page_size;
	const char *event;
	pthread_mutex_t lock;
	struct table tab;
	int64_t interval_start_ns;
	pthread_t thread;
	bool thread_started;
	int stop_fd;          /* eventfd that ends the drain thread */
	uint8_t scratch[512]; /* a record that wraps around the ring end */
};

static int64_t now_unix_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline uint64_t key_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return k;
}

static void count_block(struct table *t, uint64_t key)
{
	uint32_t i = (uint32_t)key_hash(key) & (TABLE_SIZE - 1);
	for (;;) {
		struct slot *s = &t->slots[i];
		if (s->key == key) {
			s->count++;
			return;
		}
		if (s->key == 0) {
			if (t->nused >= TABLE_LIMIT) {
				/* More distinct blocks in one interval than the table
				 * holds: keep the sample in the totals only. */
				t->unmapped++;
				return;
			}
			s->key = key;
			s->count = 1;
			t->used[t->nused++] = i;
			return;
		}
		i = (i + 1) & (TABLE_SIZE - 1);
	}
}

static void count_ip(struct hp_sampler *s, uint64_t ip, uint16_t misc)
{
	struct table *t = &s->tab;
	t->total++;
	switch (misc & PERF_RECORD_MISC_CPUMODE_MASK) {
	case PERF_RECORD_MISC_USER:
		t->user++;
		return;
	case PERF_RECORD_MISC_KERNEL:
		break;
	default: /* hypervisor or guest: outside this kernel's model */
		t->unmapped++;
		return;
	}
	const struct hp_module *mod = NULL;
	const struct hp_function *f = hp_model_lookup(s->m, ip, &mod);
	const struct hp_block *b = f ? hp_function_block_at(mod, f, ip) : NULL;
	if (!b) {
		t->unmapped++;
		return;
	}
	uint64_t mi = (uint64_t)(mod - s->m->mods), fi = (uint64_t)(f - mod->funcs);
	if (mi >= 0xffff || fi > 0xffffff || b->offset > 0xffffff) {
		t->unmapped++;
		return;
	}
	count_block(t, ((mi + 1) << 48) | (fi << 24) | b->offset);
}

/* Consume every complete record in one CPU's ring. Called with s->lock held. */
static void drain_ring(struct hp_sampler *s, struct ring *r)
{
	struct perf_event_mmap_page *meta = r->base;
	uint8_t *data = (uint8_t *)r->base + s->page_size;
	uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = meta->data_tail;
	while (tail < head) {
		size_t off = (size_t)(tail & (r->data_size - 1));
		struct perf_event_header hdr;
		if (off + sizeof(hdr) <= r->data_size) {
			memcpy(&hdr, data + off, sizeof(hdr));
		} else {
			size_t first = r->data_size - off;
			memcpy(&hdr, data + off, first);
			memcpy((uint8_t *)&hdr + first, data, sizeof(hdr) - first);
		}
		if (hdr.size < sizeof(hdr) || tail + hdr.size > head)
			break;
		const uint8_t *rec = data + off;
		if (off + hdr.size > r->data_size) {
			if (hdr.size > sizeof(s->scratch)) {
				tail += hdr.size;
				continue;
			}
			size_t first = r->data_size - off;
			memcpy(s->scratch, data + off, first);
			memcpy(s->scratch + first, data, hdr.size - first);
			rec = s->scratch;
		}
		if (hdr.type == PERF_RECORD_SAMPLE && hdr.size >= sizeof(hdr) + 16) {
			uint64_t ip;
			memcpy(&ip, rec + sizeof(hdr), 8);
			count_ip(s, ip, hdr.misc);
		} else if (hdr.type == PERF_RECORD_LOST && hdr.size >= sizeof(hdr) + 16) {
			uint64_t lost;
			memcpy(&lost, rec + sizeof(hdr) + 8, 8);
			s->tab.lost += lost;
		}
		tail += hdr.size;
	}
	__atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

static void drain_all(struct hp_sampler *s)
{
	for (unsigned i = 0; i < s->nrings; i++)
		drain_ring(s, &s->rings[i]);
}

static void *drain_thread(void *arg)
{
	struct hp_sampler *s = arg;
	struct pollfd *pfds = calloc(s->nrings + 1, sizeof(*pfds));
	if (!pfds)
		return NULL;
	for (unsigned i = 0; i < s->nrings; i++) {
		pfds[i].fd = s->rings[i].fd;
		pfds[i].events = POLLIN;
	}
	pfds[s->nrings].fd = s->stop_fd;
	pfds[s->nrings].events = POLLIN;
	for (;;) {
		int r = poll(pfds, s->nrings + 1, DRAIN_MS);
		if (r < 0 && errno != EINTR)
			break;
		if (pfds[s->nrings].revents & POLLIN)
			break;
		/* A CPU that went offline hangs up its event: stop polling it, or
		 * poll would return at once forever. */
		for (unsigned i = 0; i < s->nrings; i++)
			if (pfds[i].revents & (POLLHUP | POLLERR | POLLNVAL))
				pfds[i].fd = -1;
		pthread_mutex_lock(&s->lock);
		drain_all(s);
		pthread_mutex_unlock(&s->lock);
	}
	free(pfds);
	return NULL;
}

const char *hp_sampler_event(const struct hp_sampler *s)
{
	return s->event;
}

unsigned hp_sampler_ncpus(const struct hp_sampler *s)
{
	return s->nrings;
}

static int table_init(struct table *t)
{
	memset(t, 0, sizeof(*t));
	t->slots = calloc(TABLE_SIZE, sizeof(*t->slots));
	t->used = calloc(TABLE_LIMIT, sizeof(*t->used));
	return t->slots && t->used ? 0 : -ENOMEM;
}

struct hp_sampler *hp_sampler_open(const struct hp_model *m, const struct hp_sampler_opts *o, char *err, size_t errlen)
{
	struct hp_sampler_opts def = { 0 };
	if (!o)
		o = &def;
	unsigned freq = o->frequency ? o->frequency : 997;
	unsigned pages = o->ring_pages ? o->ring_pages : 16;
	if (pages & (pages - 1)) {
		snprintf(err, errlen, "ring size must be a power of two pages, not %u", pages);
		return NULL;
	}
	struct hp_sampler *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->m = m;
	s->stop_fd = -1;
	s->page_size = (size_t)sysconf(_SC_PAGESIZE);
	pthread_mutex_init(&s->lock, NULL);
	if (table_init(&s->tab) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	int cpus[1024];
	int ncpu = hp_online_cpus(cpus, 1024);
	if (ncpu <= 0) {
		snprintf(err, errlen, "cannot read the online CPU list: %s", strerror(ncpu < 0 ? -ncpu : ENOENT));
		goto fail;
	}
	s->rings = calloc((size_t)ncpu, sizeof(*s->rings));
	if (!s->rings) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	bool cycles = !o->force_cpu_clock && hp_probe_hw_cycles(NULL);
	s->event = cycles ? "cycles" : "cpu-clock";
	struct perf_event_attr a = { 0 };
	a.size = sizeof(a);
	a.type = cycles ? PERF_TYPE_HARDWARE : PERF_TYPE_SOFTWARE;
	a.config = cycles ? PERF_COUNT_HW_CPU_CYCLES : PERF_COUNT_SW_CPU_CLOCK;
	a.freq = 1;
	a.sample_freq = freq;
	a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID;
	a.disabled = 1;
	a.watermark = 1;
	a.wakeup_watermark = (uint32_t)(pages * s->page_size / 2);
	for (int i = 0; i < ncpu; i++) {
		struct ring *r = &s->rings[s->nrings];
		r->cpu = cpus[i];
		r->fd = (int)syscall(SYS_perf_event_open, &a, -1, cpus[i], -1, PERF_FLAG_FD_CLOEXEC);
		if (r->fd < 0) {
			int e = errno;
			if (e == EACCES || e == EPERM)
				snprintf(
					err, errlen,
					"perf_event_open(%s) on CPU %d: %s: whole-system sampling needs CAP_PERFMON (or CAP_SYS_ADMIN) or kernel.perf_event_paranoid <= -1",
					s->event, cpus[i], strerror(e));
			else
				snprintf(err, errlen, "perf_event_open(%s) on CPU %d: %s", s->event, cpus[i],
					 strerror(e));
			goto fail;
		}
		r->data_size = pages * s->page_size;
		r->base = mmap(NULL, s->page_size + r->data_size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
		if (r->base == MAP_FAILED) {
			int e = errno;
			close(r->fd);
			snprintf(err, errlen, "mmap of the perf ring on CPU %d: %s", cpus[i], strerror(e));
			goto fail;
		}
		s->nrings++;
		if (o->use_filter && ioctl(r->fd, PERF_EVENT_IOC_SET_BPF, o->filter_prog_fd) < 0) {
			snprintf(err, errlen, "attaching the sample filter program on CPU %d: %s", cpus[i],
				 strerror(errno));
			goto fail;
		}
	}
	s->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (s->stop_fd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto fail;
	}
	s->interval_start_ns = now_unix_ns();
	for (unsigned i = 0; i < s->nrings; i++)
		ioctl(s->rings[i].fd, PERF_EVENT_IOC_ENABLE, 0);
	int e = pthread_create(&s->thread, NULL, drain_thread, s);
	if (e) {
		snprintf(err, errlen, "cannot start the sampling thread: %s", strerror(e));
		goto fail;
	}
	s->thread_started = true;
	return s;
fail:
	hp_sampler_close(s);
	return NULL;
}

int hp_sampler_take(struct hp_sampler *s, struct hp_sample_interval *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	drain_all(s);
	struct table *t = &s->tab;
	int64_t now = now_unix_ns();
	out->start_unix_ns = s->interval_start_ns;
	out->end_unix_ns = now;
	s->interval_start_ns = now;
	out->total = t->total;
	out->user = t->user;
	out->unmapped = t->unmapped;
	out->lost = t->lost;
	out->blocks = malloc(sizeof(*out->blocks) * (t->nused ? t->nused : 1));
	if (out->blocks) {
		for (uint32_t i = 0; i < t->nused; i++) {
			struct slot *sl = &t->slots[t->used[i]];
			struct hp_block_count *bc = &out->blocks[i];
			bc->mod = (uint32_t)((sl->key >> 48) - 1);
			bc->fn = (uint32_t)((sl->key >> 24) & 0xffffff);
			bc->offset = (uint32_t)(sl->key & 0xffffff);
			bc->count = sl->count;
		}
		out->nblocks = t->nused;
	}
	for (uint32_t i = 0; i < t->nused; i++)
		t->slots[t->used[i]] = (struct slot){ 0 };
	t->nused = 0;
	t->total = t->user = t->unmapped = t->lost = 0;
	pthread_mutex_unlock(&s->lock);
	return out->blocks ? 0 : -ENOMEM;
}

void hp_sample_interval_free(struct hp_sample_interval *iv)
{
	free(iv->blocks);
	iv->blocks = NULL;
	iv->nblocks = 0;
}

void hp_sampler_close(struct hp_sampler *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		uint64_t one = 1;
		if (write(s->stop_fd, &one, sizeof(one)) < 0)
			pthread_cancel(s->thread);
		pthread_join(s->thread, NULL);
	}
	for (unsigned i = 0; i < s->nrings; i++) {
		ioctl(s->rings[i].fd, PERF_EVENT_IOC_DISABLE, 0);
		munmap(s->rings[i].base, s->page_size + s->rings[i].data_size);
		close(s->rings[i].fd);
	}
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	free(s->rings);
	free(s->tab.slots);
	free(s->tab.used);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
