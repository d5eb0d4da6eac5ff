#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Start the whole stack the way `make run` does (scripts/run.sh: embedded Postgres, backend, console,
# an agent on this machine's kernel) in a throw-away data folder on test ports, wait until this host's
# agent is online, run the Playwright tests in Debian's Chromium, and stop the stack (E2E_KEEP=1 keeps
# its data folder and logs after a pass too; a failure always keeps them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
data=$(mktemp -d /tmp/hotpath-e2e.XXXXXX)
export HOTPATH_DATA_DIR=$data HOTPATH_HTTP_PORT=${HOTPATH_E2E_HTTP_PORT:-18080} HOTPATH_GRPC_PORT=${HOTPATH_E2E_GRPC_PORT:-15051}
export HOTPATH_QUIET=1
# This host's agent samples at 199 Hz per CPU, not make run's 997: the backend stored the whole machine's
# samples and stacks at 997 Hz for the suite's ~15 minutes, about half a core (docs/decisions.md, "The
# test run's time, session 22"). The tests' statistical margins are derived from this rate (helpers.ts).
export HOTPATH_E2E_SAMPLE_HZ=${HOTPATH_E2E_SAMPLE_HZ:-199}
export HOTPATH_AGENT_ARGS="--frequency $HOTPATH_E2E_SAMPLE_HZ ${HOTPATH_AGENT_ARGS:-}"
url=http://127.0.0.1:$HOTPATH_HTTP_PORT

./scripts/run.sh >"$data/run.out" 2>&1 &
stack=$!
tests=
stop() {
	# The tests run in a session of their own: ending it ends every program they started (read loops,
	# fixtures), also when this script is stopped from outside while they run.
	[ -z "$tests" ] || kill -TERM -- "-$tests" 2>/dev/null || true
	kill -TERM "$stack" 2>/dev/null || true
	wait "$stack" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Wait for the backend, then for the admin password the backend writes on first start.
for _ in $(seq 240); do
	curl -fsS -o /dev/null "$url/api/v1/health" 2>/dev/null && [ -s "$data/admin-password" ] && break
	kill -0 "$stack" 2>/dev/null || { cat "$data/run.out"; tail -50 "$data"/log/*.log; exit 1; }
	sleep 0.5
done

export HOTPATH_E2E_URL=$url HOTPATH_E2E_DATA_DIR=$data
export HOTPATH_E2E_ADMIN_PASSWORD=$(cat "$data/admin-password")
export HOTPATH_E2E_HOSTNAME=$(hostname)
set +e
cd e2e
setsid npx playwright test "$@" &
tests=$!
wait $tests
rc=$?
cd ..
set -e
if [ $rc != 0 ]; then
	echo "--- stack output ---"; cat "$data/run.out"
	for f in "$data"/log/*.log; do echo "--- $f (tail) ---"; tail -40 "$f"; done
	echo "(the stack's data and logs are kept in $data)"
else
	stop
	if [ "${E2E_KEEP:-0}" = 1 ]; then echo "(E2E_KEEP=1: the stack's data and logs are kept in $data)"; else rm -rf "$data"; fi
fi
exit $rc
