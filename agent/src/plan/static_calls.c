// SPDX-License-Identifier: Apache-2.0
/*
 * Static call sites in copies (static_calls.h): the site lookup in the
 * kernel facts and the rule that keeps a function whose sites a copy could
 * not follow.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "plan/static_calls.h"
#include "target/target.h"

const struct hp_static_call *hp_call_site(struct hp_model *m, uint64_t addr)
{
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	size_t n = kf ? kf->ncall_entries : 0,
	       i = n ? hp_sites_from(kf->call_entries, n, sizeof(*kf->call_entries), addr) : 0;

	return i < n && kf->call_entries[i].code == addr ? &kf->call_entries[i] : NULL;
}

size_t hp_call_sites_in(struct hp_model *m, uint64_t lo, uint64_t hi, const struct hp_static_call **first)
{
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	size_t n = kf ? kf->ncall_entries : 0;
	size_t i = n ? hp_sites_from(kf->call_entries, n, sizeof(*kf->call_entries), lo) : 0;
	size_t j = n ? hp_sites_from(kf->call_entries, n, sizeof(*kf->call_entries), hi) : 0;

	*first = j > i ? &kf->call_entries[i] : NULL;
	return j - i;
}

/* Did the parse put the site at addr in canonical form (facts.static_calls)? */
static bool canonical(const struct hp_kernel_facts *kf, uint64_t addr)
{
	size_t lo = 0, hi = kf->nstatic_calls;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (kf->static_calls[mid] < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < kf->nstatic_calls && kf->static_calls[lo] == addr;
}

const struct hp_static_call *hp_call_site_movable(struct hp_model *m, uint64_t addr)
{
	const struct hp_static_call *s = hp_call_site(m, addr);

	return s && !s->trampoline && s->tramp && canonical(hp_kernel_facts(m), addr) ? s : NULL;
}

const char *hp_plan_call_sites_rule(struct hp_model *m, const struct hp_function *f, char *detail, size_t dlen)
{
	const struct hp_kernel_facts *kf = hp_kernel_facts(m);
	const struct hp_static_call *s;
	size_t n = hp_call_sites_in(m, f->addr, f->addr + f->size, &s);

	for (size_t k = 0; k < n; k++) {
		uint32_t off = (uint32_t)(s[k].code - f->addr);
		snprintf(detail, dlen, "the site at +0x%x", off);
		if (s[k].trampoline)
			return "static call trampoline: the kernel rewrites its jump when the call is updated (copies of "
			       "the call sites call it where it is)";
		if (!canonical(kf, s[k].code))
			return "static call site in a form the agent does not rewrite (neither a call, a jump, a NOP nor "
			       "a zeroing of eax): a copy would keep it as it is";
		if (!s[k].tramp) {
			snprintf(detail, dlen, "the site at +0x%x, its key at 0x%" PRIx64, off, s[k].key);
			return "static call site whose trampoline is not known: /proc/kallsyms names no __SCK__ key "
			       "with an __SCT__ trampoline of its name there (keys are data: listed only with "
			       "CONFIG_KALLSYMS_ALL), and a copy must call the trampoline to follow the call's updates";
		}
	}
	detail[0] = 0;
	return NULL;
}
