// SPDX-License-Identifier: Apache-2.0
/*
 * The process target of replacement (patch_target.h): ptrace stops every
 * thread (world.c), writes go through /proc/PID/mem, and what the process
 * must do itself (map memory, register unwind data) is injected (inject.h)
 * from trampolines in scratch bytes: the zero-filled tail of an executable
 * file mapping, past the end of its segment's contents, which no code of
 * the process runs.
 *
 * The code heap is a memfd the process creates (named after the install,
 * so leftovers are found after a crash), written by the agent through
 * /proc/PID/fd before the process maps it read-only and executable: its
 * pages hold the code as a file, so uprobes (which read the instruction
 * they replace from the file) can probe the copy, and /proc/PID/maps shows
 * it by name. The data area (the unwinder's record and the injection's
 * save area) is anonymous memory, named with PR_SET_VMA where the kernel
 * allows it.
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/grow.h"
#include "host/processes.h"
#include "host/procmaps.h"
#include "isa/isa.h"
#include "replace/inject.h"
#include "replace/patch_target.h"
#include "replace/world.h"
#include "target/target_elf.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef PR_SET_VMA
#define PR_SET_VMA           0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 1U
#endif

/* Layout of the data area: the unwinder's object record, then the call area. */
#define DATA_OBJECT 0
#define DATA_CALL   4096
/* How long and how often a write waits for threads to leave its bytes. */
#define RETRIES     200
#define RUN_US      500

struct proc {
	int pid;
	uint64_t start_time;
	int mem; /* read-only, for reads while running */
	struct hp_world w;
	bool stopped;
	struct hp_injector ij;
	uint64_t scratch;
	bool scratch_ready;
};

static struct proc *P(struct hp_patch_target *t)
{
	return t->priv;
}

static int pquiesce(struct hp_patch_target *t, char *err, size_t errlen)
{
	struct proc *p = P(t);
	uint64_t st;
	int r;

	if (p->stopped)
		return 0;
	if (p->start_time && (hp_process_start_time(p->pid, &st) < 0 || st != p->start_time)) {
		snprintf(err, errlen, "process %d exited (the pid is not the process that was planned for)", p->pid);
		return -ESRCH;
	}
	if ((r = hp_world_stop(p->pid, &p->w, err, errlen)) < 0)
		return r;
	p->stopped = true;
	p->scratch_ready = false;
	t->quiesce_seconds = p->w.stop_seconds;
	return 0;
}

static void presume(struct hp_patch_target *t)
{
	struct proc *p = P(t);

	if (!p->stopped)
		return;
	hp_world_release(&p->w);
	p->stopped = false;
	p->scratch_ready = false;
}

static int pread_target(struct hp_patch_target *t, uint64_t addr, void *buf, size_t len)
{
	struct proc *p = P(t);
	ssize_t n = pread(p->mem, buf, len, (off_t)addr);
	if (n != (ssize_t)len)
		return n < 0 ? -errno : -EIO;
	/* The program's own bytes, not the int3 of a probe attached to it (a
	 * running measurement's uprobe): what the plan hashed, and what a
	 * revert must put back (an int3 left without its uprobe would kill
	 * the program with SIGTRAP). */
	int r = hp_unprobe_bytes(p->pid, addr, buf, len, NULL, 0);
	return r == -ESRCH ? -ESRCH : 0;
}

static int pread_raw(struct hp_patch_target *t, uint64_t addr, void *buf, size_t len)
{
	ssize_t n = pread(P(t)->mem, buf, len, (off_t)addr);
	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EIO;
}

/* One line of /proc/PID/maps. */
struct map {
	uint64_t lo, hi, off;
	char perms[8];
	char path[512];
};

static int read_maps(int pid, struct map **out, size_t *n)
{
	char path[64], line[1024];
	FILE *fp;
	size_t cap = 0;

	*out = NULL;
	*n = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	if (!(fp = fopen(path, "r")))
		return -ESRCH;
	while (fgets(line, sizeof(line), fp)) {
		struct map m = { 0 };
		unsigned long long a, b, off;
		int k = 0;
		if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &a, &b, m.perms, &off, &k) < 4)
			continue;
		m.lo = a;
		m.hi = b;
		m.off = off;
		if (k) {
			snprintf(m.path, sizeof(m.path), "%s", line + k);
			m.path[strcspn(m.path, "\n")] = 0;
		}
		if (HP_GROW(*out, cap, *n + 1)) {
			fclose(fp);
			return -ENOMEM;
		}
		(*out)[(*n)++] = m;
	}
	fclose(fp);
	return 0;
}

/* Where the contents of the executable segment behind mapping m end. */
static uint64_t segment_end(int pid, const struct map *m)
{
	char path[96];
	int fd;
	Elf *e;
	size_t n;
	uint64_t end = 0;

	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, m->lo, m->hi);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	elf_version(EV_CURRENT);
	if ((e = elf_begin(fd, ELF_C_READ, NULL)) && elf_getphdrnum(e, &n) == 0)
		for (size_t i = 0; i < n; i++) {
			GElf_Phdr ph;
			if (!gelf_getphdr(e, i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
				continue;
			uint64_t fo = ph.p_offset & ~(uint64_t)0xfff;
			if (m->off < fo || m->off >= ph.p_offset + ph.p_filesz)
				continue;
			/* The mapping starts at file offset m->off. */
			end = m->lo + (ph.p_offset + ph.p_filesz - m->off);
			break;
		}
	if (e)
		elf_end(e);
	close(fd);
	return end;
}

static int pprepare_scratch(struct hp_patch_target *t, struct hp_undo *u, char *err, size_t errlen)
{
	struct proc *p = P(t);
	struct map *maps;
	size_t n;
	int r;

	memset(u, 0, sizeof(*u));
	u->kind = HP_UNDO_SCRATCH;
	if ((r = read_maps(p->pid, &maps, &n)) < 0) {
		snprintf(err, errlen, "process %d exited", p->pid);
		return r;
	}
	uint8_t *buf = malloc(HP_INJECT_SCRATCH);
	for (size_t i = 0; buf && i < n; i++) {
		const struct map *m = &maps[i];
		if (m->perms[2] != 'x' || m->path[0] != '/' || strstr(m->path, "memfd:"))
			continue;
		uint64_t end = segment_end(p->pid, m);
		if (!end || end >= m->hi)
			continue;
		uint64_t at = (end + 63) & ~(uint64_t)63;
		if (at + HP_INJECT_SCRATCH > m->hi || pread_target(t, at, buf, HP_INJECT_SCRATCH) < 0)
			continue;
		bool zero = true;
		for (size_t k = 0; k < HP_INJECT_SCRATCH && zero; k++)
			zero = !buf[k];
		/* Not zero: an interrupted operation's trampolines, or not padding. */
		if (!zero)
			continue;
		/* No thread may be running there (an injection cut short). */
		char why[200];
		if (p->stopped && hp_world_inside(&p->w, at, at + HP_INJECT_SCRATCH, 0, why, sizeof(why)) >= 0)
			continue;
		u->addr = at;
		u->len = 0;
		u->big_len = HP_INJECT_SCRATCH;
		u->big_orig = buf;
		u->big_now = calloc(1, HP_INJECT_SCRATCH);
		free(maps);
		if (!u->big_now) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		/* The trampolines go in when the injector starts (inject.c writes them). */
		return 0;
	}
	free(buf);
	free(maps);
	snprintf(err, errlen,
		 "no scratch bytes for the injection trampolines in process %d: no executable file mapping has %d "
		 "unused bytes past its segment",
		 p->pid, HP_INJECT_SCRATCH);
	return -ENOSPC;
}

static int injector(struct proc *p, uint64_t scratch, char *err, size_t errlen)
{
	int r;

	if (p->scratch_ready && p->scratch == scratch)
		return 0;
	if ((r = hp_inject_begin(&p->ij, &p->w, scratch, err, errlen)) < 0)
		return r;
	p->scratch = scratch;
	p->scratch_ready = true;
	return 0;
}

static int syscall_in(struct proc *p, long nr, const uint64_t *a, int na, int64_t *ret, char *err, size_t errlen)
{
	if (!p->scratch_ready) {
		snprintf(err, errlen, "no scratch bytes prepared for injection");
		return -EINVAL;
	}
	return hp_inject_syscall(&p->ij, nr, a, na, ret, err, errlen);
}

static int pheap_place(struct hp_patch_target *t, uint64_t lo, uint64_t hi, uint64_t near, size_t len, uint64_t *addr,
		       char *err, size_t errlen)
{
	struct proc *p = P(t);
	struct map *maps;
	size_t n;
	uint64_t best = 0, bestd = UINT64_MAX;
	const uint64_t guard = 1u << 20; /* leave room to grow beside other mappings */

	if (read_maps(p->pid, &maps, &n) < 0) {
		snprintf(err, errlen, "process %d exited", p->pid);
		return -ESRCH;
	}
	len = (len + 4095) & ~(size_t)4095;
	lo = (lo + 4095) & ~(uint64_t)4095;
	if (lo < 0x10000)
		lo = 0x10000;
	for (size_t i = 0; i <= n; i++) {
		uint64_t g0 = i ? maps[i - 1].hi : 0, g1 = i < n ? maps[i].lo : 0x7ffffffff000ull;
		if (g0 < lo)
			g0 = lo;
		if (g1 > hi)
			g1 = hi;
		/* Keep clear of the brk heap's growth and of neighbours. */
		if (i && !strcmp(maps[i - 1].path, "[heap]"))
			g0 += 256ull << 20;
		if (g1 <= g0 || g1 - g0 < len + 2 * guard)
			continue;
		uint64_t a0 = g0 + guard, a1 = (g1 - guard - len) & ~(uint64_t)4095;
		if (a1 < a0)
			continue;
		uint64_t a = near < a0 ? a0 : near > a1 ? a1 : near & ~(uint64_t)4095;
		uint64_t d = a > near ? a - near : near - a;
		if (d < bestd) {
			bestd = d;
			best = a;
		}
	}
	free(maps);
	if (!best) {
		snprintf(err, errlen,
			 "no free %zu bytes in process %d within reach of the code (0x%" PRIx64 "-0x%" PRIx64 ")", len,
			 p->pid, lo, hi);
		return -ENOSPC;
	}
	*addr = best;
	return 0;
}

static int pheap_map(struct hp_patch_target *t, struct hp_heap *h, const uint8_t *image, char *err, size_t errlen)
{
	struct proc *p = P(t);
	uint64_t name_at = p->scratch + HP_INJECT_SCRATCH - 64;
	char name[128], path[96];
	int64_t fd = -1, r;
	int lfd = -1, rc;

	snprintf(name, sizeof(name), "%s", h->name);
	if (strlen(name) + sizeof("-data") > 64) {
		snprintf(err, errlen, "the heap's name %s is too long", name);
		return -ENAMETOOLONG;
	}
	if ((rc = hp_world_write(&p->w, name_at, name, strlen(name) + 1)) < 0) {
		snprintf(err, errlen, "cannot write the heap's name: %s", strerror(-rc));
		return rc;
	}
	uint64_t a1[2] = { name_at, MFD_CLOEXEC };
	if ((rc = syscall_in(p, SYS_memfd_create, a1, 2, &fd, err, errlen)) < 0)
		return rc;
	if (fd < 0) {
		snprintf(err, errlen, "memfd_create in process %d: %s", p->pid, strerror((int)-fd));
		return (int)fd;
	}
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", p->pid, (int)fd);
	rc = 0;
	if ((lfd = open(path, O_RDWR | O_CLOEXEC)) < 0 || ftruncate(lfd, (off_t)h->len) < 0 ||
	    pwrite(lfd, image, h->len, 0) != (ssize_t)h->len) {
		rc = errno ? -errno : -EIO;
		snprintf(err, errlen, "cannot write the code heap through %s: %s", path, strerror(-rc));
	}
	if (lfd >= 0)
		close(lfd);
	if (!rc) {
		uint64_t a2[6] = { h->addr,      h->len, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED_NOREPLACE,
				   (uint64_t)fd, 0 };
		if ((rc = syscall_in(p, SYS_mmap, a2, 6, &r, err, errlen)) == 0 && (uint64_t)r != h->addr) {
			if (r > 0 || r < -4095) {
				uint64_t a3[2] = { (uint64_t)r, h->len };
				int64_t x;
				syscall_in(p, SYS_munmap, a3, 2, &x, err, errlen);
			}
			snprintf(err, errlen, "mmap of the code heap at 0x%" PRIx64 " in process %d: %s", h->addr,
				 p->pid, r < 0 && r > -4096 ? strerror((int)-r) : "placed elsewhere");
			rc = r < 0 && r > -4096 ? (int)r : -EEXIST;
		}
	}
	uint64_t a4[1] = { (uint64_t)fd };
	int64_t x;
	char e2[200];
	syscall_in(p, SYS_close, a4, 1, &x, e2, sizeof(e2));
	if (rc < 0)
		return rc;
	if (h->rw_off && h->rw_off < h->len) {
		/* Counters: writable, not executable (a private mapping: the memfd stays as written). */
		uint64_t a7[3] = { h->addr + h->rw_off, h->len - h->rw_off, PROT_READ | PROT_WRITE };
		if ((rc = syscall_in(p, SYS_mprotect, a7, 3, &r, err, errlen)) < 0)
			return rc;
		if (r < 0) {
			snprintf(err, errlen, "mprotect of the counter area in process %d: %s", p->pid,
				 strerror((int)-r));
			return (int)r;
		}
	}
	if (h->data_len) {
		h->data_len = DATA_CALL + hp_inject_call_area();
		uint64_t a5[6] = {
			0, h->data_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0
		};
		if ((rc = syscall_in(p, SYS_mmap, a5, 6, &r, err, errlen)) < 0)
			return rc;
		if (r < 0 && r > -4096) {
			snprintf(err, errlen, "mmap of the data area in process %d: %s", p->pid, strerror((int)-r));
			return (int)r;
		}
		h->data = (uint64_t)r;
		/* Name it, so a later agent finds it (the kernel may not allow it). */
		snprintf(name, sizeof(name), "%s-data", h->name);
		hp_world_write(&p->w, name_at, name, strlen(name) + 1);
		uint64_t a6[5] = { PR_SET_VMA, PR_SET_VMA_ANON_NAME, h->data, h->data_len, name_at };
		syscall_in(p, SYS_prctl, a6, 5, &x, e2, sizeof(e2));
	}
	return 0;
}

/* The address of a dynamic symbol of libgcc_s in the process, or 0. */
static uint64_t unwinder_symbol(int pid, const char *sym, uint64_t *lib_lo, uint64_t *lib_hi)
{
	struct map *maps;
	size_t n;
	uint64_t found = 0;

	if (read_maps(pid, &maps, &n) < 0)
		return 0;
	elf_version(EV_CURRENT);
	*lib_lo = *lib_hi = 0;
	for (size_t i = 0; i < n; i++)
		if (strstr(maps[i].path, "/libgcc_s.so")) {
			if (!*lib_lo)
				*lib_lo = maps[i].lo;
			*lib_hi = maps[i].hi;
		}
	for (size_t i = 0; i < n && !found; i++) {
		if (!strstr(maps[i].path, "/libgcc_s.so") || maps[i].off != 0)
			continue;
		char path[96];
		snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, maps[i].lo, maps[i].hi);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		Elf *e = fd >= 0 ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
		Elf_Scn *scn = NULL;
		uint64_t first_vaddr = UINT64_MAX;
		size_t np;
		if (e && elf_getphdrnum(e, &np) == 0)
			for (size_t k = 0; k < np; k++) {
				GElf_Phdr ph;
				if (gelf_getphdr(e, k, &ph) && ph.p_type == PT_LOAD && ph.p_vaddr < first_vaddr)
					first_vaddr = ph.p_vaddr & ~(uint64_t)0xfff;
			}
		while (e && (scn = elf_nextscn(e, scn))) {
			GElf_Shdr sh;
			if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM)
				continue;
			Elf_Data *d = elf_getdata(scn, NULL);
			for (size_t k = 0; d && k < sh.sh_size / sh.sh_entsize; k++) {
				GElf_Sym s;
				const char *nm;
				if (gelf_getsym(d, (int)k, &s) && s.st_shndx != SHN_UNDEF &&
				    (nm = elf_strptr(e, sh.sh_link, s.st_name)) && !strcmp(nm, sym)) {
					found = maps[i].lo - first_vaddr + s.st_value;
					break;
				}
			}
		}
		if (e)
			elf_end(e);
		if (fd >= 0)
			close(fd);
	}
	free(maps);
	return found;
}

/* Call one of libgcc's frame registration functions. They take the
 * unwinder's lock: the other threads run during the call (one may hold
 * it), and the borrowed thread must not be inside the unwinder itself. */
static int unwinder_call(struct hp_patch_target *t, const char *fn_name, uint64_t a1, uint64_t a2, uint64_t area,
			 uint64_t *ret, char *err, size_t errlen)
{
	struct proc *p = P(t);
	uint64_t lo, hi, fn = unwinder_symbol(p->pid, fn_name, &lo, &hi);
	int r;

	if (!fn)
		return 1; /* no unwinder in the process: nothing to register with */
	for (int k = 0;; k++) {
		ssize_t i = hp_world_index(&p->w, p->ij.tid);
		char why[200];
		struct hp_world one = p->w;
		if (i >= 0) {
			/* Only the borrowed thread's stack matters here. */
			one.t = &p->w.t[i];
			one.n = 1;
			if (hp_world_inside(&one, lo, hi, 64 << 10, why, sizeof(why)) < 0)
				break;
		}
		if (k == RETRIES) {
			snprintf(err, errlen, "no thread outside the process's unwinder to make the call with");
			return -EBUSY;
		}
		uint64_t scratch = p->scratch;
		if ((r = hp_world_run_briefly(&p->w, RUN_US, err, errlen)) < 0)
			return r;
		p->scratch_ready = false;
		if ((r = injector(p, scratch, err, errlen)) < 0)
			return r;
	}
	return hp_inject_call(&p->ij, fn, a1, a2, area, 2000, ret, err, errlen);
}

static int punwind_register(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen)
{
	uint64_t ret = 0;
	int r;

	if (!h->unwind || !h->data)
		return 0;
	r = unwinder_call(t, "__register_frame_info", h->unwind, h->data + DATA_OBJECT, h->data + DATA_CALL, &ret, err,
			  errlen);
	if (r == 0)
		h->unwind_registered = true;
	return r < 0 ? r : 0;
}

static int punwind_deregister(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen)
{
	uint64_t ret = 0;
	int r;

	if (!h->unwind_registered)
		return 0;
	r = unwinder_call(t, "__deregister_frame_info", h->unwind, 0, h->data + DATA_CALL, &ret, err, errlen);
	if (r == 0)
		h->unwind_registered = false;
	return r < 0 ? r : 0;
}

static int punwind_arm(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen)
{
	uint64_t zero[2] = { 0, 0 };

	if (!h->unwind_registered || !h->data)
		return 0;
	if (hp_world_write(&P(t)->w, h->data + DATA_CALL, zero, sizeof(zero)) < 0) {
		snprintf(err, errlen, "cannot write the unwinder call's area at 0x%" PRIx64, h->data + DATA_CALL);
		return -EIO;
	}
	return 0;
}

/* The call area's first word is set to 1 by the trampoline when the call
 * returns, and is 0 before: the data area is mapped zeroed and registration
 * is its first call, and unwind_arm zeroes it before a deregistration (whose
 * journal record comes after that write). So 1 means
 * the call finished; 0 means it did not run, unless a thread is still inside
 * the unwinder (the agent died while it ran: the thread goes on by itself). */
static int punwind_settle(struct hp_patch_target *t, struct hp_heap *h, bool deregister, char *err, size_t errlen)
{
	struct proc *p = P(t);
	uint64_t done = 0, lo = 0, hi = 0;
	char why[200];

	if (!h->unwind || !h->data)
		return 0;
	if (hp_world_read(&p->w, h->data + DATA_CALL, &done, sizeof(done)) < 0) {
		snprintf(err, errlen, "cannot read the unwinder call's area at 0x%" PRIx64, h->data + DATA_CALL);
		return -EIO;
	}
	if (done == 1) {
		h->unwind_registered = !deregister;
		return 1;
	}
	if (unwinder_symbol(p->pid, "__register_frame_info", &lo, &hi) && lo < hi &&
	    hp_world_inside(&p->w, lo, hi, 64 << 10, why, sizeof(why)) >= 0)
		return -EAGAIN;
	return 0;
}

static int pprepare_entry(struct hp_patch_target *t, uint64_t fn, uint64_t new_entry, struct hp_undo *u, char *err,
			  size_t errlen)
{
	int n, r;

	memset(u, 0, sizeof(*u));
	u->kind = HP_UNDO_ENTRY;
	u->addr = fn;
	n = hp_isa_encode_branch(-1, fn, new_entry, HP_W_NEAR, u->now, sizeof(u->now));
	if (n < 0) {
		snprintf(err, errlen, "the copy at 0x%" PRIx64 " is beyond a jump's reach from 0x%" PRIx64, new_entry,
			 fn);
		return -ERANGE;
	}
	u->len = (uint8_t)n;
	if ((r = pread_target(t, fn, u->orig, u->len)) < 0) {
		snprintf(err, errlen, "cannot read 0x%" PRIx64 " in %s: %s", fn, t->desc, strerror(-r));
		return r;
	}
	return 0;
}

static int pprepare_call(struct hp_patch_target *t, uint64_t site, uint64_t new_target, struct hp_undo *u, char *err,
			 size_t errlen)
{
	struct hp_isa_insn in;
	int n, r;

	memset(u, 0, sizeof(*u));
	u->kind = HP_UNDO_CALL;
	u->addr = site;
	if ((r = pread_target(t, site, u->orig, 5)) < 0) {
		snprintf(err, errlen, "cannot read the call at 0x%" PRIx64 ": %s", site, strerror(-r));
		return r;
	}
	if (hp_isa_decode(u->orig, 5, site, &in) < 0 || in.cls != HP_IC_CALL || in.len != 5) {
		snprintf(err, errlen, "0x%" PRIx64 " holds no 5-byte direct call", site);
		return -EINVAL;
	}
	n = hp_isa_relocate(u->orig, 5, site, site, new_target, u->now, sizeof(u->now), NULL);
	if (n != 5) {
		snprintf(err, errlen, "the call at 0x%" PRIx64 " cannot reach 0x%" PRIx64, site, new_target);
		return -ERANGE;
	}
	u->len = 5;
	return 0;
}

static int write_bytes(struct hp_patch_target *t, const struct hp_undo *u, const uint8_t *bytes, hp_pc_map_fn map,
		       void *ctx, char *err, size_t errlen)
{
	struct proc *p = P(t);
	size_t len = u->big_len ? u->big_len : u->len;
	uint64_t lo = u->addr + 1, hi = u->addr + len;
	int r;

	if (!p->stopped) {
		snprintf(err, errlen, "internal: a write while the process runs");
		return -EINVAL;
	}
	/* No thread may stop between the first and the last byte. */
	for (int k = 0;; k++) {
		bool busy = false;
		for (size_t i = 0; i < p->w.n; i++) {
			struct hp_thread *th = &p->w.t[i];
			uint64_t pc = th->regs.rip;
			if (pc < lo || pc >= hi)
				continue;
			uint64_t np = map && (long)th->regs.orig_rax < 0 && !th->dirty ? map(ctx, pc) : 0;
			if (np && hp_world_set_pc(&p->w, i, np) == 0) {
				t->pcs_moved++;
				continue;
			}
			busy = true;
		}
		if (!busy)
			break;
		if (k == RETRIES) {
			snprintf(err, errlen, "a thread stays inside the bytes at 0x%" PRIx64 "", u->addr);
			return -EBUSY;
		}
		t->waits++;
		uint64_t scratch = p->scratch;
		bool had = p->scratch_ready;
		if ((r = hp_world_run_briefly(&p->w, RUN_US, err, errlen)) < 0)
			return r;
		p->scratch_ready = false;
		if (had && (r = injector(p, scratch, err, errlen)) < 0)
			return r;
	}
	if ((r = hp_world_write(&p->w, u->addr, bytes, len)) < 0) {
		snprintf(err, errlen, "writing %zu bytes at 0x%" PRIx64 " in %s: %s", len, u->addr, t->desc,
			 strerror(-r));
		return r;
	}
	uint8_t back[HP_UNDO_MAX];
	if (len <= HP_UNDO_MAX && (hp_world_read(&p->w, u->addr, back, len) < 0 || memcmp(back, bytes, len))) {
		snprintf(err, errlen, "the bytes at 0x%" PRIx64 " did not read back as written", u->addr);
		return -EIO;
	}
	return 0;
}

static int papply(struct hp_patch_target *t, const struct hp_undo *u, hp_pc_map_fn map, void *ctx, char *err,
		  size_t errlen)
{
	struct proc *p = P(t);
	if (u->kind == HP_UNDO_SCRATCH)
		return injector(p, u->addr, err, errlen); /* writes the trampolines */
	return write_bytes(t, u, u->now, map, ctx, err, errlen);
}

static int prestore(struct hp_patch_target *t, const struct hp_undo *u, char *err, size_t errlen)
{
	struct proc *p = P(t);
	int r;

	if (u->kind == HP_UNDO_SCRATCH) {
		char why[200];
		/* A trampoline cut short by a crash may still be running. */
		for (int k = 0; hp_world_inside(&p->w, u->addr, u->addr + u->big_len, 0, why, sizeof(why)) >= 0; k++) {
			if (k == RETRIES) {
				snprintf(err, errlen, "a thread stays in the injection trampolines (%s)", why);
				return -EBUSY;
			}
			if ((r = hp_world_run_briefly(&p->w, RUN_US, err, errlen)) < 0)
				return r;
		}
		p->scratch_ready = false;
		if ((r = hp_world_write(&p->w, u->addr, u->big_orig, u->big_len)) < 0)
			snprintf(err, errlen, "restoring the scratch bytes at 0x%" PRIx64 ": %s", u->addr,
				 strerror(-r));
		return r;
	}
	return write_bytes(t, u, u->orig, NULL, NULL, err, errlen);
}

static int pin_use(struct hp_patch_target *t, uint64_t lo, uint64_t hi, char *why, size_t wlen)
{
	struct proc *p = P(t);
	if (!p->stopped) {
		snprintf(why, wlen, "the process is not stopped");
		return 1;
	}
	return hp_world_inside(&p->w, lo, hi, 256 << 10, why, wlen) >= 0;
}

static int pheap_release(struct hp_patch_target *t, struct hp_heap *h, char *err, size_t errlen)
{
	struct proc *p = P(t);
	int64_t x;
	int r;

	if (h->addr && h->len) {
		uint64_t a[2] = { h->addr, h->len };
		if ((r = syscall_in(p, SYS_munmap, a, 2, &x, err, errlen)) < 0)
			return r;
		if (x < 0) {
			snprintf(err, errlen, "munmap of the code heap: %s", strerror((int)-x));
			return (int)x;
		}
	}
	if (h->data && h->data_len) {
		uint64_t a[2] = { h->data, h->data_len };
		if ((r = syscall_in(p, SYS_munmap, a, 2, &x, err, errlen)) < 0)
			return r;
	}
	return 0;
}

static int pheap_find(struct hp_patch_target *t, const char *name, struct hp_heap *h)
{
	struct proc *p = P(t);
	struct map *maps;
	size_t n;
	char want[96], data[96];
	int found = 0;

	if (read_maps(p->pid, &maps, &n) < 0)
		return 0;
	snprintf(want, sizeof(want), "/memfd:%s ", name);
	snprintf(data, sizeof(data), "[anon:%s-data]", name);
	for (size_t i = 0; i < n; i++) {
		char pth[600];
		snprintf(pth, sizeof(pth), "%s ", maps[i].path);
		if (!strncmp(pth, want, strlen(want))) {
			if (!h->addr || maps[i].lo < h->addr)
				h->addr = maps[i].lo;
			if (maps[i].hi - h->addr > h->len)
				h->len = maps[i].hi - h->addr;
			found = 1;
		} else if (!strcmp(maps[i].path, data)) {
			h->data = maps[i].lo;
			h->data_len = maps[i].hi - maps[i].lo;
			found = 1;
		}
	}
	free(maps);
	return found;
}

static bool palive(struct hp_patch_target *t)
{
	struct proc *p = P(t);
	uint64_t st;
	return hp_process_start_time(p->pid, &st) == 0 && (!p->start_time || st == p->start_time);
}

static void pclose_target(struct hp_patch_target *t)
{
	struct proc *p = P(t);
	if (!p)
		return;
	presume(t);
	if (p->mem >= 0)
		close(p->mem);
	free(p);
	t->priv = NULL;
}

static int pmodule_base(struct hp_patch_target *t, const char *path, const char *build_id, uint64_t *bias, char *err,
			size_t errlen)
{
	struct proc *p = P(t);
	struct map *maps;
	size_t n;
	int r = -ENOENT;

	if (read_maps(p->pid, &maps, &n) < 0) {
		snprintf(err, errlen, "process %d exited", p->pid);
		return -ESRCH;
	}
	elf_version(EV_CURRENT);
	for (size_t i = 0; i < n && r == -ENOENT; i++) {
		if (strcmp(maps[i].path, path) || maps[i].off != 0)
			continue;
		char mf[96], bid[65] = "";
		snprintf(mf, sizeof(mf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, p->pid, maps[i].lo, maps[i].hi);
		int fd = open(mf, O_RDONLY | O_CLOEXEC);
		Elf *e = fd >= 0 ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
		uint64_t first = UINT64_MAX;
		size_t np;
		if (e && elf_getphdrnum(e, &np) == 0)
			for (size_t k = 0; k < np; k++) {
				GElf_Phdr ph;
				if (gelf_getphdr(e, k, &ph) && ph.p_type == PT_LOAD && ph.p_vaddr < first)
					first = ph.p_vaddr & ~(uint64_t)0xfff;
			}
		if (e)
			hp_elf_build_id(e, bid);
		if (e)
			elf_end(e);
		if (fd >= 0)
			close(fd);
		if (first == UINT64_MAX)
			continue;
		if (build_id && build_id[0] && strcmp(bid, build_id)) {
			snprintf(err, errlen,
				 "%s in %s has build id %s, the plan was made for build id %s: the binary changed "
				 "since planning",
				 path, t->desc, bid[0] ? bid : "(none)", build_id);
			r = -ESTALE;
			break;
		}
		*bias = maps[i].lo - first;
		r = 0;
	}
	free(maps);
	if (r == -ENOENT)
		snprintf(err, errlen, "%s is not loaded in %s: the plan is for another binary", path, t->desc);
	return r;
}

static const struct hp_patch_ops process_ops = {
	.kind = "process",
	.module_base = pmodule_base,
	.quiesce = pquiesce,
	.resume = presume,
	.read = pread_target,
	.read_raw = pread_raw,
	.prepare_scratch = pprepare_scratch,
	.heap_place = pheap_place,
	.heap_map = pheap_map,
	.unwind_register = punwind_register,
	.unwind_deregister = punwind_deregister,
	.unwind_arm = punwind_arm,
	.unwind_settle = punwind_settle,
	.prepare_entry = pprepare_entry,
	.prepare_call = pprepare_call,
	.apply = papply,
	.restore = prestore,
	.in_use = pin_use,
	.heap_release = pheap_release,
	.heap_find = pheap_find,
	.alive = palive,
	.close = pclose_target,
};

int hp_patch_target_process(int pid, uint64_t start_time, struct hp_patch_target *t, char *err, size_t errlen)
{
	struct proc *p = calloc(1, sizeof(*p));
	char path[64], comm[HP_COMM_LEN] = "";
	uint64_t st;

	memset(t, 0, sizeof(*t));
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (hp_process_start_time(pid, &st) < 0) {
		free(p);
		snprintf(err, errlen, "process %d does not exist", pid);
		return -ESRCH;
	}
	if (start_time && st != start_time) {
		free(p);
		snprintf(err, errlen,
			 "process %d is not the process the plan was made for (it started at %" PRIu64
			 " ticks after boot, the plan's at %" PRIu64 "): the planned process exited",
			 pid, st, start_time);
		return -ESRCH;
	}
	p->pid = pid;
	p->start_time = st;
	p->w.mem = -1;
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	if ((p->mem = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		int e = errno;
		free(p);
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
		return -e;
	}
	hp_process_comm(pid, comm);
	t->ops = &process_ops;
	t->priv = p;
	snprintf(t->desc, sizeof(t->desc), "process %d (%s)", pid, comm);
	t->instance = st;
	return 0;
}

void hp_undo_free(struct hp_undo *u)
{
	free(u->big_orig);
	free(u->big_now);
	u->big_orig = u->big_now = NULL;
}
