/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_event_open sampler. Cost is what matters here (the target is well under
 * 1% of one CPU at 997 Hz): the hot path does no allocation and no system
 * call per sample. Each CPU's ring is drained by one thread every 250 ms (or
 * earlier when the ring is half full); each sample costs one binary search in
 * the model's address index, one in the function's blocks and one probe of
 * a preallocated open-addressing table keyed by (block, instruction, idle).
 * With call chains, each frame costs one more lookup (kernel frames in the
 * model, user frames in the process's cached mappings) and the chain one probe
 * of the interval's stack table. The counting tables are swapped under a mutex
 * when a consumer takes an interval.
 *
 * Idle is the sample's context, not its code: the kernel runs its idle loop in
 * the idle task (pid 0, "swapper"), so a sample with pid 0 is idle whatever
 * function it hit (an interrupt handled while idle included).
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

#include "measure/moved.h"
#include "measure/sampler.h"
#include "measure/task_info.h"
#include "host/caps.h"
#include "host/hostinfo.h"
#include "host/processes.h"

#define TABLE_BITS    16
#define TABLE_SIZE    (1u << TABLE_BITS)
/* Keep the table at most 3/4 full so probes stay short. */
#define TABLE_LIMIT   (TABLE_SIZE / 4 * 3)
#define DRAIN_MS      250
/* Frames kept per chain by default, and the most perf_event_open allows by default (perf_event_max_stack). */
#define DEFAULT_DEPTH 64
#define MAX_DEPTH     127
/* A record that wraps around the ring end is copied here; perf records are at most 64 KiB. */
#define SCRATCH_BYTES 65536

struct slot {
	uint64_t key;  /* (module + 1) << 48 | function << 24 | block offset; 0 = empty */
	uint64_t key2; /* idle << 32 | instruction offset within the block */
	uint64_t count;
};

struct table {
	struct slot *slots;
	uint32_t *used; /* indices of occupied slots, for O(n) harvest and clear */
	uint32_t nused;
	uint64_t total, user, unmapped, lost, idle, in_ranges;
};

struct ring {
	int fd;
	int cpu;
	void *base; /* metadata page followed by the data pages */
	size_t data_size;
};

struct hp_sampler {
	const struct hp_model *m;
	int pid; /* 0: whole system; else one process's threads, user samples */
	const struct hp_pc_range *ranges;
	size_t nranges;
	struct ring *rings;
	unsigned nrings;
	size_t page_size;
	const char *event;
	pthread_mutex_t lock;
	struct table tab;
	int64_t interval_start_ns;
	pthread_t thread;
	bool thread_started;
	int stop_fd;      /* eventfd that ends the drain thread */
	uint8_t *scratch; /* a record that wraps around the ring end */
	unsigned depth;   /* frames kept per chain; 0 = no call chains */
	struct hp_stack_table *stacks;
	struct hp_task_info *tasks;
	struct hp_frame_in *chain;     /* depth frames, for the sample being counted */
	struct hp_moved_block *copies; /* kernel copies installed (sorted by copy), under lock */
	size_t ncopies;
};

/* A kernel address in an installed copy as the original address it runs as. */
static uint64_t kernel_original(const struct hp_sampler *s, uint64_t ip)
{
	uint64_t o = s->ncopies ? hp_moved_original(s->copies, s->ncopies, ip) : 0;
	return o ? o : ip;
}

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

static void count_block(struct table *t, uint64_t key, uint64_t key2)
{
	uint32_t i = (uint32_t)key_hash(key ^ (key2 * 0x9e3779b97f4a7c15ULL)) & (TABLE_SIZE - 1);
	for (;;) {
		struct slot *s = &t->slots[i];
		if (s->key == key && s->key2 == key2) {
			s->count++;
			return;
		}
		if (s->key == 0) {
			if (t->nused >= TABLE_LIMIT) {
				/* More distinct instructions in one interval than the
				 * table holds: keep the sample in the totals only. */
				t->unmapped++;
				return;
			}
			s->key = key;
			s->key2 = key2;
			s->count = 1;
			t->used[t->nused++] = i;
			return;
		}
		i = (i + 1) & (TABLE_SIZE - 1);
	}
}

static void count_ip(struct hp_sampler *s, uint64_t ip, uint16_t misc, bool idle)
{
	struct table *t = &s->tab;
	t->total++;
	if (idle)
		t->idle++;
	switch (misc & PERF_RECORD_MISC_CPUMODE_MASK) {
	case PERF_RECORD_MISC_USER:
		t->user++;
		if (!s->pid)
			return;
		for (size_t i = 0; i < s->nranges; i++)
			if (ip >= s->ranges[i].lo && ip < s->ranges[i].hi) {
				t->in_ranges++;
				break;
			}
		if (!s->m) {
			t->unmapped++;
			return;
		}
		break; /* a process's sample: its model has its user code */
	case PERF_RECORD_MISC_KERNEL:
		ip = kernel_original(s, ip);
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
	uint64_t in_block = ip - f->addr - b->offset;
	count_block(t, ((mi + 1) << 48) | (fi << 24) | b->offset, ((uint64_t)idle << 32) | in_block);
}

/* Map one chain entry onto the model or the process's mappings. A return
 * address (every entry but the leaf) is looked up one byte earlier: a call
 * that ends its function returns to the next function's first byte. */
static void map_frame(struct hp_sampler *s, uint64_t ip, bool user, bool leaf, uint32_t pid, struct hp_frame_in *out)
{
	uint64_t at = leaf || ip == 0 ? ip : ip - 1;
	memset(out, 0, sizeof(*out));
	if (user) {
		const char *path;
		uint64_t off;
		if (pid && hp_task_map_addr(s->tasks, pid, at, &path, &off) == 1) {
			out->kind = HP_FRAME_USER;
			out->path = path;
			out->offset = off + (ip - at);
		} else {
			out->kind = HP_FRAME_USER_ADDR;
			out->offset = ip;
		}
		return;
	}
	uint64_t orig = kernel_original(s, at);
	ip += orig - at;
	at = orig;
	const struct hp_module *mod = NULL;
	const struct hp_function *f = hp_model_lookup(s->m, at, &mod);
	if (!f) {
		out->kind = HP_FRAME_KERNEL_ADDR;
		out->offset = ip;
		return;
	}
	out->kind = HP_FRAME_KERNEL;
	out->mod = (uint32_t)(mod - s->m->mods);
	out->fn = (uint32_t)(f - mod->funcs);
	out->offset = ip - f->addr;
}

/* Count a sample's call chain (perf's order: context markers, then the leaf
 * first) into the interval's stack table. */
static void count_chain(struct hp_sampler *s, const uint64_t *ips, uint64_t nr, uint32_t pid, uint32_t tid,
			uint32_t cpu)
{
	size_t n = 0, user_frames = 0;
	bool user = false, known = false;
	for (uint64_t i = 0; i < nr && n < s->depth; i++) {
		uint64_t ip;
		memcpy(&ip, &ips[i], sizeof(ip));
		if (ip >= (uint64_t)PERF_CONTEXT_MAX) {
			user = ip == (uint64_t)PERF_CONTEXT_USER;
			known = ip == (uint64_t)PERF_CONTEXT_USER || ip == (uint64_t)PERF_CONTEXT_KERNEL;
			continue;
		}
		if (!known)
			continue; /* hypervisor or guest context: outside this host's code */
		map_frame(s, ip, user, n == 0, pid, &s->chain[n]);
		/* A frame-pointer walk that returns into memory no file maps has lost the chain
		 * (code built without frame pointers leaves data where the walk looks for return
		 * addresses): keep what came before it. The leaf is the sampled PC itself and
		 * stays, JIT code included. */
		if (user && s->chain[n].kind == HP_FRAME_USER_ADDR && user_frames > 0)
			break;
		user_frames += user;
		n++;
	}
	if (n)
		hp_stack_table_add(s->stacks, s->chain, n, pid, cpu, hp_task_comm(s->tasks, pid, tid));
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
			size_t first = r->data_size - off;
			memcpy(s->scratch, data + off, first);
			memcpy(s->scratch + first, data, hdr.size - first);
			rec = s->scratch;
		}
		if (hdr.type == PERF_RECORD_SAMPLE && hdr.size >= sizeof(hdr) + 24) {
			/* ip, pid, tid, cpu, reserved[, nr, ips[nr]] */
			const uint8_t *p = rec + sizeof(hdr);
			uint64_t ip, nr = 0;
			uint32_t pid, tid, cpu;
			memcpy(&ip, p, 8);
			memcpy(&pid, p + 8, 4);
			memcpy(&tid, p + 12, 4);
			memcpy(&cpu, p + 16, 4);
			count_ip(s, ip, hdr.misc, pid == 0);
			if (s->depth && hdr.size >= sizeof(hdr) + 32) {
				memcpy(&nr, p + 24, 8);
				if (nr <= (hdr.size - sizeof(hdr) - 32) / 8)
					count_chain(s, (const uint64_t *)(p + 32), nr, pid, tid, cpu);
			}
		} else if (hdr.type == PERF_RECORD_COMM && s->depth && hdr.size >= sizeof(hdr) + 9) {
			/* pid, tid, comm (NUL-terminated, padded) */
			uint32_t pid, tid;
			char comm[16] = { 0 };
			size_t room = hdr.size - sizeof(hdr) - 8;
			memcpy(&pid, rec + sizeof(hdr), 4);
			memcpy(&tid, rec + sizeof(hdr) + 4, 4);
			memcpy(comm, rec + sizeof(hdr) + 8, room < 15 ? room : 15);
			hp_task_set_comm(s->tasks, pid, tid, comm);
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

int hp_sampler_set_kernel_copies(struct hp_sampler *s, const struct hp_moved_block *b, size_t n)
{
	struct hp_moved_block *mine = NULL;
	if (n && !(mine = malloc(n * sizeof(*mine))))
		return -ENOMEM;
	if (n)
		memcpy(mine, b, n * sizeof(*mine));
	pthread_mutex_lock(&s->lock);
	struct hp_moved_block *old = s->copies;
	s->copies = mine;
	s->ncopies = n;
	pthread_mutex_unlock(&s->lock);
	free(old);
	return 0;
}

unsigned hp_sampler_ncpus(const struct hp_sampler *s)
{
	return s->nrings;
}

unsigned hp_sampler_stack_depth(const struct hp_sampler *s)
{
	return s->depth;
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
	/* A chain of 64 frames makes a sample ~40 times larger: give each ring room for a drain period. */
	unsigned pages = o->ring_pages ? o->ring_pages : o->stacks ? 64 : 16;
	if (pages & (pages - 1)) {
		snprintf(err, errlen, "ring size must be a power of two pages, not %u", pages);
		return NULL;
	}
	unsigned depth = o->stacks ? (o->stack_depth ? o->stack_depth : DEFAULT_DEPTH) : 0;
	if (depth > MAX_DEPTH) {
		snprintf(err, errlen, "stack depth must be at most %d frames, not %u", MAX_DEPTH, depth);
		return NULL;
	}
	if (!m && (!o->pid || depth)) {
		snprintf(err, errlen, "a sampler without a model samples one process's totals and ranges only");
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
	s->depth = depth;
	s->scratch = malloc(SCRATCH_BYTES);
	if (table_init(&s->tab) < 0 || !s->scratch) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (depth) {
		s->stacks = hp_stack_table_new(depth);
		s->tasks = hp_task_info_new();
		s->chain = calloc(depth, sizeof(*s->chain));
		if (!s->stacks || !s->tasks || !s->chain) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
	}
	int cpus[1024];
	int ncpu = o->pid ? hp_process_threads(o->pid, cpus, 1024) : hp_online_cpus(cpus, 1024);
	if (ncpu <= 0) {
		if (o->pid)
			snprintf(err, errlen, "cannot list the threads of process %d: %s", o->pid,
				 strerror(ncpu < 0 ? -ncpu : ENOENT));
		else
			snprintf(err, errlen, "cannot read the online CPU list: %s",
				 strerror(ncpu < 0 ? -ncpu : ENOENT));
		goto fail;
	}
	s->pid = o->pid;
	s->ranges = o->ranges;
	s->nranges = o->nranges;
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
	a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_CPU;
	if (depth) {
		/* Kernel chains always; user chains by frame pointers, where the code keeps them. */
		a.sample_type |= PERF_SAMPLE_CALLCHAIN;
		a.sample_max_stack = (uint16_t)depth;
		a.comm = 1; /* COMM records keep thread names current */
	}
	a.disabled = 1;
	a.exclude_kernel = o->pid ? 1 : 0; /* a process's own code only */
	a.watermark = 1;
	a.wakeup_watermark = (uint32_t)(pages * s->page_size / 2);
	for (int i = 0; i < ncpu; i++) {
		struct ring *r = &s->rings[s->nrings];
		r->cpu = cpus[i];
		/* A process: cpus[] holds its thread ids, each followed on any CPU. */
		r->fd = (int)syscall(SYS_perf_event_open, &a, o->pid ? cpus[i] : -1, o->pid ? -1 : cpus[i], -1,
				     PERF_FLAG_FD_CLOEXEC);
		if (r->fd < 0 && o->pid && errno == ESRCH)
			continue; /* the thread ended since the listing */
		if (r->fd < 0) {
			int e = errno;
			if (e == EACCES || e == EPERM)
				snprintf(
					err, errlen,
					"perf_event_open(%s) on CPU %d: %s: whole-system sampling needs CAP_PERFMON (or CAP_SYS_ADMIN) or kernel.perf_event_paranoid <= -1",
					s->event, cpus[i], strerror(e));
			else if (e == EOVERFLOW && depth)
				snprintf(err, errlen,
					 "perf_event_open(%s) on CPU %d: a stack depth of %u frames exceeds the "
					 "kernel's limit (sysctl kernel.perf_event_max_stack)",
					 s->event, cpus[i], depth);
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
	if (!s->nrings) {
		snprintf(err, errlen, "process %d has no threads left to sample", o->pid);
		goto fail;
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

static int cmp_slot(const void *a, const void *b)
{
	const struct slot *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->key2 < y->key2 ? -1 : x->key2 > y->key2;
}

/* Group the table's (block, instruction, idle) slots into blocks with their instructions. */
static int harvest_blocks(struct table *t, struct hp_sample_interval *out)
{
	struct slot *sorted = malloc(sizeof(*sorted) * (t->nused ? t->nused : 1));
	out->blocks = malloc(sizeof(*out->blocks) * (t->nused ? t->nused : 1));
	out->pcs = malloc(sizeof(*out->pcs) * (t->nused ? t->nused : 1));
	if (!sorted || !out->blocks || !out->pcs) {
		free(sorted);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < t->nused; i++)
		sorted[i] = t->slots[t->used[i]];
	qsort(sorted, t->nused, sizeof(*sorted), cmp_slot);
	struct hp_block_count *bc = NULL;
	for (uint32_t i = 0; i < t->nused; i++) {
		const struct slot *sl = &sorted[i];
		bool idle = (sl->key2 >> 32) != 0;
		if (!bc || sl->key != sorted[i - 1].key || idle != bc->idle) {
			bc = &out->blocks[out->nblocks++];
			bc->mod = (uint32_t)((sl->key >> 48) - 1);
			bc->fn = (uint32_t)((sl->key >> 24) & 0xffffff);
			bc->offset = (uint32_t)(sl->key & 0xffffff);
			bc->count = 0;
			bc->idle = idle;
			bc->pcs = &out->pcs[i];
			bc->npcs = 0;
		}
		out->pcs[i] = (struct hp_pc_count){ (uint32_t)(sl->key2 & 0xffffffff), sl->count };
		bc->npcs++;
		bc->count += sl->count;
	}
	free(sorted);
	return 0;
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
	out->idle = t->idle;
	out->in_ranges = t->in_ranges;
	int r = harvest_blocks(t, out);
	for (uint32_t i = 0; i < t->nused; i++)
		t->slots[t->used[i]] = (struct slot){ 0 };
	t->nused = 0;
	t->total = t->user = t->unmapped = t->lost = t->idle = t->in_ranges = 0;
	if (s->stacks) {
		if (hp_stack_table_take(s->stacks, &out->stacks) < 0)
			r = -ENOMEM;
		hp_task_info_tick(s->tasks);
	}
	pthread_mutex_unlock(&s->lock);
	if (r < 0)
		hp_sample_interval_free(out);
	return r;
}

void hp_sample_interval_free(struct hp_sample_interval *iv)
{
	free(iv->blocks);
	free(iv->pcs);
	iv->blocks = NULL;
	iv->pcs = NULL;
	iv->nblocks = 0;
	hp_stack_set_free(&iv->stacks);
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
	free(s->scratch);
	free(s->chain);
	free(s->copies);
	hp_stack_table_free(s->stacks);
	hp_task_info_free(s->tasks);
	free(s->tab.slots);
	free(s->tab.used);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
