#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Validate docker-compose.yml offline (no Docker engine is needed): docker-compose parses it against
# its schema and rejects unknown keys; then check the services and settings Hotpath depends on.
set -euo pipefail
cd "$(dirname "$0")/.."
pass=0 fail=0
check() { local name=$1; shift; if "$@"; then echo "PASS $name"; pass=$((pass+1)); else echo "FAIL $name"; fail=$((fail+1)); fi; }
cfg=$(docker-compose -f docker-compose.yml config 2>&1) || { echo "$cfg"; echo "0 passed, 1 failed"; exit 1; }
check compose_file_is_valid true
for svc in postgres backend console agent; do
	check "service_$svc" grep -qE "^  $svc:$" <<<"$cfg"
done
agent=$(awk '/^  agent:/{f=1;next} /^  [a-z]/{f=0} f' <<<"$cfg")
check agent_is_privileged grep -q "privileged: true" <<<"$agent"
check agent_uses_host_pid grep -q "pid: host" <<<"$agent"
check agent_mounts_sys grep -q "/sys" <<<"$agent"
check agent_dials_backend grep -q "backend:50051" <<<"$agent"
backend=$(awk '/^  backend:/{f=1;next} /^  [a-z]/{f=0} f' <<<"$cfg")
check backend_uses_postgres_service grep -q "@postgres:5432/hotpath" <<<"$backend"
for f in deploy/agent.Dockerfile deploy/backend.Dockerfile deploy/console.Dockerfile; do
	check "dockerfile_exists_$(basename "$f")" test -s "$f"
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
