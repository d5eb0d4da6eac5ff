// SPDX-License-Identifier: Apache-2.0
/*
 * A query workload on SQLite (the amalgamation, fetched by build beside
 * this file into its cache and compiled with SQLite's usual -O2; never
 * committed). bench/replace and the console's end-to-end plan test run it.
 * The process stays up between rounds so code can be installed into it and
 * reverted while it runs, and every round is timed inside the process:
 *   stdin "run N"  runs the workload N times, prints "ns T cpu C rows R" (the
 *                  round's CLOCK_MONOTONIC time, its thread CPU time, which
 *                  other load on the machine disturbs less, and a checksum
 *                  of the results)
 *   stdin "quit"   exits
 * With HOTPATH_REPLAY=FILE it first puts an installed copy in place by
 * itself (FILE: the code heap's address, length and bytes, then each
 * patched range with its bytes, as bench/replace dumps them from a process
 * the agent installed into), so a simulator that cannot be traced
 * (valgrind's cachegrind) runs the same layout; the binary is built
 * without PIE so its addresses are the same there.
 * The database is in memory: an orders/customers schema of 20,000 and
 * 2,000 rows, and each workload pass runs joins, grouping, sorting, LIKE
 * scans, an index lookup per customer, updates and inserts in a
 * transaction (rolled back, so every round sees the same data and gives
 * the same checksum), so the bytecode engine runs a broad mix of opcodes.
 */
#include <stdint.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sqlite3.h"

static sqlite3 *db;
static uint64_t checksum;

static int row(void *ctx, int n, char **v, char **names)
{
	(void)ctx;
	(void)names;
	for (int i = 0; i < n; i++)
		for (const char *p = v[i] ? v[i] : ""; *p; p++)
			checksum = checksum * 31 + (unsigned char)*p;
	return 0;
}

static void exec(const char *sql)
{
	char *err = NULL;
	if (sqlite3_exec(db, sql, row, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "sqlite: %s in %.60s\n", err ? err : "?", sql);
		exit(1);
	}
}

static void setup(void)
{
	exec("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT, tier INT);"
	     "CREATE TABLE orders(id INTEGER PRIMARY KEY, cust INT, amount REAL, status TEXT, note TEXT);"
	     "CREATE INDEX orders_cust ON orders(cust);"
	     "BEGIN;"
	     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 2000) "
	     "INSERT INTO customers SELECT x, 'name' || x, 'city' || (x % 37), x % 5 FROM c;"
	     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 20000) "
	     "INSERT INTO orders SELECT x, (x * 7919) % 2000 + 1, (x % 997) * 1.25, "
	     "CASE x % 4 WHEN 0 THEN 'new' WHEN 1 THEN 'paid' WHEN 2 THEN 'sent' ELSE 'done' END, "
	     "'note ' || hex(x * 2654435761) FROM c;"
	     "COMMIT;");
}

static void workload(int pass)
{
	char sql[512];

	exec("SELECT c.city, count(*), sum(o.amount), avg(o.amount) FROM orders o JOIN customers c ON c.id = o.cust "
	     "GROUP BY c.city ORDER BY 3 DESC LIMIT 10;");
	exec("SELECT status, count(*), max(amount) FROM orders WHERE amount > 300 GROUP BY status;");
	exec("SELECT id, note FROM orders WHERE note LIKE '%A1%' ORDER BY amount DESC LIMIT 20;");
	for (int k = 0; k < 200; k++) {
		snprintf(sql, sizeof(sql),
			 "SELECT count(*), total(amount) FROM orders WHERE cust = %d AND status <> 'done';",
			 (pass * 211 + k * 13) % 2000 + 1);
		exec(sql);
	}
	exec("SELECT tier, count(DISTINCT city) FROM customers GROUP BY tier;");
	snprintf(sql, sizeof(sql),
		 "BEGIN; UPDATE orders SET amount = amount + 1 WHERE id %% 97 = %d; "
		 "INSERT INTO orders(cust, amount, status, note) VALUES (%d, 9.5, 'new', 'x'); "
		 "DELETE FROM orders WHERE id = (SELECT max(id) FROM orders) AND note = 'x'; ROLLBACK;",
		 pass % 97, pass % 2000 + 1);
	exec(sql);
}

static int replay(const char *path)
{
	FILE *fp = fopen(path, "rb");
	unsigned long long addr, len;
	unsigned n;

	if (!fp || fscanf(fp, "heap %llx %llx\n", &addr, &len) != 2)
		return -1;
	uint8_t *heap = mmap((void *)(uintptr_t)addr, len, PROT_READ | PROT_WRITE | PROT_EXEC,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (heap != (uint8_t *)(uintptr_t)addr || fread(heap, 1, len, fp) != len)
		return -1;
	mprotect(heap, len, PROT_READ | PROT_EXEC);
	while (fscanf(fp, " patch %llx %u:", &addr, &n) == 2) {
		uint8_t b[16];
		for (unsigned i = 0; i < n && i < 16; i++) {
			unsigned v;
			if (fscanf(fp, "%2x", &v) != 1)
				return -1;
			b[i] = (uint8_t)v;
		}
		uintptr_t page = (uintptr_t)addr & ~(uintptr_t)4095;
		mprotect((void *)page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC);
		memcpy((void *)(uintptr_t)addr, b, n);
		mprotect((void *)page, 8192, PROT_READ | PROT_EXEC);
	}
	fclose(fp);
	return 0;
}

int main(void)
{
	char line[128];

	if (getenv("HOTPATH_REPLAY") && replay(getenv("HOTPATH_REPLAY")) < 0) {
		fprintf(stderr, "cannot replay %s\n", getenv("HOTPATH_REPLAY"));
		return 1;
	}
	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		return 1;
	setup();
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		int n;
		if (!strncmp(line, "quit", 4))
			break;
		if (sscanf(line, "run %d", &n) != 1)
			continue;
		struct timespec a, b, ca, cb;
		checksum = 0;
		clock_gettime(CLOCK_MONOTONIC, &a);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ca);
		for (int i = 0; i < n; i++)
			workload(i % 1000);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cb);
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("ns %lld cpu %lld rows %llu\n",
		       (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
		       (long long)(cb.tv_sec - ca.tv_sec) * 1000000000LL + (cb.tv_nsec - ca.tv_nsec),
		       (unsigned long long)checksum);
		fflush(stdout);
	}
	sqlite3_close(db);
	return 0;
}
