#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# An experiment behind a decision (docs/decisions.md, "Several database nodes: postgres_fdw foreign
# partitions placed by host, measured"), not a test: nothing runs it, nothing asserts on its output.
#
# What it does: starts two throw-away Postgres clusters (node A, node B) in a temporary folder, on unix
# sockets only (ports 25500 and 25501 by default, FDW_PORT_A / FDW_PORT_B), and builds on node A a table
# shaped like the backend's sample_intervals (migration 0004, simplified: the instruction arrays left out),
# range-partitioned by hour as the backend does, each hour hash-partitioned by host_id in two: remainder 0
# a local table on A, remainder 1 a postgres_fdw foreign table whose rows live on B. The same rows are also
# loaded into `si_one`, partitioned by hour only and all on A (the one-node case). It then prints:
#   a) a fleet-style aggregate (busy samples per function over the hour, all hosts, top 50) on both tables,
#      and with the foreign server's fetch_size / async_capable options changed;
#   b) one host's hour, for a host on B and one on A (pruning, what is sent to B, aggregate pushdown);
#   c) inserts routed through the parent to the foreign partition against local ones (one big statement,
#      with and without batch_size; and backend-sized one-row transactions with pgbench);
#   d) an INSERT routed to B while B is stopped, a COMMIT whose remote part dies, and a crash of A after B
#      committed its part (the commit across nodes is not atomic: postgres_fdw has no two-phase commit).
# Every figure is a median of FDW_REPS (5) runs, timed by psql's \timing; plans by EXPLAIN ANALYZE VERBOSE.
#
# What it needs: PostgreSQL server binaries (initdb, pg_ctl, postgres, psql, pgbench) whose build has the
# postgres_fdw extension. The backend's embedded Postgres (pgserver's 16.2) does not ship it; Debian 12's
# postgresql-15 does (`apt-get install postgresql-15`). It looks in PGBIN, then /usr/lib/postgresql/*/bin,
# and says what is missing. Run as root, it runs itself again as the `postgres` user (initdb refuses root).
# Data: 200 hosts x 360 intervals of 10 s (one hour), 40 functions an interval; loading takes ~10-30 s.
# Usage: docs/experiments/fdw_nodes.sh            (FDW_KEEP=1 leaves the clusters and folder in place)
set -euo pipefail

HOSTS=${FDW_HOSTS:-200}
INTERVALS=${FDW_INTERVALS:-360}
FUNCS=${FDW_FUNCS:-40}
REPS=${FDW_REPS:-5}
PORT_A=${FDW_PORT_A:-25500}
PORT_B=${FDW_PORT_B:-25501}
HOUR="2026-11-28 10:00:00+00"

find_bin() {
	local d
	for d in ${PGBIN:-} /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && [ -x "$d/pg_config" ] || continue
		if [ -f "$("$d/pg_config" --sharedir)/extension/postgres_fdw.control" ] &&
			[ -f "$("$d/pg_config" --pkglibdir)/postgres_fdw.so" ]; then
			echo "$d"
			return 0
		fi
		echo "note: $d has no postgres_fdw extension, skipped" >&2
	done
	return 1
}
if ! BIN=$(find_bin); then
	echo "missing: PostgreSQL binaries with the postgres_fdw extension (initdb, pg_ctl, postgres, psql, pgbench)." >&2
	echo "pgserver's embedded build has no postgres_fdw; on Debian 12: apt-get install postgresql-15;" >&2
	echo "or point PGBIN at a bin/ folder whose pg_config names a share/ with extension/postgres_fdw.control." >&2
	exit 1
fi
for b in initdb pg_ctl postgres psql pgbench; do
	[ -x "$BIN/$b" ] || {
		echo "missing: $BIN/$b" >&2
		exit 1
	}
done

if [ "$(id -u)" = 0 ]; then
	id postgres >/dev/null 2>&1 || {
		echo "run as a user other than root (initdb refuses root), or create the postgres user" >&2
		exit 1
	}
	exec runuser -u postgres -- env PGBIN="$BIN" FDW_HOSTS="$HOSTS" FDW_INTERVALS="$INTERVALS" FDW_FUNCS="$FUNCS" \
		FDW_REPS="$REPS" FDW_PORT_A="$PORT_A" FDW_PORT_B="$PORT_B" FDW_KEEP="${FDW_KEEP:-}" bash "$(readlink -f "$0")"
fi

DIR=$(mktemp -d /tmp/fdw_nodes.XXXXXX)
cleanup() {
	if [ -n "${FDW_KEEP:-}" ]; then
		echo "kept: $DIR (stop: $BIN/pg_ctl -D $DIR/a stop; $BIN/pg_ctl -D $DIR/b stop)"
		return
	fi
	"$BIN/pg_ctl" -D "$DIR/a" -m immediate stop >/dev/null 2>&1 || true
	"$BIN/pg_ctl" -D "$DIR/b" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$DIR"
}
trap cleanup EXIT

start() { # node port
	"$BIN/pg_ctl" -D "$DIR/$1" -l "$DIR/$1.log" -w -o "-p $2 -k $DIR -c listen_addresses=''" start >/dev/null
}
for n in a b; do
	"$BIN/initdb" -D "$DIR/$n" -U postgres -A trust --no-sync >/dev/null
	# Defaults otherwise (fsync and synchronous_commit on): commits cost what they cost.
	echo "max_prepared_transactions = 10" >>"$DIR/$n/postgresql.conf"
done
start a "$PORT_A"
start b "$PORT_B"

qa() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$DIR" -p "$PORT_A" -U postgres -d postgres "$@"; }
qb() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$DIR" -p "$PORT_B" -U postgres -d postgres "$@"; }
# Median wall time (ms) of a statement on A over REPS runs, timed by psql's \timing (the client's
# round trip included, the set-up of the connections to A and from A to B not).
median_ms() {
	local sql=$1 i out times=()
	for ((i = 0; i < REPS; i++)); do
		# A statement list is timed as the sum of its statements' times.
		# The session's connection to B is opened first, untimed (the backend's pooled sessions keep theirs).
		out=$(printf 'SELECT 1 FROM %s_b LIMIT 1;\n\\timing on\n%s\n' "$P0" "$sql" | qa 2>&1 | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk '{ s += $1 } END { print s }')
		times+=("$out")
	done
	printf '%s\n' "${times[@]}" | sort -g | awk '{ v[NR] = $1 } END { printf "%.0f ms (runs: %d, min %.0f, max %.0f)", v[int((NR + 1) / 2)], NR, v[1], v[NR] }'
}
plan() { # title sql
	echo "--- plan: $1"
	qa -c "EXPLAIN (ANALYZE, VERBOSE, COSTS OFF) $2" | grep -E 'Foreign Scan|Remote SQL|Relations|Seq Scan|Index|Async|Append|Partial|Aggregate|Execution Time|Subplans Removed|Rows Removed|loops=' | sed 's/^/    /' | cut -c1-220
}

echo "== Postgres: $("$BIN/postgres" --version); folder $DIR; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"

COLS="host_id text NOT NULL, ts timestamptz NOT NULL, interval_ms integer NOT NULL,
      total_samples bigint NOT NULL, idle_samples bigint NOT NULL,
      function_ids bigint[] NOT NULL, block_offsets integer[] NOT NULL, counts bigint[] NOT NULL,
      batch bigint NOT NULL"
NEXT=$(qa -c "SELECT to_char(TIMESTAMPTZ '$HOUR' + interval '1 hour', 'YYYY-MM-DD HH24:MI:SSOF')")
P0=si_p2026112810
P1=si_p2026112811

# Node B: plain tables holding B's hosts of each hour, with the index the backend has.
qb <<SQL
CREATE TABLE ${P0}_b ($COLS);
CREATE TABLE ${P1}_b ($COLS);
CREATE INDEX ON ${P0}_b (host_id, ts);
CREATE INDEX ON ${P1}_b (host_id, ts);
SQL

# For the host-first order: B's table, partitioned by hour on B itself.
qb <<SQL
CREATE TABLE si_h_b ($COLS) PARTITION BY RANGE (ts);
CREATE TABLE si_h_b_p0 PARTITION OF si_h_b FOR VALUES FROM ('$HOUR') TO ('$HOUR'::timestamptz + interval '1 hour');
CREATE TABLE si_h_b_p1 PARTITION OF si_h_b FOR VALUES FROM ('$HOUR'::timestamptz + interval '1 hour') TO ('$HOUR'::timestamptz + interval '2 hours');
CREATE INDEX ON si_h_b (host_id, ts);
SQL

# Node A: the parent, hour partitions, each split by hash of host_id: remainder 0 here, 1 on B.
qa <<SQL
CREATE EXTENSION postgres_fdw;
CREATE SERVER nodeb FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$DIR', port '$PORT_B', dbname 'postgres');
CREATE USER MAPPING FOR postgres SERVER nodeb OPTIONS (user 'postgres');
CREATE TABLE si ($COLS) PARTITION BY RANGE (ts);
CREATE TABLE $P0 PARTITION OF si FOR VALUES FROM ('$HOUR') TO ('$NEXT') PARTITION BY HASH (host_id);
CREATE TABLE $P1 PARTITION OF si FOR VALUES FROM ('$NEXT') TO ('$NEXT'::timestamptz + interval '1 hour')
    PARTITION BY HASH (host_id);
CREATE TABLE ${P0}_a PARTITION OF $P0 FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE ${P1}_a PARTITION OF $P1 FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE FOREIGN TABLE ${P0}_b PARTITION OF $P0 FOR VALUES WITH (MODULUS 2, REMAINDER 1) SERVER nodeb;
CREATE FOREIGN TABLE ${P1}_b PARTITION OF $P1 FOR VALUES WITH (MODULUS 2, REMAINDER 1) SERVER nodeb;
CREATE INDEX ix_si_host_ts ON si (host_id, ts);   -- made on the local partitions, skipped on foreign ones
-- The other order: host first (the foreign partition is B's own table, partitioned by hour on B).
CREATE TABLE si_h ($COLS) PARTITION BY HASH (host_id);
CREATE TABLE si_h_a PARTITION OF si_h FOR VALUES WITH (MODULUS 2, REMAINDER 0) PARTITION BY RANGE (ts);
CREATE TABLE si_h_a_p0 PARTITION OF si_h_a FOR VALUES FROM ('$HOUR') TO ('$NEXT');
CREATE TABLE si_h_a_p1 PARTITION OF si_h_a FOR VALUES FROM ('$NEXT') TO ('$NEXT'::timestamptz + interval '1 hour');
CREATE FOREIGN TABLE si_h_b PARTITION OF si_h FOR VALUES WITH (MODULUS 2, REMAINDER 1) SERVER nodeb;
CREATE INDEX ix_si_h_host_ts ON si_h (host_id, ts);
-- The one-node case: same rows, same hour partitions, all on A.
CREATE TABLE si_one ($COLS) PARTITION BY RANGE (ts);
CREATE TABLE si_one_p0 PARTITION OF si_one FOR VALUES FROM ('$HOUR') TO ('$NEXT');
CREATE TABLE si_one_p1 PARTITION OF si_one FOR VALUES FROM ('$NEXT') TO ('$NEXT'::timestamptz + interval '1 hour');
CREATE INDEX ix_si_one_host_ts ON si_one (host_id, ts);
-- The synthetic hour, made once: FUNCS functions an interval out of 3,000, skewed towards low ids.
CREATE UNLOGGED TABLE src AS
SELECT 'host-' || lpad(h::text, 4, '0') AS host_id, TIMESTAMPTZ '$HOUR' + i * interval '10 s' AS ts, 10000 AS interval_ms,
       (SELECT sum(c) FROM unnest(a.counts) c) + 50 AS total_samples, 50::bigint AS idle_samples,
       a.function_ids, a.block_offsets, a.counts, (h * 1000 + i)::bigint AS batch
FROM generate_series(1, $HOSTS) h, generate_series(0, $INTERVALS - 1) i,
     LATERAL (SELECT array_agg(f ORDER BY f) AS function_ids, array_agg((f * 16) % 512 ORDER BY f) AS block_offsets,
                     array_agg(1 + (random() * 40)::bigint ORDER BY f) AS counts
              FROM (SELECT DISTINCT floor(3000 * random() ^ 3)::bigint AS f
                    FROM generate_series(1, $FUNCS) k WHERE k > h * 0 + i * 0) d) a;
ANALYZE src;
SQL
onb=$(qa -c "SELECT count(DISTINCT host_id) FROM src WHERE satisfies_hash_partition('$P0'::regclass, 2, 1, host_id)")
echo "== data: $(qa -c "SELECT count(*) || ' rows, ' || count(DISTINCT host_id) || ' hosts, ' || pg_size_pretty(pg_total_relation_size('src')) FROM src"); $onb hosts hash to node B"
HB=$(qa -c "SELECT min(host_id) FROM src WHERE satisfies_hash_partition('$P0'::regclass, 2, 1, host_id)")
HA=$(qa -c "SELECT min(host_id) FROM src WHERE satisfies_hash_partition('$P0'::regclass, 2, 0, host_id)")

echo
echo "== c) inserts routed through the parent (one INSERT ... SELECT of the B hosts' rows, then rolled back)"
ROWS_B=$(qa -c "SELECT count(*) FROM src WHERE satisfies_hash_partition('$P0'::regclass, 2, 1, host_id)")
ins_b="BEGIN; INSERT INTO si SELECT * FROM src WHERE satisfies_hash_partition('$P0'::regclass, 2, 1, host_id); ROLLBACK;"
ins_one="BEGIN; INSERT INTO si_one SELECT * FROM src WHERE satisfies_hash_partition('$P0'::regclass, 2, 1, host_id); ROLLBACK;"
REPS_SAVE=$REPS
REPS=3
echo "   $ROWS_B rows into si_one (local):                  $(median_ms "$ins_one")"
echo "   $ROWS_B rows into si -> foreign, batch_size 1:     $(median_ms "$ins_b")"
qa -c "ALTER SERVER nodeb OPTIONS (ADD batch_size '100')"
echo "   $ROWS_B rows into si -> foreign, batch_size 100:   $(median_ms "$ins_b")"
qa -c "ALTER SERVER nodeb OPTIONS (SET batch_size '1000')"
echo "   $ROWS_B rows into si -> foreign, batch_size 1000:  $(median_ms "$ins_b")"
qa -c "ALTER SERVER nodeb OPTIONS (SET batch_size '100')"
REPS=$REPS_SAVE

# Backend-sized transactions: one host's one interval a transaction, committed (pgbench, 1 client).
row="INSERT INTO TBL SELECT host_id, ts + (:n * interval '1 microsecond'), interval_ms, total_samples, idle_samples,
       function_ids, block_offsets, counts, batch FROM src WHERE host_id = 'HOST' AND ts = TIMESTAMPTZ '$HOUR' LIMIT 1;"
for case in "si_one $HB one-node" "si $HA local-partition" "si $HB foreign-partition"; do
	set -- $case
	printf '\\set n random(1, 100000)\n%s\n' "$(echo "$row" | sed "s/TBL/$1/; s/HOST/$2/")" >"$DIR/pgb.sql"
	tps=$("$BIN/pgbench" -n -h "$DIR" -p "$PORT_A" -U postgres -c 1 -t 300 -f "$DIR/pgb.sql" postgres 2>/dev/null |
		awk '/latency average/ { l = $4 } /^tps/ { t = $3 } END { printf "%.0f tx/s, latency %.2f ms", t, l }')
	echo "   300 one-row transactions, $3 ($1, $2): $tps"
done
qa -c "DELETE FROM si_one WHERE ts > '$HOUR' AND ts < TIMESTAMPTZ '$HOUR' + interval '1 s'; DELETE FROM si WHERE ts > '$HOUR' AND ts < TIMESTAMPTZ '$HOUR' + interval '1 s'"

echo
echo "== load: the whole hour through each parent (batch_size 100)"
qa -c '\timing on' -c "INSERT INTO si SELECT * FROM src" | sed 's/^/   si (A + B):  /'
qa -c '\timing on' -c "INSERT INTO si_one SELECT * FROM src" | sed 's/^/   si_one (A):  /'
qa -c '\timing on' -c "INSERT INTO si_h SELECT * FROM src" | sed 's/^/   si_h (A + B, host first):  /'
qb -c "VACUUM ANALYZE"
qa -c "VACUUM ANALYZE" -c "ANALYZE ${P0}_b" -c "ANALYZE ${P1}_b" -c "ANALYZE si_h_b"
echo "   rows on A: $(qa -c "SELECT count(*) FROM ${P0}_a"), on B: $(qb -c "SELECT count(*) FROM ${P0}_b"), si_one: $(qa -c "SELECT count(*) FROM si_one")"

FLEET="SELECT u.f, sum(u.c) AS busy FROM TBL s, unnest(s.function_ids, s.counts) AS u(f, c)
       WHERE s.ts >= '$HOUR' AND s.ts < '$NEXT' GROUP BY u.f ORDER BY busy DESC LIMIT 50"
PERHOST="SELECT host_id, sum(total_samples - idle_samples) FROM TBL WHERE ts >= '$HOUR' AND ts < '$NEXT' GROUP BY host_id"
echo
echo "== a) fleet aggregate: busy samples per function over the hour, all $HOSTS hosts, top 50"
same=$(qa -c "SELECT (SELECT md5(string_agg(f || ':' || busy, ',' ORDER BY busy DESC, f)) FROM (${FLEET//TBL/si}) x)
                   = (SELECT md5(string_agg(f || ':' || busy, ',' ORDER BY busy DESC, f)) FROM (${FLEET//TBL/si_one}) y)")
echo "   same answer on both tables: $same"
echo "   si_one (one node):                              $(median_ms "${FLEET//TBL/si_one}")"
echo "   si (A + B), fetch_size 100 (default):           $(median_ms "${FLEET//TBL/si}")"
qa -c "ALTER SERVER nodeb OPTIONS (ADD fetch_size '10000')"
echo "   si (A + B), fetch_size 10000:                   $(median_ms "${FLEET//TBL/si}")"
qa -c "ALTER SERVER nodeb OPTIONS (ADD async_capable 'true')"
echo "   si (A + B), fetch_size 10000, async_capable:    $(median_ms "${FLEET//TBL/si}")"
plan "fleet aggregate on si (async_capable, fetch_size 10000)" "${FLEET//TBL/si}"
plan "fleet aggregate on si_one" "${FLEET//TBL/si_one}"
echo "   per-host sums (GROUP BY host_id, the partition key; no arrays), enable_partitionwise_aggregate on:"
echo "   si_one:                                         $(median_ms "${PERHOST//TBL/si_one}")"
echo "   si:                                             $(median_ms "SET enable_partitionwise_aggregate = on; ${PERHOST//TBL/si}")"
plan "per-host sums on si, enable_partitionwise_aggregate off (the default)" "${PERHOST//TBL/si}"
echo "--- plan: per-host sums on si, partitionwise aggregate (SET in the session)"
qa -c "SET enable_partitionwise_aggregate = on" -c "EXPLAIN (ANALYZE, VERBOSE, COSTS OFF) ${PERHOST//TBL/si}" |
	grep -E 'Foreign Scan|Remote SQL|Relations|Aggregate|Execution Time' | sed 's/^/    /' | cut -c1-220

echo "   host first (si_h), fleet aggregate:             $(median_ms "${FLEET//TBL/si_h}")"
echo "   host first (si_h), per-host sums, partitionwise: $(median_ms "SET enable_partitionwise_aggregate = on; ${PERHOST//TBL/si_h}")"
echo "--- plan: per-host sums on si_h (host first), partitionwise aggregate"
qa -c "SET enable_partitionwise_aggregate = on" -c "EXPLAIN (ANALYZE, VERBOSE, COSTS OFF) ${PERHOST//TBL/si_h}" |
	grep -E 'Foreign Scan|Remote SQL|Relations|Aggregate|Append|Execution Time' | sed 's/^/    /' | cut -c1-220
plan "fleet aggregate on si_h (host first)" "${FLEET//TBL/si_h}"

echo
echo "== b) one host's hour"
ONEF="SELECT u.f, sum(u.c) AS busy FROM TBL s, unnest(s.function_ids, s.counts) AS u(f, c)
      WHERE s.host_id = 'HOST' AND s.ts >= '$HOUR' AND s.ts < '$NEXT' GROUP BY u.f ORDER BY busy DESC LIMIT 50"
ONET="SELECT host_id, count(*), sum(total_samples) FROM TBL WHERE host_id = 'HOST' AND ts >= '$HOUR' AND ts < '$NEXT' GROUP BY host_id"
for h in "$HA A" "$HB B"; do
	set -- $h
	q=$(echo "$ONEF" | sed "s/HOST/$1/")
	echo "   functions of $1 (on $2): si_one $(median_ms "${q//TBL/si_one}");  si $(median_ms "${q//TBL/si}")"
	q=$(echo "$ONET" | sed "s/HOST/$1/")
	echo "   totals of $1 (on $2):    si_one $(median_ms "${q//TBL/si_one}");  si $(median_ms "${q//TBL/si}")"
done
plan "functions of $HB (on B)" "$(echo "$ONEF" | sed "s/HOST/$HB/; s/TBL/si/")"
plan "totals of $HB (on B)" "$(echo "$ONET" | sed "s/HOST/$HB/; s/TBL/si/")"
echo "--- plan: totals of $HB (on B), enable_partitionwise_aggregate on"
qa -c "SET enable_partitionwise_aggregate = on" -c "EXPLAIN (ANALYZE, VERBOSE, COSTS OFF) $(echo "$ONET" | sed "s/HOST/$HB/; s/TBL/si/")" |
	grep -E 'Foreign Scan|Remote SQL|Relations|Aggregate|Execution Time' | sed 's/^/    /' | cut -c1-220
qa -c "ALTER SERVER nodeb OPTIONS (ADD use_remote_estimate 'true')"
q=$(echo "$ONET" | sed "s/HOST/$HB/; s/TBL/si_h/")
echo "   totals of $HB on si_h (host first), partitionwise: $(median_ms "SET enable_partitionwise_aggregate = on; $q")"
echo "--- plan: totals of $HB on si_h (host first), partitionwise aggregate"
qa -c "SET enable_partitionwise_aggregate = on" -c "EXPLAIN (ANALYZE, VERBOSE, COSTS OFF) $q" |
	grep -E 'Foreign Scan|Remote SQL|Relations|Aggregate|Execution Time' | sed 's/^/    /' | cut -c1-220
echo "   with use_remote_estimate: functions of $HB si $(median_ms "$(echo "$ONEF" | sed "s/HOST/$HB/; s/TBL/si/")")"
echo "   with use_remote_estimate: fleet aggregate si  $(median_ms "${FLEET//TBL/si}")"
qa -c "ALTER SERVER nodeb OPTIONS (DROP use_remote_estimate)"

echo
echo "== what the partitioned table with a foreign partition refuses"
qa -c "CREATE UNIQUE INDEX ux_si ON si (host_id, ts, batch)" 2>&1 | sed 's/^/   unique index on the parent: /' || true
qa -c "INSERT INTO ${P0}_b SELECT * FROM src WHERE host_id = '$HB' LIMIT 1 ON CONFLICT (host_id) DO UPDATE SET batch = 0" 2>&1 |
	sed 's/^/   ON CONFLICT DO UPDATE on the foreign partition: /' || true

echo
echo "== d) node B stopped, restarted; what is committed where"
one="SELECT * FROM src WHERE host_id = 'H' AND ts = (SELECT max(ts) FROM src)"
ins() { echo "INSERT INTO si SELECT host_id, ts, interval_ms, total_samples, idle_samples, function_ids, block_offsets, counts, $2 FROM ($(echo "$one" | sed "s/'H'/'$1'/")) r;"; }
count() { echo "A:$(qa -c "SELECT count(*) FROM ${P0}_a WHERE batch = $1") B:$(qb -c "SELECT count(*) FROM ${P0}_b WHERE batch = $1")"; }
"$BIN/pg_ctl" -D "$DIR/b" -m fast stop >/dev/null
echo "   B stopped (fast). Insert of a B host's row: $(qa -c "$(ins "$HB" 901)" 2>&1 | tr '\n' ' ')"
echo "   insert of an A host's row: $(qa -c "$(ins "$HA" 902)" 2>&1 | tr '\n' ' ')ok; rows: $(start b "$PORT_B"; count 902)"
"$BIN/pg_ctl" -D "$DIR/b" -m fast stop >/dev/null
echo "   one transaction, an A row then a B row, B stopped: $(printf 'BEGIN;\n%s\n%s\nCOMMIT;\n' "$(ins "$HA" 903)" "$(ins "$HB" 903)" | qa 2>&1 | tr '\n' ' ')"
start b "$PORT_B"
echo "   after B's restart: $(count 903) (the transaction rolled back as a whole)"
# B's connection dies after the rows were sent to it, before COMMIT: the COMMIT on A fails, both halves lost.
{
	printf 'BEGIN;\n%s\n%s\nSELECT pg_sleep(2);\nCOMMIT;\n' "$(ins "$HA" 904)" "$(ins "$HB" 904)"
} | qa >"$DIR/d904.out" 2>&1 &
sleep 1
"$BIN/pg_ctl" -D "$DIR/b" -m immediate stop >/dev/null
wait $! || true
start b "$PORT_B"
echo "   B killed (immediate) between the INSERTs and COMMIT: $(tr '\n' ' ' <"$DIR/d904.out")-> $(count 904)"
# A crashes after B has committed its half, before A's own commit record: B keeps rows that were never
# acknowledged. B's backend serving A is frozen (SIGSTOP) so that A's COMMIT waits in its pre-commit step
# (postgres_fdw sends COMMIT to B there), A is killed, then B's backend resumes and executes the COMMIT.
{
	printf 'BEGIN;\n%s\n%s\nSELECT pg_sleep(2);\nCOMMIT;\n' "$(ins "$HA" 905)" "$(ins "$HB" 905)"
} | qa >"$DIR/d905.out" 2>&1 &
client=$!
sleep 1
bpid=$(qb -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'postgres_fdw' ORDER BY backend_start DESC LIMIT 1")
apid=$(qa -c "SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND pid <> pg_backend_pid() LIMIT 1")
if [ -z "$bpid" ] || [ -z "$apid" ]; then
	echo "   (could not find the sessions to freeze and kill: B '$bpid', A '$apid'; this step skipped)"
	exit 0
fi
kill -STOP "$bpid"
sleep 2.5 # A's session is now in COMMIT, waiting for B
kill -KILL "$apid"
sleep 0.5
kill -CONT "$bpid"
wait "$client" || true
for _ in 1 2 3 4 5 6 7 8 9 10; do qa -c "SELECT 1" >/dev/null 2>&1 && break || sleep 1; done
echo "   A's backend killed while its COMMIT waited on B: client saw: $(tr '\n' ' ' <"$DIR/d905.out" | cut -c1-160)"
echo "   after A's crash recovery: $(count 905) (B's half committed, A's lost: not atomic)"
qa -c "SHOW max_prepared_transactions" | sed 's/^/   (max_prepared_transactions on A: /; s/$/; postgres_fdw does not PREPARE remote transactions)/'
echo
echo "== done; load average $(cut -d' ' -f1-3 /proc/loadavg)"
