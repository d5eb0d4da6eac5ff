/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Static call sites in copies (kernel). The kernel rewrites a static call's
 * sites where its .static_call_sites table says they are, so a copy of a
 * site would keep calling what the call was set to when copied. The emitter
 * writes each site of a copy as a call of the static call's trampoline
 * (__SCT__name) instead, a tail-call site as a jump to it: the kernel
 * repoints the trampoline first whenever the call is updated (or makes it a
 * return when set to nothing), so the copy calls whatever the original's
 * sites call. The site table gives the site's struct static_call_key; the
 * trampoline is the text symbol of the key's name (kallsyms). A function
 * keeps its place where a site's trampoline is not known, where a site was
 * in no form the agent recognizes, and a trampoline itself.
 */
#ifndef HOTPATH_PLAN_STATIC_CALLS_H
#define HOTPATH_PLAN_STATIC_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "target/static_branch.h"

/* The static call site (or trampoline) entry at addr in a kernel model, or NULL. */
const struct hp_static_call *hp_call_site(struct hp_model *m, uint64_t addr);

/* The static call entries whose sites lie in [lo, hi): their count, the
 * first in *first (consecutive, sorted by site). */
size_t hp_call_sites_in(struct hp_model *m, uint64_t lo, uint64_t hi, const struct hp_static_call **first);

/* A site the emitter writes as a call (or jump) of its trampoline: a call
 * site, not a trampoline, put in canonical form by the parse, whose
 * trampoline is known. NULL otherwise. */
const struct hp_static_call *hp_call_site_movable(struct hp_model *m, uint64_t addr);

/* Why f must keep its place for its static call sites, or NULL (detail gets
 * the site): it is a trampoline, or a site of it was in no recognized form,
 * or a site's trampoline is not known. */
const char *hp_plan_call_sites_rule(struct hp_model *m, const struct hp_function *f, char *detail, size_t dlen);

#endif
