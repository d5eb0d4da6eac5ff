// SPDX-License-Identifier: Apache-2.0
/*
 * `hotpathd install`, `hotpathd revert` and `hotpathd installed`: a plan's
 * code into a running process and out again, and what is installed, from
 * the journals in the state folder. Text and JSON come from the same
 * values; progress goes to stderr.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "host/processes.h"
#include "replace/install.h"
#include "replace/install_json.h"
#include "replace/patch_target.h"
#include "target/target.h"

#define DEFAULT_STATE "/var/lib/hotpathd"

enum { EXIT_GONE = 3, EXIT_STATE = 4, EXIT_REFUSED = 5 };

static const char install_usage[] =
	"usage: hotpathd install PLAN_FILE [--pid PID] [options]\n"
	"\n"
	"Install a plan's code into the running process it was made for (KernInst's code\n"
	"replacement): every thread is stopped with ptrace, a code heap is mapped within\n"
	"+-2 GiB of the code, the copy is written re-based to it with its unwind data\n"
	"registered, the root's entry is spliced to jump to the copy and the root's direct\n"
	"call sites are made to call it. Every change is journaled (fsync'd) in the state\n"
	"folder with the original bytes before it is made; a failed install is undone.\n"
	"PLAN_FILE is `hotpathd plan pid PID ROOT ... --json` output. The plan is refused\n"
	"when its code does not hash to its code.sha256 (altered), when the binary or the\n"
	"code it was made from changed (build id, original bytes), or when the process\n"
	"that was planned exited.\n"
	"\n"
	"options:\n"
	"  --pid PID             install into PID (same binary, same build) instead of the\n"
	"                        plan's process\n"
	"  --approved-hash HEX   refuse unless the plan's code hash is HEX (the approval)\n"
	"  --no-call-sites       splice the entry only; leave call sites calling it\n"
	"  --replace             the root is installed already: revert it, then install\n"
	"                        this plan (a second pass)\n"
	"  --state-dir DIR       journals and installed plans (default " DEFAULT_STATE
	")\n"
	"  --cycles N            install and revert N times (1-1000000) in this process,\n"
	"                        then exit with nothing installed: the target's model is\n"
	"                        opened once; every cycle is a whole install (journal\n"
	"                        first) and a whole revert (call sites, entries, heap),\n"
	"                        after which every byte the install wrote must read as\n"
	"                        its original and every copied function as planned. A\n"
	"                        line per cycle (its install, call sites and revert\n"
	"                        times), then the averages. SIGTERM or SIGINT ends the\n"
	"                        loop after the cycle in progress (reverted)\n"
	"  --check CMD           with --cycles: run `sh -c CMD` while installed and\n"
	"                        again once reverted, with HOTPATH_CYCLE,\n"
	"                        HOTPATH_INSTALLED (1 or 0), HOTPATH_HEAP,\n"
	"                        HOTPATH_HEAP_BYTES and HOTPATH_CALL_SITES set; its\n"
	"                        stdout goes to stderr; a non-zero exit makes the\n"
	"                        cycle wrong\n"
	"  --json                one JSON object on stdout (with --cycles: one per\n"
	"                        cycle, then the summary)\n"
	"  --quiet               no progress on stderr\n"
	"\n"
	"A kernel plan (`hotpathd plan kernel ROOT --json`) installs through hotpath.ko's\n"
	"/dev/hotpath (load agent/kmod's module first): the code heap is the module's,\n"
	"the entry is redirected through ftrace, and the direct call sites of the copied\n"
	"functions anywhere in kernel text (vmlinux and modules, found by parsing the\n"
	"running kernel) are made to call the copy through the kernel's text_poke_bp\n"
	"(--no-call-sites: the entry only).\n"
	"The module undoes everything when its user's /dev/hotpath closes, so the\n"
	"command stays running, holding the install, until SIGTERM or SIGINT, then\n"
	"reverts it and exits 0 (`hotpathd revert kernel` sends the SIGTERM); if it\n"
	"is killed, the module reverts it all the same.\n"
	"\n"
	"exit status: 0 installed (--cycles: every cycle right), 1 error (nothing left\n"
	"             changed; --cycles: also a wrong cycle), 2 usage, 3 no such\n"
	"             process (or it exited), 4 the root is installed already,\n"
	"             5 refused: plan altered, not approved, for another binary or\n"
	"             stale, ptrace refused, or hotpath.ko not loaded (kernel plans)\n";

static const char revert_usage[] =
	"usage: hotpathd revert pid PID [ROOT] [--state-dir DIR] [--json] [--quiet]\n"
	"       hotpathd revert kernel [ROOT] [--state-dir DIR] [--json] [--quiet]\n"
	"\n"
	"kernel: ask the process holding each kernel install (`hotpathd install` of a\n"
	"kernel plan) to revert it (SIGTERM) and wait until it has; an install whose\n"
	"holder died was reverted by hotpath.ko then, and only its journal is removed.\n"
	"\n"
	"Revert what is installed in process PID (only ROOT's group when given): call\n"
	"sites first, then the entry, so the copy stays reachable until the end; the\n"
	"code heap is unmapped once no thread's program counter or stack points into it\n"
	"(otherwise it stays mapped, and `hotpathd installed` says so; every later\n"
	"install and revert in the process asks again). Installs in one process revert\n"
	"in any order: bytes another install wrote over are left to it. Also finishes\n"
	"installs and reverts an agent left behind when it died, from their journals,\n"
	"and removes the journals of processes that exited.\n"
	"\n"
	"exit status: 0 reverted, 1 error, 2 usage, 4 nothing installed\n";

static const char installed_usage[] =
	"usage: hotpathd installed [--pid PID] [--state-dir DIR] [--json]\n"
	"\n"
	"List what the journals in the state folder say is installed: per install its\n"
	"process, root, code hash, code heap, entry and new entry, and its state:\n"
	"installed, installing or reverting (an agent died midway: `hotpathd revert`\n"
	"finishes it), heap_kept (reverted, but a thread could still be in the copy),\n"
	"process_gone. A kernel install names the process holding /dev/hotpath for\n"
	"it (`hotpathd install` of a kernel plan); process_gone there means that\n"
	"process died and hotpath.ko undid the install.\n";

struct progress {
	bool quiet;
	const char *kill_at; /* test hook: die at this step (HOTPATH_TEST_KILL_AT) */
	const char *verb;
};

static void on_step(void *ctx, enum hp_install_step s, const char *detail)
{
	struct progress *p = ctx;

	if (!p->quiet)
		fprintf(stderr, "hotpathd %s: %s%s%s\n", p->verb, hp_install_step_name(s), detail[0] ? ": " : "",
			detail);
	if (p->kill_at && !strcmp(p->kill_at, hp_install_step_name(s)))
		kill(getpid(), SIGKILL);
}

static int exit_for(int r)
{
	switch (r) {
	case -ESRCH:
		return EXIT_GONE;
	case -EEXIST:
		return EXIT_STATE;
	case -ESTALE:
	case -EBADMSG:
	case -EACCES:
	case -EPERM:
	case -EOPNOTSUPP:
		return EXIT_REFUSED;
	default:
		return HP_EXIT_ERROR;
	}
}

/* A kernel install, held: this process keeps /dev/hotpath open (closing
 * it would make hotpath.ko undo the install) until a signal in hold, then
 * reverts what it installed and exits. */
static int hold_kernel(const char *state, const sigset_t *hold, bool json, struct progress *pr)
{
	struct hp_install_result res;
	char err[1024];
	int sig = 0;

	if (!json)
		printf("holding /dev/hotpath as process %d: the install lasts while this process runs; SIGTERM "
		       "(`hotpathd revert kernel`) reverts it\n",
		       (int)getpid());
	fflush(stdout);
	sigwait(hold, &sig);
	pr->verb = "revert";
	int r = hp_revert(state, (int)getpid(), NULL, &res, on_step, pr, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "hotpathd install: reverting on signal %d: %s\n", sig, err);
		return exit_for(r);
	}
	if (!pr->quiet)
		fprintf(stderr, "hotpathd install: reverted on signal %d: entry restored in %.0f us, %.2f ms in all\n",
			sig, res.revert_entry_us, res.revert_total_ms);
	return HP_EXIT_OK;
}

/* `hotpathd revert kernel [ROOT]`: the processes holding kernel installs
 * are asked to revert them (SIGTERM) and waited for; journals of holders
 * that died are removed (hotpath.ko undid their installs). */
static int revert_kernel(const char *state, const char *root, bool json, struct progress *pr)
{
	struct hp_installed *ins;
	size_t n, done = 0;
	char err[1024];
	int rc = HP_EXIT_OK;

	if (hp_installed_list(state, &ins, &n, err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd revert: %s\n", err);
		return HP_EXIT_ERROR;
	}
	for (size_t i = 0; i < n; i++) {
		const struct hp_installed *h = &ins[i];
		if (strcmp(h->target, "kernel") || (root && strcmp(h->root, root)))
			continue;
		done++;
		if (hp_process_running(h->pid, h->start_time) && h->pid != (int)getpid()) {
			kill(h->pid, SIGTERM);
			/* Its revert waits for an RCU-tasks grace period: seconds under emulation. */
			for (int k = 0; k < 1200 && hp_process_running(h->pid, h->start_time); k++)
				usleep(50000);
			if (hp_process_running(h->pid, h->start_time)) {
				fprintf(stderr, "hotpathd revert: process %d holding %s did not exit within 60 s\n",
					h->pid, h->root);
				rc = HP_EXIT_ERROR;
				continue;
			}
		}
		/* The holder is gone: its journal is removed, if it is left. */
		struct hp_install_result res;
		if (access(h->journal, F_OK) == 0)
			hp_revert(state, h->pid, h->root, &res, on_step, pr, err, sizeof(err));
		if (!json)
			printf("reverted in the kernel: %s (held by process %d)\n", h->root, h->pid);
	}
	free(ins);
	if (json)
		printf("{\"status\":\"%s\",\"target\":\"kernel\",\"reverted\":%zu}\n",
		       done ? (rc ? "error" : "reverted") : "nothing_installed", done);
	if (!done) {
		fprintf(stderr, "hotpathd revert: nothing is installed in the kernel%s%s\n", root ? " named " : "",
			root ? root : "");
		return EXIT_STATE;
	}
	return rc;
}

/* --cycles: the check command, the signals that end the loop, and output. */
struct cycler {
	const char *check; /* sh -c CMD, or NULL */
	const sigset_t *hold;
	bool json;
};

static int cycle_check(void *ctx, const struct hp_cycle *c, bool installed, const struct hp_install_result *res,
		       char *why, size_t wl)
{
	struct cycler *cy = ctx;
	char v[32];
	int st;

	if (!cy->check)
		return 0;
	fflush(stdout);
	fflush(stderr);
	pid_t k = fork();
	if (k < 0) {
		snprintf(why, wl, "cannot fork the check: %s", strerror(errno));
		return 1;
	}
	if (k == 0) {
		sigprocmask(SIG_UNBLOCK, cy->hold, NULL);
		dup2(2, 1);
		snprintf(v, sizeof(v), "%u", c->n);
		setenv("HOTPATH_CYCLE", v, 1);
		setenv("HOTPATH_INSTALLED", installed ? "1" : "0", 1);
		snprintf(v, sizeof(v), "0x%" PRIx64, c->heap);
		setenv("HOTPATH_HEAP", v, 1);
		snprintf(v, sizeof(v), "%" PRIu64, c->heap_len);
		setenv("HOTPATH_HEAP_BYTES", v, 1);
		snprintf(v, sizeof(v), "%zu", c->call_sites);
		setenv("HOTPATH_CALL_SITES", v, 1);
		execl("/bin/sh", "sh", "-c", cy->check, (char *)NULL);
		_exit(127);
	}
	(void)res;
	while (waitpid(k, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	snprintf(why, wl, "the check (%s) %s %d %s", installed ? "installed" : "reverted",
		 WIFEXITED(st) ? "exited with status" : "was killed by signal",
		 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), installed ? "while installed" : "after the revert");
	return 1;
}

static bool cycle_stop(void *ctx)
{
	struct cycler *cy = ctx;
	sigset_t pend;

	if (sigpending(&pend) < 0)
		return false;
	for (int sig = 1; sig < NSIG; sig++)
		if (sigismember(cy->hold, sig) && sigismember(&pend, sig))
			return true;
	return false;
}

static const char *check_word(int c)
{
	return c < 0 ? "none" : c ? "failed" : "ok";
}

static void cycle_done(void *ctx, const struct hp_cycle *c)
{
	struct cycler *cy = ctx;

	if (cy->json) {
		json_t *o = json_pack(
			"{s:i, s:f, s:f, s:f, s:I, s:I, s:f, s:f, s:f, s:f, s:b, s:I, s:I, s:b, s:s, s:s, "
			"s:s}",
			"cycle", (int)c->n, "install_ms", c->install_ms, "check_ms", c->check_ms, "entry_us",
			c->entry_us, "entries", (json_int_t)c->entries, "call_sites", (json_int_t)c->call_sites,
			"calls_ms", c->calls_ms, "revert_ms", c->revert_ms, "revert_calls_ms", c->revert_calls_ms,
			"revert_entry_us", c->revert_entry_us, "heap_kept", c->heap_kept, "bytes_checked",
			(json_int_t)c->bytes_checked, "bytes_wrong", (json_int_t)c->bytes_wrong, "members_original",
			c->members_original, "check_installed", check_word(c->check_installed), "check_reverted",
			check_word(c->check_reverted), "wrong", c->why);
		char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
		if (t)
			printf("%s\n", t);
		free(t);
		json_decref(o);
	} else {
		printf("cycle %u: install %.2f ms (%zu entr%s, entry %.0f us; %zu call sites in %.3f ms), revert %.2f ms "
		       "(call sites %.3f ms, entry %.0f us), %zu/%zu written bytes restored, functions %s, check %s/%s%s%s\n",
		       c->n, c->install_ms, c->entries, c->entries == 1 ? "y" : "ies", c->entry_us, c->call_sites,
		       c->calls_ms, c->revert_ms, c->revert_calls_ms, c->revert_entry_us,
		       c->bytes_checked - c->bytes_wrong, c->bytes_checked,
		       c->members_original ? "as planned" : "CHANGED", check_word(c->check_installed),
		       check_word(c->check_reverted), c->why[0] ? ": WRONG: " : "", c->why);
	}
	fflush(stdout);
}

/* `hotpathd install PLAN --cycles N`: the loop, its summary, the exit status. */
static int run_cycles(const struct hp_iplan *plan, const struct hp_install_opts *o, unsigned n, const char *check,
		      const sigset_t *hold, bool json)
{
	struct cycler cy = { .check = check, .hold = hold, .json = json };
	struct hp_cycles_opts co = {
		.cycles = n, .check = cycle_check, .done = cycle_done, .stop = cycle_stop, .ctx = &cy
	};
	struct hp_cycles_result res;
	char err[1024] = "";
	int r = hp_install_cycles(plan, o, &co, &res, err, sizeof(err));
	unsigned d = res.done ? res.done : 1;

	if (r < 0)
		fprintf(stderr, "hotpathd install: cycle %u: %s\n", res.done + 1, err);
	if (json) {
		json_t *j = json_pack(
			"{s:s, s:s, s:i, s:i, s:i, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:s}", "status",
			r < 0     ? "error" :
			res.wrong ? "wrong" :
				    "cycled",
			"root", plan->root, "cycles", (int)n, "done", (int)res.done, "wrong", (int)res.wrong, "stopped",
			res.stopped, "install_ms", res.install_ms / d, "install_us_per_entry", res.install_us_per_entry,
			"entry_us", res.entry_us / d, "call_sites", (double)res.call_sites / d, "calls_ms",
			res.calls_ms / d, "revert_ms", res.revert_ms / d, "revert_calls_ms", res.revert_calls_ms / d,
			"revert_entry_us", res.revert_entry_us / d, "heaps_kept", (json_int_t)res.heaps_kept, "error",
			err);
		json_object_set_new(j, "wall_s", json_real(res.wall_s));
		char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (t)
			printf("%s\n", t);
		free(t);
		json_decref(j);
	} else {
		printf("cycles: %u of %u%s, %u wrong, in %.1f s\n", res.done, n,
		       res.stopped ? " (stopped by a signal)" : "", res.wrong, res.wall_s);
		printf("  install: %.2f ms on average, %.0f us per entry spliced; entry %.0f us; %.1f call sites "
		       "patched in %.3f ms\n",
		       res.install_ms / d, res.install_us_per_entry, res.entry_us / d, (double)res.call_sites / d,
		       res.calls_ms / d);
		printf("  revert: %.2f ms on average (call sites %.3f ms, entry %.0f us); heaps kept %zu\n",
		       res.revert_ms / d, res.revert_calls_ms / d, res.revert_entry_us / d, res.heaps_kept);
	}
	if (r < 0)
		return exit_for(r) == HP_EXIT_ERROR ? HP_EXIT_ERROR : exit_for(r);
	return res.wrong ? HP_EXIT_ERROR : HP_EXIT_OK;
}

int cmd_install(int argc, char **argv)
{
	const char *file = NULL, *state = DEFAULT_STATE, *approved = NULL;
	bool json = false, calls = true, replace = false;
	unsigned pid = 0, cycles = 0;
	const char *check = NULL;
	struct progress pr = { .kill_at = getenv("HOTPATH_TEST_KILL_AT"), .verb = "install" };
	char err[1024];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(install_usage, stdout);
			return HP_EXIT_OK;
		} else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "--quiet"))
			pr.quiet = true;
		else if (!strcmp(a, "--no-call-sites"))
			calls = false;
		else if (!strcmp(a, "--replace"))
			replace = true;
		else if (!strcmp(a, "--pid") && v && hp_parse_uint(v, 1, 0x7fffffff, &pid) == 0)
			i++;
		else if (!strcmp(a, "--state-dir") && v)
			state = argv[++i];
		else if (!strcmp(a, "--cycles") && v && hp_parse_uint(v, 1, 1000000, &cycles) == 0)
			i++;
		else if (!strcmp(a, "--check") && v && *v)
			check = argv[++i];
		else if (!strcmp(a, "--approved-hash") && v && strlen(v) == 64)
			approved = argv[++i];
		else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "hotpathd install: bad option or value '%s' (see 'hotpathd install --help')\n",
				a);
			return HP_EXIT_USAGE;
		} else if (!file)
			file = a;
		else {
			fprintf(stderr, "hotpathd install: one PLAN_FILE only\n");
			return HP_EXIT_USAGE;
		}
	}
	if (!file) {
		fputs(install_usage, stderr);
		return HP_EXIT_USAGE;
	}
	if ((check && !cycles) || (cycles && replace)) {
		fprintf(stderr, "hotpathd install: %s\n",
			replace ? "--cycles installs and reverts the plan each time: not with --replace" :
				  "--check needs --cycles");
		return HP_EXIT_USAGE;
	}
	struct hp_iplan plan;
	int r = hp_iplan_read(file, &plan, err, sizeof(err));
	if (r == -EINVAL) { /* the plan is not one this agent takes */
		fprintf(stderr, "hotpathd install: %s: %s\n", file, err);
		return EXIT_REFUSED;
	} else if (r < 0) {
		fprintf(stderr, "hotpathd install: %s\n", err);
		return HP_EXIT_ERROR;
	}
	bool kernel = !strcmp(plan.kind, "kernel");
	/* A kernel install lasts while this process holds /dev/hotpath: the
	 * signals that end the hold wait until the install is done. */
	sigset_t hold;
	sigemptyset(&hold);
	sigaddset(&hold, SIGTERM);
	sigaddset(&hold, SIGINT);
	sigaddset(&hold, SIGHUP);
	if (kernel || cycles)
		sigprocmask(SIG_BLOCK, &hold, NULL);
	int target = kernel ? (int)getpid() : pid ? (int)pid : plan.pid;
	/* The process's model, with the agent's own patches read as the
	 * original bytes, for the root's call sites; the kernel's (core and
	 * modules) for a kernel plan. */
	struct hp_model *m = NULL;
	if (kernel) {
		/* The device first: without it (or held by another process)
		 * the kernel is not parsed for nothing. It stays open for the
		 * install (kernel_target.c). */
		struct hp_patch_target kt;
		r = hp_patch_target_kernel(&kt, err, sizeof(err));
		if (r < 0) {
			if (json)
				hp_install_json_refused(stdout, plan.root, err);
			fprintf(stderr, "hotpathd install: %s\n", err);
			hp_iplan_free(&plan);
			return r == -ENOENT || r == -EBUSY || r == -EPROTO ? EXIT_REFUSED : exit_for(r);
		}
		kt.ops->close(&kt);
	}
	if (calls && kernel) {
		/* Code of modules only is called directly from modules only:
		 * vmlinux (tens of thousands of functions) is then not parsed. */
		struct hp_open_opts oo = { .quiet = true, .modules_only = true };
		for (size_t k = 0; k < plan.nmembers; k++)
			if (!plan.members[k].module || !strcmp(plan.members[k].module, "vmlinux"))
				oo.modules_only = false;
		char e2[256];
		if (hp_model_open_kernel(&oo, &m, e2, sizeof(e2)) < 0 && !pr.quiet)
			fprintf(stderr, "hotpathd install: no model of the kernel (%s): the entry only\n", e2);
	} else if (calls && target > 0) {
		char e2[256];
		if (hp_model_open_pid_unpatched(state, target, NULL, &m, e2, sizeof(e2)) < 0 && !pr.quiet)
			fprintf(stderr, "hotpathd install: no model of process %d (%s): the entry only\n", target, e2);
	}
	struct hp_install_opts o = { .state_dir = state,
				     .pid = (int)pid,
				     .patch_calls = calls,
				     .m = m,
				     .approved_hash = approved,
				     .replace = replace,
				     .progress = on_step,
				     .progress_ctx = &pr };
	if (cycles) {
		/* The progress of every step of every cycle would bury the cycles' lines: only the test hook stays. */
		pr.quiet = true;
		r = run_cycles(&plan, &o, cycles, check, &hold, json);
		hp_model_free(m);
		hp_iplan_free(&plan);
		return r;
	}
	struct hp_install_result res;
	r = hp_install(&plan, &o, &res, err, sizeof(err));
	hp_model_free(m);
	if (r < 0) {
		if (json)
			hp_install_json_refused(stdout, plan.root, err);
		fprintf(stderr, "hotpathd install: %s\n", err);
		hp_iplan_free(&plan);
		/* hotpath.ko not loaded, held by another process, or another ABI: refused. */
		return kernel && (r == -ENOENT || r == -EBUSY || r == -EPROTO) ? EXIT_REFUSED : exit_for(r);
	}
	if (json) {
		hp_install_json_installed(stdout, &plan, target, &res);
	} else {
		printf("installed %s's copy (%zu functions, %zu bytes) in process %d at 0x%" PRIx64 "\n", plan.root,
		       plan.nmembers, plan.code_len, target, res.heap);
		printf("  entry 0x%" PRIx64 " now jumps to 0x%" PRIx64 "\n", res.entry, res.new_entry);
		printf("  call sites calling the copy: %zu (%zu left calling the entry)\n", res.call_sites,
		       res.call_sites_skipped);
		printf("  unwind data: %s\n", res.unwind_note);
		printf("  code sha256: %s\n", plan.computed);
		printf("  timings: checks %.2f ms, threads stopped in %.2f ms, entry %.0f us, call sites %.3f ms, "
		       "install %.2f ms\n",
		       res.check_ms, res.stopped_ms, res.entry_us, res.calls_ms, res.total_ms);
		printf("  journal: %s\n", res.journal);
	}
	hp_iplan_free(&plan);
	return kernel ? hold_kernel(state, &hold, json, &pr) : HP_EXIT_OK;
}

int cmd_revert(int argc, char **argv)
{
	const char *state = DEFAULT_STATE, *root = NULL;
	bool json = false;
	unsigned pid = 0;
	int npos = 0;
	const char *pos[3] = { 0 };
	struct progress pr = { .kill_at = getenv("HOTPATH_TEST_KILL_AT"), .verb = "revert" };
	char err[1024];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(revert_usage, stdout);
			return HP_EXIT_OK;
		} else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "--quiet"))
			pr.quiet = true;
		else if (!strcmp(a, "--state-dir") && i + 1 < argc)
			state = argv[++i];
		else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "hotpathd revert: bad option '%s' (see 'hotpathd revert --help')\n", a);
			return HP_EXIT_USAGE;
		} else if (npos < 3)
			pos[npos++] = a;
		else {
			fprintf(stderr, "hotpathd revert: too many arguments\n");
			return HP_EXIT_USAGE;
		}
	}
	if (npos >= 1 && npos <= 2 && !strcmp(pos[0], "kernel"))
		return revert_kernel(state, npos == 2 ? pos[1] : NULL, json, &pr);
	if (npos < 2 || strcmp(pos[0], "pid") || hp_parse_uint(pos[1], 1, 0x7fffffff, &pid) < 0) {
		fputs(revert_usage, stderr);
		return HP_EXIT_USAGE;
	}
	root = npos == 3 ? pos[2] : NULL;
	struct hp_install_result res;
	int r = hp_revert(state, (int)pid, root, &res, on_step, &pr, err, sizeof(err));
	if (json)
		hp_revert_json(stdout, r, (int)pid, &res, err);
	if (r < 0) {
		fprintf(stderr, "hotpathd revert: %s\n", err);
		return r == -ENOENT ? EXIT_STATE : exit_for(r);
	}
	if (!json) {
		printf("reverted in process %u%s%s: entry restored in %.0f us, call sites in %.3f ms, %.2f ms in all\n",
		       pid, root ? ", root " : "", root ? root : "", res.revert_entry_us, res.revert_calls_ms,
		       res.revert_total_ms);
		if (res.heap_kept)
			printf("  %s\n", res.heap_note);
	}
	return HP_EXIT_OK;
}

int cmd_installed(int argc, char **argv)
{
	const char *state = DEFAULT_STATE;
	bool json = false;
	unsigned pid = 0;
	char err[512];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(installed_usage, stdout);
			return HP_EXIT_OK;
		} else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "--state-dir") && v)
			state = argv[++i];
		else if (!strcmp(a, "--pid") && v && hp_parse_uint(v, 1, 0x7fffffff, &pid) == 0)
			i++;
		else {
			fprintf(stderr, "hotpathd installed: bad argument '%s' (see 'hotpathd installed --help')\n", a);
			return HP_EXIT_USAGE;
		}
	}
	struct hp_installed *ins;
	size_t n;
	if (hp_installed_list(state, &ins, &n, err, sizeof(err)) < 0) {
		fprintf(stderr, "hotpathd installed: %s\n", err);
		return HP_EXIT_ERROR;
	}
	if (json) {
		hp_installed_json(stdout, state, ins, n, (int)pid);
		free(ins);
		return HP_EXIT_OK;
	}
	size_t shown = 0;
	for (size_t i = 0; i < n; i++) {
		const struct hp_installed *h = &ins[i];
		if (pid && h->pid != (int)pid)
			continue;
		shown++;
		printf("%-10s %s %-7d %-24s heap 0x%" PRIx64 " (%" PRIu64 " bytes) entry 0x%" PRIx64 " -> 0x%" PRIx64
		       " %zu writes  %s\n",
		       h->state, strcmp(h->target, "kernel") ? "pid" : "kernel, held by pid", h->pid, h->root, h->heap,
		       h->heap_len, h->entry, h->new_entry, h->writes, h->id);
		if (h->detail[0])
			printf("           %s\n", h->detail);
	}
	size_t kept = 0;
	for (size_t i = 0; i < n; i++)
		kept += (!pid || ins[i].pid == (int)pid) && !strcmp(ins[i].state, "heap_kept");
	if (kept)
		printf("%zu code heap%s kept mapped after a revert, waiting for release\n", kept, kept == 1 ? "" : "s");
	if (!shown)
		printf("nothing installed (journals in %s/replace)\n", state);
	long draining = hp_kernel_heaps_draining();
	if (draining > 0)
		printf("hotpath.ko: %ld kernel code heap%s draining: freed, but a task's stack may still be inside "
		       "(the kernel log names it); released once it has left, and `rmmod hotpath` waits for it\n",
		       draining, draining == 1 ? "" : "s");
	free(ins);
	return HP_EXIT_OK;
}
