/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Facts about the host the agent runs on, as sent in Hello: a stable host id,
 * names and versions from uname(2), the running kernel's GNU build id, the CPU
 * model and count, and the level-1 instruction cache geometry that sysfs
 * reports for CPU 0. Unknown values are left empty or zero, never guessed.
 */
#ifndef HOTPATH_HOSTINFO_H
#define HOTPATH_HOSTINFO_H

#include <stdint.h>
#include <stddef.h>

struct hp_cache_geometry {
	uint32_t size_bytes;
	uint32_t line_bytes;
	uint32_t ways;
};

struct hp_hostinfo {
	char host_id[128];
	char hostname[256];
	char release[128];
	char build_id[65]; /* lower-case hex, "" if the kernel has none */
	char cpu_model[256];
	uint32_t cpu_count; /* online CPUs */
	struct hp_cache_geometry l1i;
};

/* Fill *hi; host_id_override (may be NULL) replaces /etc/machine-id.
 * Returns 0, or a negative errno with a reason in err. */
int hp_hostinfo_collect(struct hp_hostinfo *hi, const char *host_id_override, char *err, size_t errlen);

/* Parse the GNU build id out of an ELF note section image (as in
 * /sys/kernel/notes). Returns 0 and writes hex into out, or -ENOENT. */
int hp_parse_build_id_notes(const uint8_t *buf, size_t len, char *out, size_t outlen);

/* The GNU build id in a file of ELF notes (/sys/kernel/notes, a loaded
 * module's /sys/module/NAME/notes/.note.gnu.build-id), as hex; "" if the
 * file cannot be read or has none. */
void hp_notes_file_build_id(const char *path, char *out, size_t outlen);

/* The running kernel's GNU build id from /sys/kernel/notes, as hex; "" if it has none. */
void hp_kernel_build_id(char *out, size_t outlen);

/* Online CPU numbers from /sys/devices/system/cpu/online; returns the count
 * (at most max) or a negative errno. */
int hp_online_cpus(int *cpus, int max);

#endif
