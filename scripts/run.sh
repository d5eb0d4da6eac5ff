#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run Hotpath on this host: the backend (REST + WebSocket + console + agent gRPC, with an embedded
# Postgres unless DATABASE_URL is set) and an agent attached to this machine's kernel, enrolled
# automatically with a one-time token (created through the REST API as admin) the first time. Stays
# in the foreground; Ctrl-C stops everything it started. `make run` builds first and then calls this.
#
# Environment (all optional):
#   HOTPATH_DATA_DIR    data folder: embedded Postgres, secrets, logs (default ./var)
#   HOTPATH_HTTP_PORT   console and REST API port (default 8080)
#   HOTPATH_GRPC_PORT   port agents dial (default 50051; enrolment listens on the next port)
#   HOTPATH_HTTPS=1     serve the console over HTTPS with the installation CA's server certificate
#   DATABASE_URL        use this Postgres instead of the embedded one
#   HOTPATH_QUIET=1     do not mirror the logs on the terminal (they are always in DATA_DIR/log/)
#   HOTPATH_AGENT_ARGS  more arguments for this host's agent (`hotpathd run --help`), split at spaces,
#                       e.g. "--frequency 199" to sample at 199 Hz per CPU instead of 997
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export HOTPATH_DATA_DIR=${HOTPATH_DATA_DIR:-$root/var}
export HOTPATH_HTTP_PORT=${HOTPATH_HTTP_PORT:-8080}
export HOTPATH_GRPC_PORT=${HOTPATH_GRPC_PORT:-50051}
export HOTPATH_STATIC_DIR=${HOTPATH_STATIC_DIR:-$root/frontend/dist}
logdir=$HOTPATH_DATA_DIR/log rundir=$HOTPATH_DATA_DIR/run state=$HOTPATH_DATA_DIR/agent-state
# Logs and everything else created here: readable by the owner (and the group for logs), never by all.
umask 027
mkdir -p "$logdir" "$rundir"
chmod 750 "$logdir" "$rundir"
touch "$logdir/backend.log" "$logdir/agent.log"
chmod 640 "$logdir"/*.log
scheme=http
[ "${HOTPATH_HTTPS:-0}" = 1 ] && scheme=https
url=$scheme://127.0.0.1:$HOTPATH_HTTP_PORT

say() { printf '[hotpath] %s\n' "$*"; }
die() { printf '[hotpath] error: %s\n' "$*" >&2; exit 1; }

[ -x agent/build/hotpathd ] || die "agent/build/hotpathd is missing: run 'make run' (it builds first)"
[ -x backend/.venv/bin/python ] || die "backend/.venv is missing: run 'make run' (it installs first)"
[ -f "$HOTPATH_STATIC_DIR/index.html" ] || die "the console is not built ($HOTPATH_STATIC_DIR): run 'make run'"

pids=()
cleanup() {
	trap - INT TERM EXIT
	[ ${#pids[@]} -gt 0 ] || exit 0
	say "stopping"
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for _ in $(seq 50); do kill -0 "${pids[@]}" 2>/dev/null || break; sleep 0.2; done
	kill -KILL "${pids[@]}" 2>/dev/null || true
	rm -f "$rundir"/*.pid
}
trap cleanup INT TERM EXIT

# start NAME LOGFILE CMD...: run CMD in the background, log to LOGFILE (and the terminal unless quiet).
start() {
	local name=$1 log=$2; shift 2
	if [ "${HOTPATH_QUIET:-0}" = 1 ]; then
		"$@" >>"$log" 2>&1 &
	else
		"$@" > >(tee -a "$log" | sed -u "s/^/[$name] /") 2>&1 &
	fi
	pids+=($!)
	echo $! >"$rundir/$name.main.pid"
}

# Start the backend; it runs migrations and creates its CA and the admin password on first start.
say "starting the backend (data in $HOTPATH_DATA_DIR)"
start backend "$logdir/backend.log" env -C backend .venv/bin/python -m app
curl_api() { curl -fsS --cacert "$HOTPATH_DATA_DIR/tls/ca.pem" "$@"; }
for i in $(seq 240); do
	[ -f "$HOTPATH_DATA_DIR/tls/ca.pem" ] && curl_api -o /dev/null "$url/api/v1/health" 2>/dev/null && break
	kill -0 "${pids[0]}" 2>/dev/null || die "the backend exited; see $logdir/backend.log"
	sleep 0.5
done
curl_api -o /dev/null "$url/api/v1/health" || die "the backend did not become ready in 120 s; see $logdir/backend.log"

# Enrol the local agent the first time: a one-time token from the REST API (as admin), handed to
# the agent in a file only root can read; the agent keeps its key and certificate in $state.
enroll_args=()
if [ ! -s "$state/host.pem" ]; then
	say "creating a one-time enrolment token for this host's agent"
	password=$(cat "$HOTPATH_DATA_DIR/admin-password")
	login=$(jq -cn --arg p "$password" '{username: "admin", password: $p}')
	access=$(curl_api -H 'content-type: application/json' -d "$login" "$url/api/v1/auth/login" | jq -r .access_token)
	# For this host's id, so it may also replace the certificate of a host the backend knows already.
	request=$(jq -cn --arg h "$(cat /etc/machine-id)" \
		'{note: "the agent make run starts on this host", hours: 1, host_id: $h}')
	created=$(curl_api -H "Authorization: Bearer $access" -H 'content-type: application/json' \
		-d "$request" "$url/api/v1/enrolment-tokens") ||
		die "could not create an enrolment token; see $logdir/backend.log"
	(umask 077; jq -r .token <<<"$created" >"$rundir/enroll-token"; jq -r .ca_pem <<<"$created" >"$rundir/ca.pem")
	enroll_args=(--enroll-token-file "$rundir/enroll-token" --ca-file "$rundir/ca.pem")
fi

# Attach an agent to this machine's kernel, and restart it if it dies (as systemd would): the
# backend shows the host offline meanwhile and keeps its data; the new agent reconnects.
supervise_agent() {
	trap 'kill -TERM $(cat "$rundir/agent.pid" 2>/dev/null) 2>/dev/null; exit 0' TERM INT
	while :; do
		# shellcheck disable=SC2086 # HOTPATH_AGENT_ARGS is split at spaces on purpose
		agent/build/hotpathd run --server "127.0.0.1:$HOTPATH_GRPC_PORT" --state-dir "$state" \
			"${enroll_args[@]}" ${HOTPATH_AGENT_ARGS:-} &
		echo $! >"$rundir/agent.pid"
		local rc=0
		wait $! || rc=$?  # under `set -e` a bare failing wait would end the supervisor too
		say "the agent exited (status $rc); restarting it in 3 s"
		sleep 3
	done
}
say "starting the agent"
start agent "$logdir/agent.log" supervise_agent

addr=$(hostname -I 2>/dev/null | awk '{print $1}')
say "console: $scheme://${addr:-127.0.0.1}:$HOTPATH_HTTP_PORT/  (also $url/)"
[ "$scheme" = https ] && say "the console's certificate is signed by $HOTPATH_DATA_DIR/tls/ca.pem: trust that CA in your browser"
if [ -f "$HOTPATH_DATA_DIR/admin-password" ]; then
	say "sign in as 'admin' with the password in $HOTPATH_DATA_DIR/admin-password"
fi
say "logs: $logdir/   stop: Ctrl-C"
# The same folder and ports for `make simulate` (scripts/simulate_hosts.py reads these variables).
simenv=
[ "$HOTPATH_DATA_DIR" = "$root/var" ] || simenv+="HOTPATH_DATA_DIR=$HOTPATH_DATA_DIR "
[ "$HOTPATH_HTTP_PORT" = 8080 ] || simenv+="HOTPATH_HTTP_PORT=$HOTPATH_HTTP_PORT "
[ "$HOTPATH_GRPC_PORT" = 50051 ] || simenv+="HOTPATH_GRPC_PORT=$HOTPATH_GRPC_PORT "
[ "$scheme" = http ] || simenv+="HOTPATH_HTTPS=1 "
say "a fleet to look at: '${simenv}make simulate' in another terminal starts simulated hosts beside this one"

# Stay in the foreground; if either process dies, stop the other and report it.
set +e
wait -n "${pids[@]}"
rc=$?
say "a component exited (status $rc); see $logdir/"
exit $rc
