// SPDX-License-Identifier: Apache-2.0
/*
 * A query workload on SQLite (the amalgamation, fetched by build beside
 * this file into its cache and compiled with SQLite's usual -O2; never
 * committed). bench/replace, bench/layout_vs_bolt and the console's
 * end-to-end plan test run it. It speaks live_driver.h's protocol (rounds
 * timed inside the process on "run N", --loop, HOTPATH_REPLAY).
 * The database is in memory: an orders/customers schema of 20,000 and
 * 2,000 rows, and each workload pass runs joins, grouping, sorting, LIKE
 * scans, an index lookup per customer, updates and inserts in a
 * transaction (rolled back, so every round sees the same data and gives
 * the same checksum), so the bytecode engine runs a broad mix of opcodes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "live_driver.h"
#include "sqlite3.h"

static sqlite3 *db;

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
	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		exit(1);
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

int main(int argc, char **argv)
{
	int status = live_driver_main(argc, argv, setup, workload);
	sqlite3_close(db);
	return status;
}
