/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The outbox of unacknowledged data messages (see outbox.h). Entries live in
 * one array in production order; acknowledged ones are removed wherever they
 * are, and the array is compacted when half of it is dead. Spilled entries
 * are files "<instance>-<seq>.pb" holding the packed AgentMessage exactly as
 * it is sent, so a resend after a restart is byte-for-byte the original.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/grow.h"
#include "base/hex.h"
#include "daemon/outbox.h"

static const char *intern(struct hp_outbox *ob, const char *id)
{
	for (size_t i = 0; i < ob->ninstances; i++)
		if (strcmp(ob->instances[i], id) == 0)
			return ob->instances[i];
	if (ob->ninstances == sizeof(ob->instances) / sizeof(ob->instances[0]))
		return NULL;
	char *copy = strdup(id);
	if (copy)
		ob->instances[ob->ninstances++] = copy;
	return copy;
}

static void spool_path(const struct hp_outbox *ob, const struct hp_outbox_entry *e, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/%s-%020llu.pb", ob->dir, e->instance, (unsigned long long)e->seq);
}

static int write_file(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, buf + off, len - off);
		if (w < 0) {
			int e = errno;
			close(fd);
			unlink(path);
			return -e;
		}
		off += (size_t)w;
	}
	return close(fd) < 0 ? -errno : 0;
}

static int reserve(struct hp_outbox *ob)
{
	if (ob->head > 0 && ob->head * 2 >= ob->n) {
		memmove(ob->e, ob->e + ob->head, (ob->n - ob->head) * sizeof(*ob->e));
		ob->n -= ob->head;
		ob->head = 0;
	}
	return HP_GROW(ob->e, ob->cap, ob->n + 1) ? -ENOMEM : 0;
}

/* Let go of an entry's payload (memory or file). */
static void release(struct hp_outbox *ob, struct hp_outbox_entry *e)
{
	if (e->buf) {
		ob->mem_bytes -= e->len;
		free(e->buf);
		e->buf = NULL;
	} else if (e->on_disk) {
		char path[4200];
		spool_path(ob, e, path, sizeof(path));
		unlink(path);
		ob->disk_bytes -= e->len;
		e->on_disk = false;
	}
}

/* Replace the oldest data message not on the wire by a gap; false if none. */
static bool drop_oldest(struct hp_outbox *ob)
{
	for (size_t i = ob->head; i < ob->n; i++) {
		struct hp_outbox_entry *e = &ob->e[i];
		if (e->gap_messages || e->sent)
			continue;
		release(ob, e);
		ob->dropped++;
		struct hp_outbox_entry *prev = i > ob->head ? &ob->e[i - 1] : NULL;
		if (prev && prev->gap_messages && !prev->sent && prev->instance == e->instance &&
		    prev->seq + 1 == e->seq) {
			prev->seq = e->seq;
			prev->gap_messages++;
			prev->end_ns = e->end_ns;
			memmove(ob->e + i, ob->e + i + 1, (ob->n - i - 1) * sizeof(*ob->e));
			ob->n--;
		} else {
			e->gap_first = e->seq;
			e->gap_messages = 1;
			e->len = 0;
		}
		return true;
	}
	return false;
}

/* Keep a packed message: memory if it fits, else the spool, else drop old ones. */
static int place(struct hp_outbox *ob, struct hp_outbox_entry *e, uint8_t *buf, size_t len)
{
	for (;;) {
		if (ob->mem_bytes + len <= ob->mem_max) {
			e->buf = buf;
			e->len = len;
			ob->mem_bytes += len;
			return 0;
		}
		if (ob->dir[0] && ob->disk_bytes + len <= ob->disk_max) {
			char path[4200];
			e->len = len;
			spool_path(ob, e, path, sizeof(path));
			if (write_file(path, buf, len) == 0) {
				free(buf);
				e->on_disk = true;
				ob->disk_bytes += len;
				return 0;
			}
		}
		if (!drop_oldest(ob)) {
			/* Nothing older can go: this message itself becomes a gap. */
			free(buf);
			ob->dropped++;
			e->gap_first = e->seq;
			e->gap_messages = 1;
			e->len = 0;
			return 0;
		}
	}
}

static void load_spool(struct hp_outbox *ob)
{
	DIR *d = opendir(ob->dir);
	if (!d)
		return;
	struct loaded {
		time_t mtime;
		uint64_t seq;
		char name[300];
	} *files = NULL;
	size_t nfiles = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l < 4 || strcmp(de->d_name + l - 3, ".pb") != 0 || l >= sizeof(files->name))
			continue;
		char path[4400];
		struct stat sb;
		snprintf(path, sizeof(path), "%s/%s", ob->dir, de->d_name);
		if (stat(path, &sb) < 0)
			continue;
		if (HP_GROW(files, cap, nfiles + 1))
			break;
		const char *dash = strrchr(de->d_name, '-');
		files[nfiles].mtime = sb.st_mtime;
		files[nfiles].seq = dash ? strtoull(dash + 1, NULL, 10) : 0;
		snprintf(files[nfiles].name, sizeof(files[nfiles].name), "%s", de->d_name);
		nfiles++;
	}
	closedir(d);
	/* Oldest first: by time, then by number. */
	for (size_t i = 1; i < nfiles; i++) {
		struct loaded x = files[i];
		size_t j = i;
		while (j > 0 &&
		       (files[j - 1].mtime > x.mtime || (files[j - 1].mtime == x.mtime && files[j - 1].seq > x.seq))) {
			files[j] = files[j - 1];
			j--;
		}
		files[j] = x;
	}
	for (size_t i = 0; i < nfiles; i++) {
		char path[4400];
		snprintf(path, sizeof(path), "%s/%s", ob->dir, files[i].name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		uint8_t *buf = malloc(8 << 20);
		size_t len = buf ? fread(buf, 1, 8 << 20, f) : 0;
		fclose(f);
		Hotpath__V1__AgentMessage *m = buf ? hotpath__v1__agent_message__unpack(NULL, len, buf) : NULL;
		free(buf);
		const char *inst = m && m->instance_id ? intern(ob, m->instance_id) : NULL;
		if (!m || !m->seq || !inst || reserve(ob) < 0 ||
		    (m->kind_case != HOTPATH__V1__AGENT_MESSAGE__KIND_METRICS &&
		     m->kind_case != HOTPATH__V1__AGENT_MESSAGE__KIND_MEASUREMENT &&
		     m->kind_case != HOTPATH__V1__AGENT_MESSAGE__KIND_GAP)) {
			if (m)
				hotpath__v1__agent_message__free_unpacked(m, NULL);
			unlink(path); /* not a message of ours */
			continue;
		}
		struct hp_outbox_entry *e = &ob->e[ob->n++];
		memset(e, 0, sizeof(*e));
		e->ord = ++ob->added;
		e->seq = m->seq;
		e->instance = inst;
		if (m->kind_case != HOTPATH__V1__AGENT_MESSAGE__KIND_GAP) {
			if (m->kind_case == HOTPATH__V1__AGENT_MESSAGE__KIND_METRICS) {
				e->start_ns = m->metrics->interval_start_unix_ns;
				e->end_ns = e->start_ns + (int64_t)m->metrics->interval_ms * 1000000;
			} else {
				e->start_ns = m->measurement->interval_start_unix_ns;
				e->end_ns = m->measurement->interval_end_unix_ns;
			}
			e->on_disk = true;
			e->len = len;
			ob->disk_bytes += len;
		} else {
			e->gap_first = m->gap->first_seq;
			e->gap_messages = m->gap->messages;
			e->start_ns = m->gap->start_unix_ns;
			e->end_ns = m->gap->end_unix_ns;
			unlink(path);
		}
		hotpath__v1__agent_message__free_unpacked(m, NULL);
	}
	free(files);
}

int hp_outbox_init(struct hp_outbox *ob, const char *spool_dir, size_t mem_max, size_t disk_max, char *err,
		   size_t errlen)
{
	memset(ob, 0, sizeof(*ob));
	pthread_mutex_init(&ob->lock, NULL);
	ob->mem_max = mem_max;
	ob->disk_max = disk_max;
	ob->next_seq = 1;
	uint8_t rnd[16];
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		snprintf(err, errlen, "cannot draw a random instance id: %s", strerror(errno));
		return -EIO;
	}
	hp_hex(rnd, sizeof(rnd), ob->instance);
	if (!intern(ob, ob->instance))
		return -ENOMEM;
	if (spool_dir && disk_max) {
		snprintf(ob->dir, sizeof(ob->dir), "%s", spool_dir);
		if (mkdir(ob->dir, 0700) < 0 && errno != EEXIST) {
			snprintf(err, errlen, "cannot create the spool folder %s: %s", ob->dir, strerror(errno));
			return -errno;
		}
		load_spool(ob);
	}
	return 0;
}

static int locked_add(struct hp_outbox *ob, Hotpath__V1__AgentMessage *m, int64_t start_ns, int64_t end_ns)
{
	if (reserve(ob) < 0)
		return -ENOMEM;
	m->seq = ob->next_seq++;
	m->instance_id = ob->instance;
	size_t len = hotpath__v1__agent_message__get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	hotpath__v1__agent_message__pack(m, buf);
	struct hp_outbox_entry e;
	memset(&e, 0, sizeof(e));
	e.seq = m->seq;
	e.ord = ++ob->added;
	e.instance = ob->instances[0];
	e.start_ns = start_ns;
	e.end_ns = end_ns;
	/* The new entry joins the array only once placed: placing may drop older
	 * entries, which moves the array's contents. */
	int r = place(ob, &e, buf, len);
	struct hp_outbox_entry *prev = ob->n > ob->head ? &ob->e[ob->n - 1] : NULL;
	if (e.gap_messages && prev && prev->gap_messages && !prev->sent && prev->instance == e.instance &&
	    prev->seq + 1 == e.seq) {
		prev->seq = e.seq;
		prev->ord = e.ord;
		prev->gap_messages++;
		prev->end_ns = e.end_ns;
		return r;
	}
	if (reserve(ob) < 0)
		return -ENOMEM;
	ob->e[ob->n++] = e;
	return r;
}

static void locked_ack(struct hp_outbox *ob, const char *instance, uint64_t seq)
{
	size_t w = ob->head;
	for (size_t i = ob->head; i < ob->n; i++) {
		struct hp_outbox_entry *e = &ob->e[i];
		if (strcmp(e->instance, instance) == 0 && e->seq <= seq) {
			release(ob, e);
			continue;
		}
		ob->e[w++] = *e;
	}
	ob->n = w;
}

static void locked_rewind(struct hp_outbox *ob)
{
	for (size_t i = ob->head; i < ob->n; i++)
		ob->e[i].sent = false;
}

static uint8_t *pack_gap(const struct hp_outbox_entry *e, size_t *len)
{
	Hotpath__V1__DataGap g = HOTPATH__V1__DATA_GAP__INIT;
	g.first_seq = e->gap_first;
	g.messages = e->gap_messages;
	g.start_unix_ns = e->start_ns;
	g.end_unix_ns = e->end_ns;
	g.reason = (char *)"the agent's buffer of unacknowledged data was full";
	Hotpath__V1__AgentMessage m = HOTPATH__V1__AGENT_MESSAGE__INIT;
	m.seq = e->seq;
	m.instance_id = (char *)e->instance;
	m.kind_case = HOTPATH__V1__AGENT_MESSAGE__KIND_GAP;
	m.gap = &g;
	*len = hotpath__v1__agent_message__get_packed_size(&m);
	uint8_t *buf = malloc(*len ? *len : 1);
	if (buf)
		hotpath__v1__agent_message__pack(&m, buf);
	return buf;
}

static int locked_next(struct hp_outbox *ob, uint8_t **buf, size_t *len)
{
	for (size_t i = ob->head; i < ob->n; i++) {
		struct hp_outbox_entry *e = &ob->e[i];
		if (e->sent)
			continue;
		if (e->gap_messages) {
			*buf = pack_gap(e, len);
		} else if (e->buf) {
			*buf = malloc(e->len ? e->len : 1);
			if (*buf)
				memcpy(*buf, e->buf, e->len);
			*len = e->len;
		} else {
			char path[4200];
			spool_path(ob, e, path, sizeof(path));
			FILE *f = fopen(path, "re");
			*buf = f ? malloc(e->len ? e->len : 1) : NULL;
			size_t got = *buf ? fread(*buf, 1, e->len, f) : 0;
			if (f)
				fclose(f);
			if (!*buf || got != e->len) {
				/* The file is gone or short: say so with a gap rather than send garbage. */
				free(*buf);
				release(ob, e);
				e->gap_first = e->seq;
				e->gap_messages = 1;
				ob->dropped++;
				*buf = pack_gap(e, len);
			} else {
				*len = e->len;
			}
		}
		if (!*buf)
			return -ENOMEM;
		e->sent = true;
		return 1;
	}
	return 0;
}

static size_t locked_count(const struct hp_outbox *ob)
{
	return ob->n - ob->head;
}

static size_t locked_persist(struct hp_outbox *ob)
{
	size_t lost = 0;
	for (size_t i = ob->head; i < ob->n; i++) {
		struct hp_outbox_entry *e = &ob->e[i];
		if (e->on_disk)
			continue;
		uint8_t *buf = e->buf;
		size_t len = e->len;
		bool gap = e->gap_messages > 0;
		if (gap)
			buf = pack_gap(e, &len);
		char path[4200];
		spool_path(ob, e, path, sizeof(path));
		if (!ob->dir[0] || !buf || (!gap && ob->disk_bytes + len > ob->disk_max) ||
		    write_file(path, buf, len) < 0) {
			lost += gap ? 0 : 1;
		} else if (!gap) {
			ob->disk_bytes += len;
		}
		if (gap)
			free(buf);
	}
	return lost;
}

int hp_outbox_add(struct hp_outbox *ob, Hotpath__V1__AgentMessage *m, int64_t start_ns, int64_t end_ns)
{
	pthread_mutex_lock(&ob->lock);
	int r = locked_add(ob, m, start_ns, end_ns);
	pthread_mutex_unlock(&ob->lock);
	return r;
}

void hp_outbox_ack(struct hp_outbox *ob, const char *instance, uint64_t seq)
{
	pthread_mutex_lock(&ob->lock);
	locked_ack(ob, instance, seq);
	pthread_mutex_unlock(&ob->lock);
}

void hp_outbox_rewind(struct hp_outbox *ob)
{
	pthread_mutex_lock(&ob->lock);
	locked_rewind(ob);
	pthread_mutex_unlock(&ob->lock);
}

int hp_outbox_next(struct hp_outbox *ob, uint8_t **buf, size_t *len)
{
	pthread_mutex_lock(&ob->lock);
	int r = locked_next(ob, buf, len);
	pthread_mutex_unlock(&ob->lock);
	return r;
}

uint64_t hp_outbox_mark(struct hp_outbox *ob)
{
	pthread_mutex_lock(&ob->lock);
	uint64_t m = ob->added;
	pthread_mutex_unlock(&ob->lock);
	return m;
}

uint64_t hp_outbox_sent_mark(struct hp_outbox *ob)
{
	pthread_mutex_lock(&ob->lock);
	uint64_t m = ob->added;
	for (size_t i = ob->head; i < ob->n; i++)
		if (!ob->e[i].sent) { /* entries are kept in ord order: everything before it is out */
			m = ob->e[i].ord - 1;
			break;
		}
	pthread_mutex_unlock(&ob->lock);
	return m;
}

size_t hp_outbox_count(struct hp_outbox *ob)
{
	pthread_mutex_lock(&ob->lock);
	size_t n = locked_count(ob);
	pthread_mutex_unlock(&ob->lock);
	return n;
}

size_t hp_outbox_persist(struct hp_outbox *ob)
{
	pthread_mutex_lock(&ob->lock);
	size_t n = locked_persist(ob);
	pthread_mutex_unlock(&ob->lock);
	return n;
}

void hp_outbox_free(struct hp_outbox *ob)
{
	for (size_t i = ob->head; i < ob->n; i++)
		free(ob->e[i].buf);
	free(ob->e);
	for (size_t i = 0; i < ob->ninstances; i++)
		free(ob->instances[i]);
	pthread_mutex_destroy(&ob->lock);
	memset(ob, 0, sizeof(*ob));
}
