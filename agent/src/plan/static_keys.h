/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Jump-label sites in copies (kernel). The kernel patches the sites of a
 * static key where its jump table says they are, so a copy of a site would
 * keep the state it had when copied. The emitter writes each site of a copy
 * as a read of its key instead: "cmp dword [rip + key], 0" on the key's
 * enabled count (struct static_key's first field), then a jcc that goes to
 * the site's target when the kernel would have the site jump there (count
 * != 0 for an entry without the branch bit, == 0 with it), else falls
 * through; the layout may invert it like any jcc. The compare changes the
 * status flags, which is sound only where none is live after the site:
 * checked per site (hp_plan_key_sites_rule), not assumed. Static call sites are
 * not handled here (their functions stay in place).
 */
#ifndef HOTPATH_PLAN_STATIC_KEYS_H
#define HOTPATH_PLAN_STATIC_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "target/static_branch.h"

/* Bytes of the key read (cmp dword [rip + disp32], imm8 0). */
#define HP_KEY_READ_LEN 7

/* The jump-label entry whose site is at addr in a kernel model, or NULL. */
const struct hp_static_branch *hp_key_site(struct hp_model *m, uint64_t addr);

/* The jump-label entries whose sites lie in [lo, hi): their count, the
 * first in *first (consecutive, sorted by site). */
size_t hp_key_sites_in(struct hp_model *m, uint64_t lo, uint64_t hi, const struct hp_static_branch **first);

/* The condition (x86 jcc number) that takes a site's JMP side after the key
 * read: ne (5) without the branch bit, e (4) with it. */
static inline int hp_key_site_cond(const struct hp_static_branch *s)
{
	return s->branch ? 4 : 5;
}

/* hp_plan_key_sites_rule (plan.h) is defined in static_keys.c. */

#endif
