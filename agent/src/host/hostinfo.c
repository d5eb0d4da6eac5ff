/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host facts for Hello. Everything is read from the kernel's own interfaces
 * (uname, /sys/kernel/notes, /proc/cpuinfo, sysfs cache and CPU lists) so the
 * backend can tell hosts apart and group those that share a kernel build.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/utsname.h>

#include "base/hex.h"
#include "host/hostinfo.h"

static int read_small_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, len - 1);
	int e = errno;
	close(fd);
	if (n < 0)
		return -e;
	buf[n] = '\0';
	/* Trim trailing whitespace: sysfs values end in a newline. */
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		buf[--n] = '\0';
	return (int)n;
}

int hp_parse_build_id_notes(const uint8_t *buf, size_t len, char *out, size_t outlen)
{
	size_t off = 0;
	while (off + 12 <= len) {
		uint32_t namesz, descsz, type;
		memcpy(&namesz, buf + off, 4);
		memcpy(&descsz, buf + off + 4, 4);
		memcpy(&type, buf + off + 8, 4);
		off += 12;
		size_t name_pad = (namesz + 3) & ~3u, desc_pad = (descsz + 3) & ~3u;
		if (name_pad > len - off || desc_pad > len - off - name_pad)
			break;
		const uint8_t *name = buf + off, *desc = buf + off + name_pad;
		/* NT_GNU_BUILD_ID = 3, owner "GNU\0". */
		if (type == 3 && namesz == 4 && memcmp(name, "GNU", 4) == 0 && descsz > 0 && descsz * 2 + 1 <= outlen) {
			hp_hex(desc, descsz, out);
			return 0;
		}
		off += name_pad + desc_pad;
	}
	return -ENOENT;
}

void hp_notes_file_build_id(const char *path, char *out, size_t outlen)
{
	uint8_t buf[4096];
	out[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n > 0)
		hp_parse_build_id_notes(buf, (size_t)n, out, outlen);
}

void hp_kernel_build_id(char *out, size_t outlen)
{
	hp_notes_file_build_id("/sys/kernel/notes", out, outlen);
}

static void cpu_model(char *out, size_t outlen)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[512];
	out[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "model name", 10) != 0)
			continue;
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		colon++;
		while (*colon == ' ' || *colon == '\t')
			colon++;
		colon[strcspn(colon, "\n")] = '\0';
		snprintf(out, outlen, "%s", colon);
		break;
	}
	fclose(f);
}

int hp_online_cpus(int *cpus, int max)
{
	char buf[1024];
	int n = read_small_file("/sys/devices/system/cpu/online", buf, sizeof(buf));
	if (n < 0)
		return n;
	int count = 0;
	char *p = buf;
	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a;
		if (end == p)
			return -EINVAL;
		p = end;
		if (*p == '-') {
			b = strtol(p + 1, &end, 10);
			if (end == p + 1 || b < a)
				return -EINVAL;
			p = end;
		}
		for (long c = a; c <= b && count < max; c++)
			cpus[count++] = (int)c;
		if (*p == ',')
			p++;
		else if (*p)
			return -EINVAL;
	}
	return count;
}

/* sysfs cache sizes look like "32K" or "1024K". */
static uint32_t parse_size(const char *s)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (*end == 'K')
		v *= 1024;
	else if (*end == 'M')
		v *= 1024 * 1024;
	return (uint32_t)v;
}

static void l1i_geometry(struct hp_cache_geometry *g)
{
	memset(g, 0, sizeof(*g));
	for (int i = 0; i < 16; i++) {
		char path[128], val[64];
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
		if (read_small_file(path, val, sizeof(val)) < 0)
			break;
		if (strcmp(val, "1") != 0)
			continue;
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
		if (read_small_file(path, val, sizeof(val)) < 0 || strcmp(val, "Instruction") != 0)
			continue;
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		if (read_small_file(path, val, sizeof(val)) > 0)
			g->size_bytes = parse_size(val);
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/coherency_line_size", i);
		if (read_small_file(path, val, sizeof(val)) > 0)
			g->line_bytes = (uint32_t)strtoul(val, NULL, 10);
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/ways_of_associativity", i);
		if (read_small_file(path, val, sizeof(val)) > 0)
			g->ways = (uint32_t)strtoul(val, NULL, 10);
		return;
	}
}

int hp_hostinfo_collect(struct hp_hostinfo *hi, const char *host_id_override, char *err, size_t errlen)
{
	struct utsname u;
	memset(hi, 0, sizeof(*hi));
	if (uname(&u) != 0) {
		snprintf(err, errlen, "uname: %s", strerror(errno));
		return -errno;
	}
	snprintf(hi->hostname, sizeof(hi->hostname), "%s", u.nodename);
	snprintf(hi->release, sizeof(hi->release), "%s", u.release);
	if (host_id_override && *host_id_override) {
		snprintf(hi->host_id, sizeof(hi->host_id), "%s", host_id_override);
	} else {
		int n = read_small_file("/etc/machine-id", hi->host_id, sizeof(hi->host_id));
		if (n <= 0) {
			snprintf(err, errlen, "no host id: /etc/machine-id is %s; pass --host-id",
				 n < 0 ? strerror(-n) : "empty");
			return n < 0 ? n : -ENOENT;
		}
	}
	hp_kernel_build_id(hi->build_id, sizeof(hi->build_id));
	cpu_model(hi->cpu_model, sizeof(hi->cpu_model));
	int cpus[1024];
	int n = hp_online_cpus(cpus, 1024);
	if (n <= 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		n = c > 0 ? (int)c : 0;
	}
	hi->cpu_count = (uint32_t)n;
	l1i_geometry(&hi->l1i);
	return 0;
}
