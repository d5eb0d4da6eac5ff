// SPDX-License-Identifier: Apache-2.0
/*
 * The process target on a live fixture process: its own functions and libc's
 * at runtime addresses, blocks, disassembly through /proc/PID/mem, a pid that
 * does not exist, and processes killed while they are being parsed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"
#include "model/model.h"
#include "target/target.h"
#include "test_common.h"
#include "test_util.h"

static const char *fixture;

static pid_t spawn(const char *path)
{
	pid_t pid = fork();

	if (pid == 0) {
		execl(path, path, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Wait until the child has exec'd the fixture (its maps show the file). */
static bool wait_exec(pid_t pid, const char *path)
{
	char p[64], line[4352];

	snprintf(p, sizeof(p), "/proc/%d/maps", pid);
	for (int i = 0; i < 200; i++) {
		FILE *fp = fopen(p, "r");
		bool seen = false, libc = false;

		while (fp && fgets(line, sizeof(line), fp)) {
			seen |= strstr(line, path) != NULL;
			libc |= strstr(line, "libc.so") != NULL;
		}
		if (fp)
			fclose(fp);
		if (seen && libc)
			return true;
		usleep(10000);
	}
	return false;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static bool in_exec_mapping(pid_t pid, uint64_t addr)
{
	char p[64], line[4352];
	FILE *fp;
	bool in = false;

	snprintf(p, sizeof(p), "/proc/%d/maps", pid);
	if (!(fp = fopen(p, "r")))
		return false;
	while (fgets(line, sizeof(line), fp)) {
		unsigned long long s, e;
		char perms[8];

		if (sscanf(line, "%llx-%llx %7s", &s, &e, perms) == 3 && perms[2] == 'x' && addr >= s && addr < e)
			in = true;
	}
	fclose(fp);
	return in;
}

static void t_pid_fixture_and_libc_functions(void)
{
	struct hp_open_opts o = { .quiet = true };
	struct hp_model *m = NULL;
	const struct hp_module *mod, *lmod;
	const struct hp_function *f, *lf;
	struct hp_insn *ins = NULL;
	char err[512];
	pid_t pid;
	int n, r;

	REQUIRE(fixture, "fixture did not compile");
	pid = spawn(fixture);
	REQUIRE(pid > 0 && wait_exec(pid, fixture), "fixture did not start");
	r = hp_model_open_pid(pid, &o, &m, err, sizeof(err));
	if (r < 0) {
		reap(pid);
		REQUIRE(0, "open pid: %s", err);
	}
	f = hp_model_find(m, "fx_work", &mod, NULL);
	lf = hp_model_find(m, "nanosleep", &lmod, NULL);
	EXPECT(f && !strcmp(mod->name, fixture), "fx_work not found in the fixture module");
	EXPECT(lf && strstr(lmod->name, "libc.so"), "nanosleep not found in libc");
	if (f && lf) {
		EXPECT(in_exec_mapping(pid, f->addr) && in_exec_mapping(pid, f->addr + f->size - 1),
		       "fx_work at 0x%" PRIx64 " is not inside an executable mapping", f->addr);
		EXPECT(in_exec_mapping(pid, lf->addr), "nanosleep is not inside an executable mapping");
		const char *why = check_function_cfg(mod, f);
		EXPECT(!why, "%s", why);
		why = check_function_cfg(lmod, lf);
		EXPECT(!why, "%s", why);
		EXPECT(mod->base && f->addr > mod->base, "fixture load bias %" PRIx64, mod->base);
		n = hp_function_disassemble(m, mod, f, &ins, err, sizeof(err));
		EXPECT(n > 5, "disassemble fx_work: %d %s", n, err);
		uint32_t total = 0;
		for (int i = 0; i < n; i++)
			total += ins[i].len;
		EXPECT(n <= 0 || total == f->size, "instructions cover %u of %u bytes", total, f->size);
		free(ins);
		/* fx_work calls fx_classify, symbolized at runtime addresses. */
		char buf[128];
		bool called = false;
		for (uint32_t k = 0; k < f->ncalls; k++) {
			const char *s = hp_model_symbolize(m, mod->calls[f->call_start + k].target, buf, sizeof(buf));
			called |= s && !strcmp(s, "fx_classify");
		}
		EXPECT(called, "call to fx_classify not found");
	}
	hp_model_free(m);
	reap(pid);
}

static void t_pid_only_function(void)
{
	struct hp_open_opts o = { .quiet = true, .only_function = "fx_sum" };
	struct hp_model *m = NULL;
	const struct hp_module *mod;
	const struct hp_function *f;
	char err[512];
	pid_t pid;

	REQUIRE(fixture, "fixture did not compile");
	pid = spawn(fixture);
	REQUIRE(pid > 0 && wait_exec(pid, fixture), "fixture did not start");
	int r = hp_model_open_pid(pid, &o, &m, err, sizeof(err));
	reap(pid);
	REQUIRE(r == 0, "open: %s", err);
	f = hp_model_find(m, "fx_sum", &mod, NULL);
	EXPECT(f && f->nblocks > 1, "fx_sum not parsed");
	EXPECT(f && !check_function_cfg(mod, f), "fx_sum blocks do not tile");
	hp_model_free(m);
}

static void t_pid_missing_process(void)
{
	struct hp_model *m = NULL;
	char err[512] = "";
	pid_t pid = fork();
	int r;

	if (pid == 0)
		_exit(0);
	REQUIRE(pid > 0, "fork");
	waitpid(pid, NULL, 0); /* now certainly gone */
	r = hp_model_open_pid(pid, NULL, &m, err, sizeof(err));
	EXPECT(r == -ESRCH, "open of a dead pid gave %d", r);
	EXPECT(strstr(err, "does not exist"), "message '%s'", err);
	EXPECT(!m, "model returned for a dead pid");
	r = hp_model_open_pid(-5, NULL, &m, err, sizeof(err));
	EXPECT(r < 0 && err[0], "negative pid accepted");
}

struct killer {
	pid_t pid;
	useconds_t delay;
};

static void *kill_later(void *arg)
{
	struct killer *k = arg;

	usleep(k->delay);
	kill(k->pid, SIGKILL);
	return NULL;
}

static void t_pid_killed_while_parsing(void)
{
	unsigned seed = 12345;
	int ok = 0, failed = 0;

	REQUIRE(fixture, "fixture did not compile");
	for (int i = 0; i < 24; i++) {
		struct hp_open_opts o = { .quiet = true, .threads = 1 };
		struct hp_model *m = NULL;
		struct killer k;
		pthread_t t;
		char err[512] = "";

		k.pid = spawn(fixture);
		REQUIRE(k.pid > 0, "fork");
		/* Kill anywhere from before exec to the end of a typical parse. */
		k.delay = rand_r(&seed) % 12000;
		pthread_create(&t, NULL, kill_later, &k);
		int r = hp_model_open_pid(k.pid, &o, &m, err, sizeof(err));
		pthread_join(t, NULL);
		waitpid(k.pid, NULL, 0);
		if (r == 0) {
			ok++;
			/* Reading from the dead process is an error, not a crash. */
			if (m->nmods && m->mods[0].nfuncs) {
				struct hp_insn *ins = NULL;
				int n = hp_function_disassemble(m, &m->mods[0], &m->mods[0].funcs[0], &ins, err,
								sizeof(err));
				EXPECT(n < 0 ? err[0] != 0 : true, "read error without message");
				free(ins);
			}
			hp_model_free(m);
		} else {
			failed++;
			EXPECT(err[0] && !m, "error %d without message", r);
		}
	}
	printf("# killed while parsing: %d opened, %d failed cleanly\n", ok, failed);
}

int main(void)
{
	if (!tu_tmpdir()[0]) {
		printf("FAIL - setup: no temporary directory\n");
		return 1;
	}
	fixture = tu_compile("loop.c", "loop_pid", "-O2");
	RUN(t_pid_fixture_and_libc_functions);
	RUN(t_pid_only_function);
	RUN(t_pid_missing_process);
	RUN(t_pid_killed_while_parsing);
	tu_cleanup();
	TEST_EXIT();
}
