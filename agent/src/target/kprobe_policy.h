/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which kernel functions a measurement may probe, and with what: fentry and
 * fexit need an ftrace site (the function is not notrace) and BTF for the
 * function; kprobes need code outside the kernel's kprobe blacklist (entry
 * and noinstr text, __kprobes text, NOKPROBE_SYMBOL functions). Answers come
 * from the kernel's own lists where it exposes them (tracefs
 * available_filter_functions, debugfs kprobes/blacklist), else from what the
 * kernel is built from: the section markers in /proc/kallsyms and the
 * function's first bytes (every traceable function starts with its 5-byte
 * ftrace site, optionally after endbr64).
 */
#ifndef HOTPATH_KPROBE_POLICY_H
#define HOTPATH_KPROBE_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "model/model.h"

struct hp_kprobe_policy;

struct hp_kfunc_rules {
	bool ftrace_site;        /* fentry/fexit may attach (has an ftrace site) */
	bool btf;                /* the kernel's BTF describes it (fentry/fexit need it) */
	bool kprobe_ok;          /* kprobes may be placed in it */
	char no_trampoline[192]; /* why fentry/fexit cannot attach, "" if they can */
	char no_kprobe[192];     /* why kprobes cannot be placed, "" if they can */
};

/* Read the kernel's lists once for the live kernel model m. NULL only when out of memory. */
struct hp_kprobe_policy *hp_kprobe_policy_open(struct hp_model *m);
void hp_kprobe_policy_check(struct hp_kprobe_policy *p, const struct hp_module *mod, const struct hp_function *f,
			    struct hp_kfunc_rules *out);
void hp_kprobe_policy_free(struct hp_kprobe_policy *p);

#endif
