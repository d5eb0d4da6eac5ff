/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Caches of thread names and process mappings for the sampler (see
 * task_info.h). Both are open-addressing tables cleared whole when they fill
 * up (a few thousand live threads or processes are plenty for a second's
 * samples); paths are interned in one pool that is freed only between
 * intervals, so the pointers handed out stay valid while an interval is
 * aggregated. A process's maps are read again when an address falls outside
 * every mapping known for it (a new dlopen), at most once per tick.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "measure/task_info.h"

#define COMM_SLOTS 8192
#define PROC_SLOTS 1024
#define POOL_MAX   (4u << 20)

struct comm_slot {
	uint32_t tid_plus1; /* 0 = empty */
	uint32_t gen;
	char comm[16];
};

struct mapping {
	uint64_t start, end, pgoff;
	const char *path; /* NULL: no file */
};

struct proc_slot {
	uint32_t pid_plus1; /* 0 = empty */
	uint32_t gen;       /* tick the maps were read at */
	struct mapping *maps;
	size_t nmaps;
};

struct pool_chunk {
	struct pool_chunk *next;
	size_t used, cap;
	char data[];
};

struct hp_task_info {
	struct comm_slot comms[COMM_SLOTS];
	size_t ncomms;
	struct proc_slot procs[PROC_SLOTS];
	size_t nprocs;
	uint32_t gen;
	struct pool_chunk *pool;
	size_t pool_bytes;
	const char *path_index[8192]; /* interned paths by hash */
	size_t npaths;
};

static uint32_t hash32(uint32_t k)
{
	k ^= k >> 16;
	k *= 0x7feb352dU;
	k ^= k >> 15;
	k *= 0x846ca68bU;
	k ^= k >> 16;
	return k;
}

struct hp_task_info *hp_task_info_new(void)
{
	return calloc(1, sizeof(struct hp_task_info));
}

static void clear_procs(struct hp_task_info *ti)
{
	for (size_t i = 0; i < PROC_SLOTS; i++)
		free(ti->procs[i].maps);
	memset(ti->procs, 0, sizeof(ti->procs));
	ti->nprocs = 0;
}

static void clear_pool(struct hp_task_info *ti)
{
	while (ti->pool) {
		struct pool_chunk *next = ti->pool->next;
		free(ti->pool);
		ti->pool = next;
	}
	ti->pool_bytes = 0;
	memset(ti->path_index, 0, sizeof(ti->path_index));
	ti->npaths = 0;
}

void hp_task_info_free(struct hp_task_info *ti)
{
	if (!ti)
		return;
	clear_procs(ti);
	clear_pool(ti);
	free(ti);
}

/* Read /proc/PID/task/TID/comm (or the process's comm) into out; 0 or -errno. */
static int read_comm(uint32_t pid, uint32_t tid, char out[16])
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/task/%u/comm", pid, tid);
	FILE *f = fopen(path, "re");
	if (!f) {
		snprintf(path, sizeof(path), "/proc/%u/comm", pid);
		f = fopen(path, "re");
	}
	if (!f)
		return -errno;
	char buf[64] = "";
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	memset(out, 0, 16);
	snprintf(out, 16, "%s", buf);
	return 0;
}

static struct comm_slot *comm_slot(struct hp_task_info *ti, uint32_t tid, int *fresh)
{
	if (ti->ncomms >= COMM_SLOTS / 4 * 3) {
		memset(ti->comms, 0, sizeof(ti->comms));
		ti->ncomms = 0;
	}
	uint32_t i = hash32(tid) & (COMM_SLOTS - 1);
	for (;;) {
		struct comm_slot *s = &ti->comms[i];
		if (s->tid_plus1 == tid + 1) {
			*fresh = 0;
			return s;
		}
		if (s->tid_plus1 == 0) {
			s->tid_plus1 = tid + 1;
			ti->ncomms++;
			*fresh = 1;
			return s;
		}
		i = (i + 1) & (COMM_SLOTS - 1);
	}
}

const char *hp_task_comm(struct hp_task_info *ti, uint32_t pid, uint32_t tid)
{
	if (pid == 0)
		return "swapper";
	int fresh;
	struct comm_slot *s = comm_slot(ti, tid, &fresh);
	if (fresh || s->gen + 2 <= ti->gen) {
		char name[16];
		/* A thread gone since keeps the name it had when it was last seen. */
		if (read_comm(pid, tid, name) == 0)
			memcpy(s->comm, name, 16);
		else if (fresh)
			s->comm[0] = 0;
		s->gen = ti->gen;
	}
	return s->comm;
}

void hp_task_set_comm(struct hp_task_info *ti, uint32_t pid, uint32_t tid, const char *comm)
{
	(void)pid;
	int fresh;
	struct comm_slot *s = comm_slot(ti, tid, &fresh);
	memset(s->comm, 0, sizeof(s->comm));
	snprintf(s->comm, sizeof(s->comm), "%s", comm);
	s->gen = ti->gen;
}

/* Intern a path in the pool; NULL when out of memory. */
static const char *intern(struct hp_task_info *ti, const char *path)
{
	uint32_t h = 2166136261u;
	for (const char *p = path; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	size_t slots = sizeof(ti->path_index) / sizeof(ti->path_index[0]);
	if (ti->npaths >= slots / 2)
		return NULL;
	size_t i = h & (slots - 1);
	while (ti->path_index[i]) {
		if (strcmp(ti->path_index[i], path) == 0)
			return ti->path_index[i];
		i = (i + 1) & (slots - 1);
	}
	size_t len = strlen(path) + 1;
	if (!ti->pool || ti->pool->used + len > ti->pool->cap) {
		size_t cap = len > 65536 ? len : 65536;
		struct pool_chunk *c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->next = ti->pool;
		c->used = 0;
		c->cap = cap;
		ti->pool = c;
		ti->pool_bytes += cap;
	}
	char *s = ti->pool->data + ti->pool->used;
	memcpy(s, path, len);
	ti->pool->used += len;
	ti->path_index[i] = s;
	ti->npaths++;
	return s;
}

static int cmp_mapping(const void *a, const void *b)
{
	const struct mapping *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* Read the executable mappings of pid into slot (none when the process is gone). */
static void read_maps(struct hp_task_info *ti, uint32_t pid, struct proc_slot *slot)
{
	free(slot->maps);
	slot->maps = NULL;
	slot->nmaps = 0;
	slot->gen = ti->gen;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/maps", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	char line[4096 + 256];
	size_t cap = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, pgoff;
		char perms[8];
		int name_at = 0;
		if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &start, &end, perms, &pgoff, &name_at) < 4)
			continue;
		if (perms[2] != 'x')
			continue;
		char *name = line + name_at;
		name[strcspn(name, "\n")] = 0;
		if (HP_GROW(slot->maps, cap, slot->nmaps + 1))
			break;
		const char *p = NULL;
		if (name_at && *name && (*name == '/' || *name == '[')) {
			/* Paths travel as protobuf strings: keep them printable ASCII and within the
			 * length the backend accepts. */
			if (strlen(name) > 4000)
				name[4000] = 0;
			for (char *c = name; *c; c++)
				if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
					*c = '?';
			p = intern(ti, name);
		}
		slot->maps[slot->nmaps++] = (struct mapping){ start, end, pgoff, p };
	}
	fclose(f);
	qsort(slot->maps, slot->nmaps, sizeof(*slot->maps), cmp_mapping);
}

static const struct mapping *find_mapping(const struct proc_slot *slot, uint64_t addr)
{
	size_t lo = 0, hi = slot->nmaps;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (slot->maps[mid].end <= addr)
			lo = mid + 1;
		else if (slot->maps[mid].start > addr)
			hi = mid;
		else
			return &slot->maps[mid];
	}
	return NULL;
}

int hp_task_map_addr(struct hp_task_info *ti, uint32_t pid, uint64_t addr, const char **path, uint64_t *file_offset)
{
	if (ti->nprocs >= PROC_SLOTS / 4 * 3)
		clear_procs(ti);
	uint32_t i = hash32(pid) & (PROC_SLOTS - 1);
	struct proc_slot *slot;
	for (;;) {
		slot = &ti->procs[i];
		if (slot->pid_plus1 == pid + 1)
			break;
		if (slot->pid_plus1 == 0) {
			slot->pid_plus1 = pid + 1;
			ti->nprocs++;
			read_maps(ti, pid, slot);
			break;
		}
		i = (i + 1) & (PROC_SLOTS - 1);
	}
	const struct mapping *m = find_mapping(slot, addr);
	if (!m && slot->gen != ti->gen) {
		read_maps(ti, pid, slot); /* mapped since, or the pid was reused */
		m = find_mapping(slot, addr);
	}
	if (!m || !m->path)
		return 0;
	*path = m->path;
	*file_offset = addr - m->start + m->pgoff;
	return 1;
}

void hp_task_info_tick(struct hp_task_info *ti)
{
	ti->gen++;
	if (ti->pool_bytes > POOL_MAX || ti->npaths >= sizeof(ti->path_index) / sizeof(ti->path_index[0]) / 2) {
		clear_procs(ti); /* their paths live in the pool */
		clear_pool(ti);
	}
	/* Processes come and go: read every process's maps again from time to time. */
	if ((ti->gen & 63) == 0)
		clear_procs(ti);
}
