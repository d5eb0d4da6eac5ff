#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# docker-compose.yml, in two parts, each named for what it proves:
#   static: docker-compose parses the file against its schema offline (it rejects unknown keys), and
#           the services and settings Hotpath depends on are in the parsed file (two backend replicas
#           on one data volume behind the HAProxy of deploy/haproxy.cfg, which must be what
#           deploy/haproxy_config.py writes and what `haproxy -c` accepts). No engine is needed;
#           this says nothing about whether the images build or the stack starts.
#   stack:  where a Docker daemon answers, build the images, start the stack under a throw-away project
#           name, wait until the backend answers /api/v1/health through its published port and the
#           console serves its page, then remove the project (containers, volumes, images it built).
#           Where no daemon answers (`docker info` fails), it is printed as skipped with the reason
#           ("ok - ... # SKIP not run: no Docker daemon ..."), never as passed.
# Ends with "N passed, N failed, N skipped". Exit status 1 if a check failed.
#   HOTPATH_COMPOSE_STACK_TIMEOUT   seconds to wait for the started stack (default 600)
set -uo pipefail
cd "$(dirname "$0")/.."
pass=0 fail=0 skip=0
check() {
	local name=$1; shift
	if "$@"; then echo "ok - $name"; pass=$((pass+1)); else echo "FAIL - $name"; fail=$((fail+1)); fi
}
skipped() { echo "ok - $1 # SKIP $2"; skip=$((skip+1)); }
summary() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" = 0 ]; exit; }

if ! command -v docker-compose >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then
	echo "FAIL - static: docker-compose.yml: neither docker-compose nor the compose plugin is installed (./scripts/install-deps.sh test)"
	fail=1
	summary
fi
compose() { if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi; }

# -- static ---------------------------------------------------------------------------------------
if ! cfg=$(compose -f docker-compose.yml config 2>&1); then
	echo "$cfg"
	echo "FAIL - static: docker-compose.yml parses against the compose schema"
	fail=1
	summary
fi
check "static: docker-compose.yml parses against the compose schema (no unknown keys)" true
for svc in postgres backend-a backend-b lb console agent; do
	check "static: service $svc is defined" grep -qE "^  $svc:$" <<<"$cfg"
done
agent=$(awk '/^  agent:/{f=1;next} /^  [a-z]/{f=0} f' <<<"$cfg")
check "static: agent is privileged" grep -q "privileged: true" <<<"$agent"
check "static: agent uses the host's pid namespace" grep -q "pid: host" <<<"$agent"
check "static: agent mounts the host's /sys" grep -q "/sys" <<<"$agent"
check "static: agent dials backend:50051" grep -q "backend:50051" <<<"$agent"
service() { awk -v s="  $1:" '$0 == s {f=1;next} /^  [a-z]/{f=0} f' <<<"$cfg"; }
for r in backend-a backend-b; do
	backend=$(service "$r")
	check "static: $r uses the postgres service" grep -q "@postgres:5432/hotpath" <<<"$backend"
	check "static: $r keeps its data in the shared backend-data volume" grep -q "backend-data:/data" <<<"$backend"
	check "static: $r has replica id $r" grep -q "HOTPATH_REPLICA_ID: $r" <<<"$backend"
	check "static: $r leaves the per-source stream cap to the balancer" \
		grep -qE "HOTPATH_AGENT_STREAMS_PER_PEER: '?[0-9]{5,}'?" <<<"$backend"
	check "static: $r has a health check" grep -q "/api/v1/health" <<<"$backend"
	check "static: $r publishes no port (only the balancer does)" bash -c '! grep -q "^    ports:" <<<"$1"' _ "$backend"
done
lb=$(service lb)
check "static: lb answers as backend (the name the console and the agent dial)" grep -qE "^ *- backend$" <<<"$lb"
for port in 8080 50051 50052; do
	check "static: lb publishes $port" grep -qE "published: \"?$port\"?|- $port:$port|\"$port:$port\"" <<<"$lb"
done
check "static: deploy/haproxy.cfg is what deploy/haproxy_config.py writes for backend-a and backend-b" \
	bash -c 'diff -u deploy/haproxy.cfg <(python3 deploy/haproxy_config.py --replica a=backend-a --replica b=backend-b --docker-dns)'
if command -v haproxy >/dev/null 2>&1; then
	check "static: haproxy -c accepts deploy/haproxy.cfg" bash -c 'haproxy -c -q -f deploy/haproxy.cfg 2>&1 | grep -v "could not resolve address" | (! grep -q .)'
else
	echo "FAIL - static: haproxy is not installed (./scripts/install-deps.sh test)"; fail=$((fail+1))
fi
for f in deploy/agent.Dockerfile deploy/backend.Dockerfile deploy/console.Dockerfile deploy/haproxy.Dockerfile; do
	check "static: $f exists" test -s "$f"
done

# -- stack ----------------------------------------------------------------------------------------
name="stack: docker-compose.yml builds, starts, and the backend and console answer"
if ! why=$(docker info 2>&1 >/dev/null); then
	why=$(tr '\n' ' ' <<<"$why" | sed 's/  */ /g; s/ $//')
	skipped "$name" "not run: no Docker daemon (docker info: ${why:-failed})"
	summary
fi
project=hotpath-check-$$
budget=${HOTPATH_COMPOSE_STACK_TIMEOUT:-600}
down() { compose -p "$project" -f docker-compose.yml down -v --rmi local >/dev/null 2>&1; }
trap down EXIT
stack_up() {
	compose -p "$project" -f docker-compose.yml up --build -d || return 1
	local end=$((SECONDS + budget))
	until curl -fsS -o /dev/null http://127.0.0.1:8080/api/v1/health && curl -fsS -o /dev/null http://127.0.0.1:8081/; do
		if [ $SECONDS -ge $end ]; then
			compose -p "$project" -f docker-compose.yml ps
			compose -p "$project" -f docker-compose.yml logs --tail 40
			echo "the stack did not answer within $budget s"
			return 1
		fi
		sleep 2
	done
}
check "$name" stack_up
summary
