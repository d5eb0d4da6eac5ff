#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make lane`: boot the kernel lane's guest (Debian's current 6.1 kernel under QEMU software
# emulation) as an extra host of a running Hotpath installation, so its console shows this machine
# and the guest side by side. Start `make run` first (same data folder and ports); this stays in
# the foreground and Ctrl-C stops the guest. The guest's agent is `hotpathd run`, exactly as on any
# host; a small workload keeps the guest's test module busy so its code shows live hotness.
#
#   HOTPATH_DATA_DIR    the running installation's data folder (default ./var)
#   HOTPATH_GRPC_PORT   its agent port (default 50051)    HOTPATH_HTTP_PORT  its console (default 8080)
#   HOTPATH_HTTPS=1     the installation serves its console over HTTPS (as `make run` does with it)
#   LANE_HOSTNAME       the guest's host name (default hotpath-lane)
#   LANE_JOB            workload (default) or none
set -euo pipefail
. "$(dirname "$0")/common.sh"
. "$lane_dir/credentials.sh"
cd "$repo_root"
data=${HOTPATH_DATA_DIR:-$repo_root/var}
grpc=${HOTPATH_GRPC_PORT:-50051}
http=${HOTPATH_HTTP_PORT:-8080}
scheme=http
[ "${HOTPATH_HTTPS:-0}" = 1 ] && scheme=https
url=$scheme://127.0.0.1:$http

curl -fsS --cacert "$data/tls/ca.pem" -o /dev/null "$url/api/v1/health" 2>/dev/null ||
	die "no Hotpath backend answers on $url: start 'make run' first (the lane joins a running installation)"
lane_credentials_ready "$data" || die "$data has no CA or admin password: is it the data folder of the running 'make run'?"

"$lane_dir/fetch.sh"
lane_paths
"$lane_dir/build.sh" >/dev/null

run=$data/lane
rm -rf "$run"
mkdir -p "$run"
lane_prepare "$run" "$data" "$url" "$grpc" "${LANE_JOB:-workload}"
say "booting the guest: kernel $abi-amd64 under QEMU software emulation (about 20 s to its network)"
"$lane_dir/boot.sh" "$run" >"$run/boot.out" 2>&1 &
qemu=$!
follow=
stop() {
	trap - INT TERM EXIT
	[ -n "$follow" ] && kill "$follow" 2>/dev/null
	if kill -0 "$qemu" 2>/dev/null; then
		say "stopping the guest"
		kill -TERM "$qemu" 2>/dev/null
		wait "$qemu" 2>/dev/null
	fi
}
trap stop INT TERM EXIT

lane_wait "$run/console.log" '^LANE net-up' 180 "$qemu" "the guest did not bring its network up"
say "guest network up; its agent parses the 6.1 kernel and dials 10.0.2.2:$grpc (this machine)"
lane_wait "$run/console.log" 'hotpathd: welcome' 240 "$qemu" "the guest's agent did not reach the backend on port $grpc"
addr=$(hostname -I 2>/dev/null | awk '{print $1}')
say "the guest is connected: in the console ($scheme://${addr:-127.0.0.1}:$http/) the host list now shows"
say "'${LANE_HOSTNAME:-hotpath-lane}' (kernel $abi-amd64) beside $(hostname); its code tree holds vmlinux and its modules"
say "guest console log: $run/console.log   stop the guest: Ctrl-C"
# Mirror the guest's markers and its agent's log (not the kernel's messages) while it runs.
tail -n +1 -f --pid="$qemu" "$run/console.log" 2>/dev/null | grep --line-buffered -E '^(LANE |\[agent\])' |
	sed -u -e 's/\r$//' -e 's/^/[guest] /' &
follow=$!
set +e
wait "$qemu"
rc=$?
set -e
if grep -qE '^LANE FAIL|Kernel panic' "$run/console.log"; then
	lane_log_tail "$run/console.log"
	die "$(lane_guest_gone "$run/console.log")"
fi
say "the guest stopped (QEMU status $rc)"
