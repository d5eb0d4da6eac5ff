/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The symbols the kernel target (kernel_target.c) takes from /proc/kallsyms:
 * vmlinux's _text and __fentry__, and each loaded module's lowest text symbol
 * (where the model's kallsyms.c places the module). Under emulation one read
 * of /proc/kallsyms takes seconds, and an install asked for these on each of
 * its steps, so a process reads it once and keeps what it needs: vmlinux's
 * addresses for its life (they are fixed for the boot), the modules' while
 * /proc/modules lists the same modules in the same state at the same
 * addresses (a load, an unload or a reload elsewhere changes it; the reference
 * counts it also lists do not count). Whatever a base is used for is checked
 * against the plan's bytes anyway (install_engine.c's digests).
 */
#ifndef HOTPATH_KERNEL_SYMS_H
#define HOTPATH_KERNEL_SYMS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct hp_ksyms_mod {
	char name[64]; /* the module's name (MODULE_NAME_LEN is 56) */
	uint64_t lo;   /* its lowest text (t/T) symbol */
};

struct hp_ksyms_view {
	uint64_t text, fentry; /* vmlinux's _text and __fentry__ (0: not listed) */
	struct hp_ksyms_mod *mods;
	size_t nmods, cap;
};

/* Read a /proc/kallsyms stream into v (emptied first). Lines it cannot parse
 * and zero addresses are skipped. 0, or -ENOMEM. */
int hp_ksyms_view_read(struct hp_ksyms_view *v, FILE *fp);
/* Module name's lowest text symbol in v; 0 when v lists none. */
uint64_t hp_ksyms_view_module(const struct hp_ksyms_view *v, const char *name);
void hp_ksyms_view_free(struct hp_ksyms_view *v);

/* /proc/modules as a key (fp's lines as "name size state address", without
 * the reference counts and users): *key is malloc'd. 0, or -ENOMEM. */
int hp_ksyms_modules_key(FILE *fp, char **key);

/* Module name's extent in a /proc/modules stream: its address and size (the
 * module's core allocation: its text and data on 6.1). 0, or -ENOENT when fp
 * lists no such module with an address. */
int hp_ksyms_modules_span(FILE *fp, const char *name, uint64_t *addr, uint64_t *size);
/* The same of the live kernel's /proc/modules. */
int hp_ksyms_live_module_span(const char *name, uint64_t *addr, uint64_t *size);

/* The live kernel's, from this process's view (read again when the modules'
 * key changed). 0 when /proc/kallsyms lists no such symbol or is unreadable. */
uint64_t hp_ksyms_live_text(void);
uint64_t hp_ksyms_live_fentry(void);
uint64_t hp_ksyms_live_module(const char *name);
/* How many times this process read /proc/kallsyms for its view (tests). */
unsigned hp_ksyms_live_reads(void);

#endif
