/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Aggregating call stacks per interval (see stack_table.h). Runs on the
 * sampler's drain thread for every sample, so it allocates only when a table
 * grows: a sample costs one FNV hash over its frames, one probe of the stack
 * index (frames compared on a hit) and one probe of the count table. Paths of
 * user files are interned per interval by pointer (the sampler's task cache
 * keeps them stable until the interval is taken) and copied when it is.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "measure/stack_table.h"

#define STACK_INDEX_SIZE (HP_STACKS_PER_INTERVAL * 2)
#define COUNT_INDEX_SIZE 65536
#define NAME_INDEX_SIZE  4096
#define NAMES_MAX        (NAME_INDEX_SIZE / 2)

struct count_slot {
	uint64_t k1, k2; /* k1 = stack+1 << 32 | cpu << 16 | comm; 0 = empty */
	uint64_t count;
};

struct hp_stack_table {
	unsigned depth_limit;
	struct hp_frame *frames;
	size_t nframes, cap_frames;
	struct hp_stack *stacks;
	uint64_t *stack_hash;
	size_t nstacks;
	uint32_t *stack_index; /* stack + 1, 0 = empty */
	struct count_slot *counts;
	uint32_t *count_used;
	size_t ncounts;
	const char *path_keys[NAME_INDEX_SIZE]; /* interned by pointer */
	uint32_t path_slot[NAME_INDEX_SIZE];    /* index + 1 */
	const char *paths[NAMES_MAX];
	size_t npaths;
	char comms[NAMES_MAX][16];
	uint32_t comm_slot[NAME_INDEX_SIZE]; /* index + 1 */
	size_t ncomms;
	uint64_t samples, dropped, at_limit;
};

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v;
	h *= 0x100000001b3ULL;
	h ^= h >> 29;
	return h;
}

static uint64_t hash_ptr(const void *p)
{
	uint64_t k = (uint64_t)(uintptr_t)p;
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return k;
}

struct hp_stack_table *hp_stack_table_new(unsigned depth_limit)
{
	struct hp_stack_table *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->depth_limit = depth_limit;
	t->stacks = calloc(HP_STACKS_PER_INTERVAL, sizeof(*t->stacks));
	t->stack_hash = calloc(HP_STACKS_PER_INTERVAL, sizeof(*t->stack_hash));
	t->stack_index = calloc(STACK_INDEX_SIZE, sizeof(*t->stack_index));
	t->counts = calloc(COUNT_INDEX_SIZE, sizeof(*t->counts));
	t->count_used = calloc(HP_STACK_COUNTS_PER_INTERVAL, sizeof(*t->count_used));
	if (!t->stacks || !t->stack_hash || !t->stack_index || !t->counts || !t->count_used) {
		hp_stack_table_free(t);
		return NULL;
	}
	return t;
}

void hp_stack_table_free(struct hp_stack_table *t)
{
	if (!t)
		return;
	free(t->frames);
	free(t->stacks);
	free(t->stack_hash);
	free(t->stack_index);
	free(t->counts);
	free(t->count_used);
	free(t);
}

/* Index of path in this interval's paths; -1 when the table is full. */
static int intern_path(struct hp_stack_table *t, const char *path)
{
	uint32_t i = (uint32_t)hash_ptr(path) & (NAME_INDEX_SIZE - 1);
	for (;;) {
		if (t->path_slot[i] == 0) {
			if (t->npaths >= NAMES_MAX)
				return -1;
			t->path_keys[i] = path;
			t->paths[t->npaths] = path;
			t->path_slot[i] = (uint32_t)++t->npaths;
			return (int)t->npaths - 1;
		}
		if (t->path_keys[i] == path)
			return (int)t->path_slot[i] - 1;
		i = (i + 1) & (NAME_INDEX_SIZE - 1);
	}
}

/* Index of comm in this interval's names (printable ASCII, at most 15 characters); -1 when full. */
static int intern_comm(struct hp_stack_table *t, const char *comm)
{
	char name[16] = { 0 };
	uint64_t h = 0xcbf29ce484222325ULL;
	/* The loop stops at comm's NUL, so "" (a 1-byte array) is read at index 0 only. */
	// cppcheck-suppress arrayIndexOutOfBoundsCond
	for (int k = 0; k < 15 && comm[k]; k++) {
		unsigned char c = (unsigned char)comm[k];
		name[k] = c >= 0x20 && c < 0x7f ? (char)c : '?';
		h = mix(h, (unsigned char)name[k]);
	}
	uint32_t i = (uint32_t)h & (NAME_INDEX_SIZE - 1);
	for (;;) {
		uint32_t slot = t->comm_slot[i];
		if (slot == 0) {
			if (t->ncomms >= NAMES_MAX)
				return -1;
			memcpy(t->comms[t->ncomms], name, 16);
			t->comm_slot[i] = (uint32_t)++t->ncomms;
			return (int)t->ncomms - 1;
		}
		if (memcmp(t->comms[slot - 1], name, 16) == 0)
			return (int)slot - 1;
		i = (i + 1) & (NAME_INDEX_SIZE - 1);
	}
}

static int reserve_frames(struct hp_stack_table *t, size_t n)
{
	return HP_GROW(t->frames, t->cap_frames, t->nframes + n) ? -ENOMEM : 0;
}

static bool same_frames(const struct hp_frame *a, const struct hp_frame *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i].kind != b[i].kind || a[i].mod != b[i].mod || a[i].fn != b[i].fn || a[i].offset != b[i].offset)
			return false;
	return true;
}

/* Index of the stack with these frames, added if new; -1 when it does not fit. */
static int find_stack(struct hp_stack_table *t, const struct hp_frame *fr, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ n;
	for (size_t i = 0; i < n; i++) {
		h = mix(h, fr[i].kind);
		h = mix(h, ((uint64_t)fr[i].mod << 32) | fr[i].fn);
		h = mix(h, fr[i].offset);
	}
	uint32_t i = (uint32_t)h & (STACK_INDEX_SIZE - 1);
	for (;;) {
		uint32_t slot = t->stack_index[i];
		if (slot == 0)
			break;
		const struct hp_stack *s = &t->stacks[slot - 1];
		if (t->stack_hash[slot - 1] == h && s->nframes == n && same_frames(&t->frames[s->first], fr, n))
			return (int)slot - 1;
		i = (i + 1) & (STACK_INDEX_SIZE - 1);
	}
	if (t->nstacks >= HP_STACKS_PER_INTERVAL)
		return -1;
	/* The frames were staged at the end of the pool: keep them there. */
	struct hp_stack *s = &t->stacks[t->nstacks];
	s->first = (uint32_t)(fr - t->frames);
	s->nframes = (uint32_t)n;
	t->nframes += n;
	t->stack_hash[t->nstacks] = h;
	t->stack_index[i] = (uint32_t)++t->nstacks;
	return (int)t->nstacks - 1;
}

void hp_stack_table_add(struct hp_stack_table *t, const struct hp_frame_in *in, size_t n, uint32_t pid, uint32_t cpu,
			const char *comm)
{
	if (n == 0)
		return;
	if (reserve_frames(t, n) < 0) {
		t->dropped++;
		return;
	}
	/* Stage the frames at the end of the pool in their interval form. */
	struct hp_frame *fr = &t->frames[t->nframes];
	for (size_t i = 0; i < n; i++) {
		fr[i] = (struct hp_frame){
			.kind = in[i].kind, .mod = in[i].mod, .fn = in[i].fn, .offset = in[i].offset
		};
		if (in[i].kind == HP_FRAME_USER) {
			int p = intern_path(t, in[i].path);
			if (p < 0) {
				fr[i].kind = HP_FRAME_USER_ADDR; /* too many files this interval: keep the address */
				fr[i].mod = 0;
			} else {
				fr[i].mod = (uint32_t)p;
			}
		}
	}
	int st = find_stack(t, fr, n);
	int cm = intern_comm(t, comm ? comm : "");
	if (st < 0 || cm < 0 || cpu > 0xffff) {
		t->dropped++;
		return;
	}
	uint64_t k1 = ((uint64_t)(st + 1) << 32) | ((uint64_t)cpu << 16) | (uint64_t)cm, k2 = pid;
	uint32_t i = (uint32_t)(hash_ptr((void *)(uintptr_t)(k1 * 31 + k2))) & (COUNT_INDEX_SIZE - 1);
	for (;;) {
		struct count_slot *c = &t->counts[i];
		if (c->k1 == k1 && c->k2 == k2) {
			c->count++;
			break;
		}
		if (c->k1 == 0) {
			if (t->ncounts >= HP_STACK_COUNTS_PER_INTERVAL) {
				t->dropped++;
				return;
			}
			*c = (struct count_slot){ k1, k2, 1 };
			t->count_used[t->ncounts++] = i;
			break;
		}
		i = (i + 1) & (COUNT_INDEX_SIZE - 1);
	}
	t->samples++;
	if (t->depth_limit && n >= t->depth_limit)
		t->at_limit++;
}

static void clear(struct hp_stack_table *t)
{
	for (size_t i = 0; i < t->ncounts; i++)
		t->counts[t->count_used[i]] = (struct count_slot){ 0 };
	memset(t->stack_index, 0, STACK_INDEX_SIZE * sizeof(*t->stack_index));
	memset(t->path_slot, 0, sizeof(t->path_slot));
	memset(t->comm_slot, 0, sizeof(t->comm_slot));
	t->nframes = t->nstacks = t->ncounts = t->npaths = t->ncomms = 0;
	t->samples = t->at_limit = 0;
}

int hp_stack_table_take(struct hp_stack_table *t, struct hp_stack_set *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t dropped = t->dropped;
	out->frames = malloc((t->nframes ? t->nframes : 1) * sizeof(*out->frames));
	out->stacks = malloc((t->nstacks ? t->nstacks : 1) * sizeof(*out->stacks));
	out->counts = malloc((t->ncounts ? t->ncounts : 1) * sizeof(*out->counts));
	out->paths = calloc(t->npaths ? t->npaths : 1, sizeof(*out->paths));
	out->comms = malloc((t->ncomms ? t->ncomms : 1) * sizeof(*out->comms));
	bool ok = out->frames && out->stacks && out->counts && out->paths && out->comms;
	for (size_t i = 0; ok && i < t->npaths; i++)
		ok = (out->paths[i] = strdup(t->paths[i])) != NULL;
	if (!ok) {
		/* The interval is lost with its take (the caller reports it); nothing carries over, so
		 * the next interval's counts stay within its own samples. */
		out->npaths = t->npaths;
		hp_stack_set_free(out);
		t->dropped = 0;
		clear(t);
		return -ENOMEM;
	}
	memcpy(out->frames, t->frames, t->nframes * sizeof(*out->frames));
	memcpy(out->stacks, t->stacks, t->nstacks * sizeof(*out->stacks));
	memcpy(out->comms, t->comms, t->ncomms * sizeof(*out->comms));
	for (size_t i = 0; i < t->ncounts; i++) {
		const struct count_slot *c = &t->counts[t->count_used[i]];
		out->counts[i] = (struct hp_stack_count){ .stack = (uint32_t)((c->k1 >> 32) - 1),
							  .cpu = (uint32_t)((c->k1 >> 16) & 0xffff),
							  .comm = (uint32_t)(c->k1 & 0xffff),
							  .pid = (uint32_t)c->k2,
							  .count = c->count };
	}
	out->nframes = t->nframes;
	out->nstacks = t->nstacks;
	out->ncounts = t->ncounts;
	out->npaths = t->npaths;
	out->ncomms = t->ncomms;
	out->samples = t->samples;
	out->dropped = dropped;
	out->at_depth_limit = t->at_limit;
	t->dropped = 0;
	clear(t);
	return 0;
}

void hp_stack_set_free(struct hp_stack_set *s)
{
	if (s->paths)
		for (size_t i = 0; i < s->npaths; i++)
			free(s->paths[i]);
	free(s->paths);
	free(s->frames);
	free(s->stacks);
	free(s->counts);
	free(s->comms);
	memset(s, 0, sizeof(*s));
}
