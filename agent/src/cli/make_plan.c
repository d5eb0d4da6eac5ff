// SPDX-License-Identifier: Apache-2.0
/*
 * `hotpathd plan`: a code positioning plan for a root function of the
 * kernel, a process or an ELF file, from a profile (measure JSON or a saved
 * profile, several merged with weights) or from PC samples taken now.
 * The report, text or JSON, is the plan layer's (plan/plan_json.h): the
 * daemon answers MakePlan with the same bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/grow.h"
#include "cli/commands.h"
#include "measure/sampler.h"
#include "plan/icall_values.h"
#include "plan/plan.h"
#include "plan/plan_json.h"
#include "plan/profile.h"
#include "plan/profile_measured.h"
#include "replace/install.h"
#include "host/processes.h"
#include "host/procmaps.h"
#include "target/target.h"
#include "target/target_elf.h"

/* A --profile argument FILE[:W]: FILE into path, and W (1 when none). */
static double profile_path(const char *arg, char *path, size_t len)
{
	char *colon, *e;
	double d;

	snprintf(path, len, "%s", arg);
	colon = strrchr(path, ':');
	if (!colon || !colon[1])
		return 1;
	d = strtod(colon + 1, &e);
	if (*e || d <= 0)
		return 1;
	*colon = 0;
	return d;
}

static const char plan_usage[] =
	"usage: hotpathd plan kernel ROOT [options]\n"
	"       hotpathd plan pid PID ROOT [options]\n"
	"       hotpathd plan elf PATH ROOT [options]\n"
	"       hotpathd plan pid PID --hot-set (--sample SECONDS | --profile FILE) [options]\n"
	"\n"
	"Plan the re-layout of ROOT and its hot callees (KernInst's code positioning):\n"
	"group, hot/cold splitting, basic-block chains, call-affinity order, fetch-block\n"
	"alignment; the L1i footprint before and after; the emitted x86-64 code, decoded\n"
	"again and verified to be the original CFGs re-laid-out. Nothing is installed.\n"
	"\n"
	"counts:\n"
	"  --profile FILE[:W]   block (and edge) counts: `hotpathd measure --json` output,\n"
	"                       a saved profile, or a plan's JSON; repeat to merge several\n"
	"                       workloads, each normalised then weighted by W (default 1)\n"
	"  --sample SECONDS     kernel, or a process's threads: sample PCs now and estimate\n"
	"                       block counts (samples per block / its instructions)\n"
	"  --hz N               samples per second per CPU, or per thread of a process\n"
	"                       (default 997; 9973 for a process: a block that runs is\n"
	"                       then less often left without a sample, and so cold)\n"
	"whole hot set (no ROOT):\n"
	"  --hot-set            plan every function of the smallest set covering --share of\n"
	"                       the profile's work (at most --max-functions, default %u\n"
	"                       here); shared callees are copied; C3 function order\n"
	"  --share F            the share of the work the hot set covers (default 1: every\n"
	"                       function that ran)\n"
	"  --cold-rate N        a member's block that ran fewer than N times per billion\n"
	"                       instructions of the work is cold (default 100; 0: every\n"
	"                       block that ran is hot)\n"
	"  --module NAME        the module whose hot set (path, or its end); default: the\n"
	"                       module with the most work in the profile\n"
	"  --resident FILE      a profile (as --profile reads) of more hot code that stays in\n"
	"                       place, e.g. the samples a hot set was chosen from: the copy\n"
	"                       starts where in its page its hot lines share the fewest\n"
	"                       L1i sets with that code's (and the profile's non-members');\n"
	"                       a plan's JSON gives its resident code too (other libraries')\n"
	"indirect-call promotion:\n"
	"  --icall-targets FILE the targets measured at indirect call sites of an installed\n"
	"                       copy (`hotpathd icalls --json`): a site whose most frequent\n"
	"                       target is a member taking at least --promote-share of its\n"
	"                       calls calls that member's copy directly when the pointer\n"
	"                       holds its original entry (the call as it was otherwise)\n"
	"  --promote-share F    (default 0.75)\n"
	"second pass (re-plan an installed group from calls under its root):\n"
	"  --second-pass PLAN   PLAN is the installed plan's JSON; it is made again from its\n"
	"                       saved inputs and must match. --profile then gives counts\n"
	"                       measured at its copy's block starts, which only the root's\n"
	"                       copy reaches; the new plan uses PLAN's options\n"
	"  --installed-base A   where the copy runs (default: PLAN's base)\n"
	"  --state-dir DIR      pid targets: installed copies' journals (default\n"
	"                       /var/lib/hotpathd); the process's code is read as it was\n"
	"                       before their patches\n"
	"thresholds and geometry:\n"
	"  --join F             a callee joins when one of its blocks ran more than F times\n"
	"                       the root's calls (default 0.05)\n"
	"  --min-share F        ... and (exact counts) when at least F of its calls come\n"
	"                       from the group; a callee shared with callers outside stays\n"
	"                       in place, as its copy would double its I-cache footprint\n"
	"                       (default 0.5; 0 copies shared callees too)\n"
	"  --stall F            I-cache stall/CPU ratio that makes a bottleneck (0.10)\n"
	"  --l1i SIZE,WAYS,LINE L1i geometry in bytes (default: the host's, from sysfs)\n"
	"  --block-layout L     each member's hot blocks: pettis-hansen (chains along the\n"
	"                       heaviest edges, FDPR's rules), ext-tsp (merges that score\n"
	"                       fallthroughs and short jumps), or auto (default): whichever\n"
	"                       leaves fewer taken branches by the member's edge counts\n"
	"  --fetch N            fetch block bytes for alignment (16)\n"
	"  --max-pad N          most padding before one aligned block (7)\n"
	"  --no-align           no alignment padding\n"
	"  --max-functions N    group size bound (64; hot sets: %u)\n"
	"  --base ADDR          lay the code out at ADDR (default: a page past the root's module; for the\n"
	"                       kernel, 2 MiB past the highest loaded module)\n"
	"output:\n"
	"  --json               one JSON object (format in docs/agent-cli.md)\n"
	"  --code FILE          write the emitted code's bytes to FILE\n"
	"\n"
	"exit status: 0 plan made and verified, 1 error or verification failed, 2 usage,\n"
	"             3 ROOT not found, 4 no plan (no counts, root not hot, root cannot move)\n";

/* The whole of a file, for JSON inputs. */
static int read_text(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	size_t cap = 65536, n;
	char *buf = malloc(cap);

	*out = NULL;
	*len = 0;
	if (!fp || !buf) {
		snprintf(err, errlen, "cannot read %s: %s", path, fp ? "out of memory" : strerror(errno));
		if (fp)
			fclose(fp);
		free(buf);
		return -1;
	}
	while ((n = fread(buf + *len, 1, cap - *len, fp)) > 0) {
		*len += n;
		if (*len == cap && (cap >= (256u << 20) || HP_GROW(buf, cap, cap + 1))) {
			snprintf(err, errlen, "%s is too large", path);
			free(buf);
			fclose(fp);
			return -1;
		}
	}
	fclose(fp);
	*out = buf;
	return 0;
}

int cmd_plan(int argc, char **argv)
{
	const char *pos[3], *profiles[16], *code_path = NULL, *second = NULL, *state_dir = "/var/lib/hotpathd";
	uint64_t installed_base = 0, *counted = NULL; /* what the profiles count (a kernel ROOT's open) */
	size_t ncounted = 0, cap_counted = 0;
	struct hp_plan first = { 0 };
	struct hp_profile first_prof = { 0 };
	char *text = NULL;
	size_t tlen = 0;
	int npos = 0, nprof = 0, i, need, rc = HP_EXIT_ERROR, plan_pid = 0;
	unsigned sample_secs = 0, hz = 0;
	bool json = false, max_given = false;
	struct hp_plan_opts o;
	struct hp_model *m = NULL;
	struct hp_profile prof[16], merged = { 0 }, resident = { 0 };
	const char *resident_path = NULL, *icalls_path = NULL;
	struct hp_icall_values icv = { 0 };
	struct hp_plan plan = { 0 };
	char err[512];

	hp_plan_opts_default(&o);
	memset(prof, 0, sizeof(prof));
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		unsigned u;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fprintf(stdout, plan_usage, HP_HOT_SET_MAX_FUNCTIONS, HP_HOT_SET_MAX_FUNCTIONS);
			return HP_EXIT_OK;
		} else if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--no-align")) {
			o.no_align = true;
		} else if (!strcmp(a, "--hot-set")) {
			o.hot_set = true;
		} else if (!v && a[0] == '-' && a[1]) {
			fprintf(stderr, "hotpathd plan: %s needs a value (see 'hotpathd plan --help')\n", a);
			return HP_EXIT_USAGE;
		} else if (!strcmp(a, "--profile")) {
			if (nprof == 16) {
				fprintf(stderr, "hotpathd plan: at most 16 profiles\n");
				return HP_EXIT_USAGE;
			}
			profiles[nprof++] = argv[++i];
		} else if (!strcmp(a, "--sample") && hp_parse_uint(v, 1, 3600, &sample_secs) == 0) {
			i++;
		} else if (!strcmp(a, "--hz") && hp_parse_uint(v, 1, 100000, &hz) == 0) {
			i++;
		} else if (!strcmp(a, "--join") || !strcmp(a, "--stall") || !strcmp(a, "--min-share") ||
			   !strcmp(a, "--share") || !strcmp(a, "--promote-share")) {
			char *e;
			double d = strtod(v, &e);
			if (*e || d < 0 || d > 1) {
				fprintf(stderr, "hotpathd plan: %s needs a fraction from 0 to 1\n", a);
				return HP_EXIT_USAGE;
			}
			*(!strcmp(a, "--join")          ? &o.join_fraction :
			  !strcmp(a, "--min-share")     ? &o.min_caller_share :
			  !strcmp(a, "--share")         ? &o.hot_share :
			  !strcmp(a, "--promote-share") ? &o.promote_share :
							  &o.stall_threshold) = d;
			i++;
		} else if (!strcmp(a, "--cold-rate")) {
			char *e;
			double d = strtod(v, &e);
			if (*e || !(d >= 0) || d > 1e9) {
				fprintf(stderr,
					"hotpathd plan: --cold-rate needs a number of times per billion "
					"instructions (0 to 1e9)\n");
				return HP_EXIT_USAGE;
			}
			o.cold_rate = d;
			i++;
		} else if (!strcmp(a, "--l1i")) {
			unsigned sz, wy, ln;
			if (sscanf(v, "%u,%u,%u", &sz, &wy, &ln) != 3 || !sz || !wy || !ln || sz % (wy * ln) ||
			    (ln & (ln - 1))) {
				fprintf(stderr, "hotpathd plan: --l1i needs SIZE,WAYS,LINE (e.g. 32768,8,64)\n");
				return HP_EXIT_USAGE;
			}
			o.l1i = (struct hp_cache_geometry){ sz, ln, wy };
			i++;
		} else if (!strcmp(a, "--fetch") && hp_parse_uint(v, 1, 4096, &u) == 0 && !(u & (u - 1))) {
			o.fetch_block = u;
			i++;
		} else if (!strcmp(a, "--max-pad") && hp_parse_uint(v, 0, 63, &u) == 0) {
			o.max_pad = u;
			i++;
		} else if (!strcmp(a, "--block-layout") && hp_block_layout_parse(v) >= 0) {
			o.block_layout = (enum hp_block_layout)hp_block_layout_parse(v);
			i++;
		} else if (!strcmp(a, "--max-functions") && hp_parse_uint(v, 1, 4096, &u) == 0) {
			o.max_functions = u;
			max_given = true;
			i++;
		} else if (!strcmp(a, "--base")) {
			char *e;
			o.base = strtoull(v, &e, 0);
			if (*e || !o.base) {
				fprintf(stderr, "hotpathd plan: --base needs an address\n");
				return HP_EXIT_USAGE;
			}
			i++;
		} else if (!strcmp(a, "--module")) {
			o.hot_module = argv[++i];
		} else if (!strcmp(a, "--resident")) {
			resident_path = argv[++i];
		} else if (!strcmp(a, "--icall-targets")) {
			icalls_path = argv[++i];
		} else if (!strcmp(a, "--code")) {
			code_path = argv[++i];
		} else if (!strcmp(a, "--second-pass")) {
			second = argv[++i];
		} else if (!strcmp(a, "--state-dir")) {
			state_dir = argv[++i];
		} else if (!strcmp(a, "--installed-base")) {
			char *e;
			installed_base = strtoull(v, &e, 0);
			if (*e || !installed_base) {
				fprintf(stderr, "hotpathd plan: --installed-base needs an address\n");
				return HP_EXIT_USAGE;
			}
			i++;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "hotpathd plan: bad option or value '%s' (see 'hotpathd plan --help')\n", a);
			return HP_EXIT_USAGE;
		} else if (npos < 3) {
			pos[npos++] = a;
		} else {
			fprintf(stderr, "hotpathd plan: too many arguments\n");
			return HP_EXIT_USAGE;
		}
	}
	if (npos < 1) {
		fprintf(stderr, plan_usage, HP_HOT_SET_MAX_FUNCTIONS, HP_HOT_SET_MAX_FUNCTIONS);
		return HP_EXIT_USAGE;
	}
	need = !strcmp(pos[0], "kernel") ? 2 : (!strcmp(pos[0], "elf") || !strcmp(pos[0], "pid")) ? 3 : 0;
	if (need && o.hot_set)
		need--; /* no ROOT */
	if (!need || npos != need) {
		fprintf(stderr,
			"hotpathd plan: expected kernel ROOT, pid PID ROOT or elf PATH ROOT (with "
			"--hot-set: no ROOT)\n");
		return HP_EXIT_USAGE;
	}
	if (o.hot_set && second) {
		fprintf(stderr, "hotpathd plan: --second-pass re-plans a root's group, not a hot set\n");
		return HP_EXIT_USAGE;
	}
	if (o.hot_set && !max_given)
		o.max_functions = HP_HOT_SET_MAX_FUNCTIONS;
	if (second && (nprof != 1 || sample_secs)) {
		fprintf(stderr, "hotpathd plan: --second-pass takes exactly one --profile: the counts on the copy\n");
		return HP_EXIT_USAGE;
	}
	bool kernel = !strcmp(pos[0], "kernel");
	if (sample_secs && !kernel && strcmp(pos[0], "pid")) {
		fprintf(stderr, "hotpathd plan: --sample is for the kernel and processes; give --profile for files\n");
		return HP_EXIT_USAGE;
	}
	struct hp_open_opts oo = { .quiet = true };
	/* A kernel ROOT planned from profiles: only ROOT and the functions
	 * the profiles count are parsed, with what decides their blocks (as
	 * inspect by name), since a group grows only by callees the profiles
	 * count; a profile this model cannot read (a function it counts not
	 * parsed, stale counts) brings the whole kernel's parse, and the
	 * profiles are read again. */
	bool just_root = kernel && !o.hot_set && !sample_secs && !second && !resident_path && !icalls_path && nprof;
	int r;
	for (i = 0; just_root && i < nprof; i++) {
		char path[4096];
		uint64_t *v;
		size_t n;
		profile_path(profiles[i], path, sizeof(path));
		if (hp_profile_read_addresses(path, &v, &n, err, sizeof(err)) < 0)
			continue; /* reported when read below */
		if (n && HP_GROW(counted, cap_counted, ncounted + n) == 0) {
			memcpy(counted + ncounted, v, n * sizeof(*v));
			ncounted += n;
		}
		free(v);
	}
reopen:
	oo.only_function = just_root ? pos[need - 1] : NULL;
	oo.only_addresses = just_root ? counted : NULL;
	oo.nonly_addresses = just_root ? ncounted : 0;
	if (kernel)
		r = hp_model_open_kernel(&oo, &m, err, sizeof(err));
	else if (!strcmp(pos[0], "elf"))
		r = hp_model_open_elf(pos[1], &oo, &m, err, sizeof(err));
	else {
		unsigned pid;
		if (hp_parse_uint(pos[1], 1, 0x7fffffff, &pid) < 0) {
			fprintf(stderr, "hotpathd plan: PID must be a positive number\n");
			return HP_EXIT_USAGE;
		}
		plan_pid = (int)pid;
		/* The code as planned: the original bytes under installed copies' patches. */
		r = hp_model_open_pid_unpatched(state_dir, (int)pid, &oo, &m, err, sizeof(err));
	}
	if (r < 0) {
		fprintf(stderr, "hotpathd plan: %s\n", err);
		return HP_EXIT_ERROR;
	}
	const struct hp_module *mod = NULL;
	bool amb = false;
	const struct hp_function *root = o.hot_set ? NULL : hp_model_find(m, pos[need - 1], &mod, &amb);
	if (!root && !o.hot_set) {
		fprintf(stderr, "hotpathd plan: %s: %s\n", pos[need - 1],
			amb ? "ambiguous name (use module:name)" : "no such function");
		rc = HP_EXIT_NOT_FOUND;
		goto out;
	}
	const struct hp_profile *use = NULL;
	if (second) {
		/* The installed plan, made again; then the copy's counts mapped back. */
		if (read_text(second, &text, &tlen, err, sizeof(err)) < 0 ||
		    hp_plan_remake(m, text, tlen, &first_prof, &first, err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		if (first.members[0].fn != root) {
			fprintf(stderr, "hotpathd plan: the installed plan's root is %s, not %s\n",
				first.members[0].fn->name, root->name);
			rc = HP_EXIT_USAGE;
			goto out;
		}
		free(text);
		text = NULL;
		if (read_text(profiles[0], &text, &tlen, err, sizeof(err)) < 0 ||
		    hp_profile_under_root(&first, installed_base ? installed_base : first.base, text, tlen, &prof[0],
					  err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		uint64_t base = o.base;
		o = first.opts;
		o.base = base;
		nprof = 0;
		use = &prof[0];
	}
	for (i = 0; i < nprof; i++) {
		char path[4096];
		double wgt = profile_path(profiles[i], path, sizeof(path));
		bool got = hp_profile_read(path, m, &prof[i], err, sizeof(err)) == 0;
		if (!got && !just_root) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		prof[i].weight = wgt;
		bool parsed = just_root && got && prof[i].nfns > 0; /* every function it counts parsed */
		for (size_t k = 0; parsed && k < prof[i].nfns; k++) {
			const struct hp_function *f = hp_model_lookup(m, prof[i].fns[k].addr, NULL);
			parsed = f && f->nblocks > 0;
		}
		if (just_root && !parsed) {
			for (i = 0; i < 16; i++)
				hp_profile_free(&prof[i]);
			hp_model_free(m);
			m = NULL;
			just_root = false;
			goto reopen;
		}
	}
	if (sample_secs) {
		if (hp_profile_sample(m, plan_pid, sample_secs,
				      hz       ? hz :
				      plan_pid ? HP_PROCESS_SAMPLE_HZ :
						 997,
				      NULL, NULL, &prof[0], err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		nprof = 1;
	}
	if (resident_path) {
		if (hp_profile_read_resident(resident_path, m, &resident, err, sizeof(err)) < 0) {
			fprintf(stderr, "hotpathd plan: %s\n", err);
			goto out;
		}
		o.resident = &resident;
	}
	if (icalls_path) {
		char *vt = NULL;
		size_t vlen = 0;
		int vr = read_text(icalls_path, &vt, &vlen, err, sizeof(err));
		if (vr == 0)
			vr = hp_icall_values_parse(vt, vlen, &icv, err, sizeof(err));
		free(vt);
		if (vr < 0) {
			fprintf(stderr, "hotpathd plan: %s: %s\n", icalls_path, err);
			goto out;
		}
		o.icall_values = &icv;
	}
	if (nprof == 1)
		use = &prof[0];
	else if (nprof > 1) {
		if (hp_profile_merge(prof, (size_t)nprof, &merged) < 0) {
			fprintf(stderr,
				"hotpathd plan: the profiles cannot be merged (out of memory, or their scopes "
				"differ)\n");
			goto out;
		}
		use = &merged;
	}
	if (hp_plan_make(m, root, mod, use, &o, &plan, err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd plan: %s\n", err);
		goto out;
	}
	if (o.hot_set && plan.nmembers)
		root = plan.members[0].fn; /* the first laid out names the plan */
	hp_plan_report(stdout, json, m, &plan, root, plan_pid);
	if (code_path && plan.code) {
		FILE *fp = fopen(code_path, "wb");
		if (!fp || fwrite(plan.code, 1, plan.code_len, fp) != plan.code_len) {
			fprintf(stderr, "hotpathd plan: cannot write %s: %s\n", code_path, strerror(errno));
			if (fp)
				fclose(fp);
			goto out;
		}
		fclose(fp);
	}
	rc = plan.status == HP_PLAN_OK ? HP_EXIT_OK : plan.status == HP_PLAN_REFUSED ? HP_EXIT_ERROR : 4;
out:
	free(counted);
	free(text);
	hp_plan_free(&first);
	hp_profile_free(&first_prof);
	hp_plan_free(&plan);
	for (i = 0; i < 16; i++)
		hp_profile_free(&prof[i]);
	hp_profile_free(&merged);
	hp_profile_free(&resident);
	hp_icall_values_free(&icv);
	hp_model_free(m);
	return rc;
}
