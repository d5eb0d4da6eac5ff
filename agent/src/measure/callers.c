// SPDX-License-Identifier: Apache-2.0
/*
 * Return addresses at probed instructions (callers.h): uprobe perf events,
 * one per probe and online CPU, every hit a sample with the thread's ids,
 * a CLOCK_MONOTONIC time, the event's id and the 8 bytes at the user stack
 * pointer. Per CPU the first event owns a ring and the others write into
 * it; the rings are drained every few milliseconds and the hits of the
 * target process are counted per (probe, those 8 bytes) in a hash table.
 * Events are enabled one by one (each a uprobe to register), so only hits
 * between the moment the last was enabled and the end of the window count:
 * every probe counts over the same window.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/grow.h"
#include "host/hostinfo.h"
#include "measure/callers.h"

#define RING_PAGES 256 /* data pages per CPU (a power of two) */
#define DRAIN_NS   5000000

struct ring {
	int fd;
	void *base;
	size_t data_size;
};

struct event_id {
	uint64_t id;
	uint32_t probe;
};

struct state {
	struct hp_callers *out;
	int pid;
	size_t page;
	struct event_id *ids; /* every event's id, sorted */
	size_t nids;
	uint64_t from_ns, to_ns; /* the window (CLOCK_MONOTONIC); to_ns 0: not over yet */
	uint32_t *slots;         /* hash of (probe, ret) -> index into out->hits + 1 */
	size_t nslots;
	uint8_t scratch[512];
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

static int grow_slots(struct state *s)
{
	size_t n = s->nslots ? s->nslots * 2 : 4096;
	uint32_t *t = calloc(n, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < s->out->nhits; i++) {
		const struct hp_caller_hit *h = &s->out->hits[i];
		size_t k = mix(h->ret * 31 + h->probe) & (n - 1);
		while (t[k])
			k = (k + 1) & (n - 1);
		t[k] = (uint32_t)i + 1;
	}
	free(s->slots);
	s->slots = t;
	s->nslots = n;
	return 0;
}

static int count_hit(struct state *s, uint32_t probe, uint64_t ret)
{
	struct hp_callers *c = s->out;

	if ((c->nhits + 1) * 2 > s->nslots && grow_slots(s) < 0)
		return -ENOMEM;
	size_t k = mix(ret * 31 + probe) & (s->nslots - 1);
	for (; s->slots[k]; k = (k + 1) & (s->nslots - 1)) {
		struct hp_caller_hit *h = &c->hits[s->slots[k] - 1];
		if (h->probe == probe && h->ret == ret) {
			h->count++;
			return 0;
		}
	}
	if (HP_GROW(c->hits, c->cap, c->nhits + 1))
		return -ENOMEM;
	c->hits[c->nhits] = (struct hp_caller_hit){ probe, ret, 1 };
	s->slots[k] = (uint32_t)++c->nhits;
	return 0;
}

static int by_id(const void *a, const void *b)
{
	const struct event_id *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* The probe an event id belongs to, or -1. */
static int64_t probe_of(const struct state *s, uint64_t id)
{
	size_t lo = 0, hi = s->nids;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->ids[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nids && s->ids[lo].id == id ? (int64_t)s->ids[lo].probe : -1;
}

/* Consume every complete record of one ring. */
static int drain(struct state *s, struct ring *r)
{
	struct perf_event_mmap_page *meta = r->base;
	uint8_t *data = (uint8_t *)r->base + s->page;
	uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = meta->data_tail;
	int rc = 0;

	while (tail < head && !rc) {
		size_t off = (size_t)(tail & (r->data_size - 1));
		struct perf_event_header hdr;
		size_t first = r->data_size - off;
		if (first >= sizeof(hdr)) {
			memcpy(&hdr, data + off, sizeof(hdr));
		} else {
			memcpy(&hdr, data + off, first);
			memcpy((uint8_t *)&hdr + first, data, sizeof(hdr) - first);
		}
		if (hdr.size < sizeof(hdr) || tail + hdr.size > head || hdr.size > sizeof(s->scratch))
			break;
		if (first >= hdr.size) {
			memcpy(s->scratch, data + off, hdr.size);
		} else {
			memcpy(s->scratch, data + off, first);
			memcpy(s->scratch + first, data, hdr.size - first);
		}
		const uint8_t *p = s->scratch + sizeof(hdr);
		/* pid, tid; time; id; stack size; its bytes; the size really copied */
		if (hdr.type == PERF_RECORD_SAMPLE && hdr.size >= sizeof(hdr) + 32) {
			uint32_t pid;
			uint64_t t, id, size, ret = 0, dyn = 0;
			memcpy(&pid, p, 4);
			memcpy(&t, p + 8, 8);
			memcpy(&id, p + 16, 8);
			memcpy(&size, p + 24, 8);
			if (size >= 8 && hdr.size >= sizeof(hdr) + 32 + size + 8) {
				memcpy(&ret, p + 32, 8);
				memcpy(&dyn, p + 32 + size, 8);
			}
			int64_t probe = probe_of(s, id);
			bool inside = t >= s->from_ns && (!s->to_ns || t < s->to_ns);
			if ((int)pid == s->pid && probe >= 0 && inside) {
				s->out->samples++;
				if (dyn < 8)
					s->out->unread++;
				else
					rc = count_hit(s, (uint32_t)probe, ret);
			}
		} else if (hdr.type == PERF_RECORD_LOST && hdr.size >= sizeof(hdr) + 16) {
			uint64_t lost;
			memcpy(&lost, p + 8, 8);
			s->out->lost += lost;
		}
		tail += hdr.size;
	}
	__atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
	return rc;
}

static int uprobe_pmu(char *err, size_t errlen)
{
	FILE *fp = fopen("/sys/bus/event_source/devices/uprobe/type", "r");
	int type = -1;

	if (!fp || fscanf(fp, "%d", &type) != 1 || type < 0) {
		snprintf(err, errlen,
			 "no uprobe PMU (/sys/bus/event_source/devices/uprobe): return addresses need uprobes "
			 "through perf_event_open");
		type = -1;
	}
	if (fp)
		fclose(fp);
	return type;
}

/* Errors that say the kernel cannot probe the instruction there. */
static bool refused_here(int e)
{
	return e == 524 /* ENOTSUPP */ || e == EILSEQ || e == ENOTSUP;
}

int hp_callers_measure(const struct hp_caller_probe *probes, size_t n, int pid, unsigned seconds,
		       struct hp_callers *out, char *err, size_t errlen)
{
	struct state s = { .out = out, .pid = pid, .page = (size_t)sysconf(_SC_PAGESIZE) };
	int cpus[1024], type = uprobe_pmu(err, errlen), ncpu, rc = -ENOMEM;
	struct ring *rings = NULL;
	int *fds = NULL;

	memset(out, 0, sizeof(*out));
	if (type < 0)
		return -ENOENT;
	/* An event per probe and CPU: as many descriptors as the hard limit allows. */
	struct rlimit lim;
	if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
		lim.rlim_cur = lim.rlim_max;
		setrlimit(RLIMIT_NOFILE, &lim);
	}
	if ((ncpu = hp_online_cpus(cpus, 1024)) <= 0) {
		snprintf(err, errlen, "cannot read the online CPU list");
		return ncpu < 0 ? ncpu : -ENOENT;
	}
	rings = calloc((size_t)ncpu, sizeof(*rings));
	fds = malloc((n * (size_t)ncpu + 1) * sizeof(*fds));
	s.ids = calloc(n * (size_t)ncpu + 1, sizeof(*s.ids));
	if (!rings || !fds || !s.ids) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (int c = 0; c < ncpu; c++)
		rings[c].fd = -1;
	for (size_t i = 0; i < n * (size_t)ncpu; i++)
		fds[i] = -1;
	for (size_t k = 0; k < n; k++) {
		for (int c = 0; c < ncpu; c++) {
			struct perf_event_attr a = { 0 };
			int *fd = &fds[k * (size_t)ncpu + (size_t)c];
			a.size = sizeof(a);
			a.type = (uint32_t)type;
			a.config1 = (uint64_t)(uintptr_t)probes[k].path; /* uprobe_path */
			a.config2 = probes[k].file_offset;               /* probe_offset */
			a.sample_period = 1;
			a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_STACK_USER;
			a.use_clockid = 1;
			a.clockid = CLOCK_MONOTONIC;
			a.sample_stack_user = 8;
			a.disabled = 1;
			*fd = (int)syscall(SYS_perf_event_open, &a, -1, cpus[c], -1, PERF_FLAG_FD_CLOEXEC);
			if (*fd < 0 && refused_here(errno) && c == 0) {
				out->refused++;
				break;
			}
			if (*fd < 0) {
				rc = -errno;
				snprintf(err, errlen, "perf_event_open(uprobe %s+0x%llx) on CPU %d: %s", probes[k].path,
					 (unsigned long long)probes[k].file_offset, cpus[c], strerror(errno));
				goto out;
			}
			uint64_t id;
			if (ioctl(*fd, PERF_EVENT_IOC_ID, &id) < 0) {
				rc = -errno;
				snprintf(err, errlen, "PERF_EVENT_IOC_ID: %s", strerror(errno));
				goto out;
			}
			s.ids[s.nids++] = (struct event_id){ id, (uint32_t)k };
			if (rings[c].fd < 0) {
				rings[c].data_size = RING_PAGES * s.page;
				rings[c].base = mmap(NULL, (RING_PAGES + 1) * s.page, PROT_READ | PROT_WRITE,
						     MAP_SHARED, *fd, 0);
				if (rings[c].base == MAP_FAILED) {
					rings[c].base = NULL;
					rc = -errno;
					snprintf(err, errlen, "mmap of a uprobe ring on CPU %d: %s", cpus[c],
						 strerror(errno));
					goto out;
				}
				rings[c].fd = *fd;
			} else if (ioctl(*fd, PERF_EVENT_IOC_SET_OUTPUT, rings[c].fd) < 0) {
				rc = -errno;
				snprintf(err, errlen, "PERF_EVENT_IOC_SET_OUTPUT on CPU %d: %s", cpus[c],
					 strerror(errno));
				goto out;
			}
		}
	}
	qsort(s.ids, s.nids, sizeof(*s.ids), by_id);
	/* Every probe in place: count from now on, for seconds. */
	for (size_t i = 0; i < n * (size_t)ncpu; i++)
		if (fds[i] >= 0)
			ioctl(fds[i], PERF_EVENT_IOC_ENABLE, 0);
	struct timespec t0, now, nap = { 0, DRAIN_NS };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	s.from_ns = (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec;
	rc = 0;
	do {
		nanosleep(&nap, NULL);
		for (int c = 0; c < ncpu && !rc; c++)
			if (rings[c].base)
				rc = drain(&s, &rings[c]);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (!rc && (now.tv_sec - t0.tv_sec) * 1000000000ll + (now.tv_nsec - t0.tv_nsec) <
				(long long)seconds * 1000000000ll);
	s.to_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	for (size_t i = 0; i < n * (size_t)ncpu; i++)
		if (fds[i] >= 0)
			ioctl(fds[i], PERF_EVENT_IOC_DISABLE, 0);
	for (int c = 0; c < ncpu && !rc; c++)
		if (rings[c].base)
			rc = drain(&s, &rings[c]);
	if (rc)
		snprintf(err, errlen, "out of memory");
out:
	for (int c = 0; rings && c < ncpu; c++)
		if (rings[c].base)
			munmap(rings[c].base, (RING_PAGES + 1) * s.page);
	for (size_t i = 0; fds && i < n * (size_t)ncpu; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	free(rings);
	free(s.ids);
	free(s.slots);
	if (rc < 0)
		hp_callers_free(out);
	return rc;
}

void hp_callers_free(struct hp_callers *c)
{
	free(c->hits);
	memset(c, 0, sizeof(*c));
}
