#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The kernel lane's proofs (`make kernel-lane-test`, and the kernel-lane suite of `make test`).
# Fetches (once) and builds the lane, starts Hotpath the way `make run` does in a throw-away data
# folder (backend, embedded Postgres, this machine's own agent), boots the 6.1 guest as a second
# host running its test job (guest/jobs.sh), then checks.py checks the guest through the backend's
# REST API and the job's results (its checks of the guest as a host while the job runs, the rest once
# it is done). Every wait on the guest fails when it goes quiet for LANE_STALL
# seconds (600); the whole lane has LANE_BUDGET seconds (default 3000, counted from the backend's
# start) after which QEMU is stopped. A guest that never comes up, panics, or a package that cannot be
# fetched fails with the reason and the tail of the guest's serial console. Before the summary,
# checks.py prints the lane's time table: the host's steps (fetch, image+backend (built and started side by side), boot, agent-connect,
# rest-of-job: wall seconds each), the guest agent's kernel parses, every frame of the guest's test job
# (guest uptime at its start and how long it took) and the host's checks that took a second or more.
# A second guest runs the proofs that need no agent daemon (hotpath.ko's, the kernel target's) beside the
# first one's job, each guest on a host core (guest/jobs.sh: job_kmod).
# The last line is the lane's summary:
#   kernel-lane: kernel RELEASE, F functions in M modules, entry counts exact X/Y, block counts exact X/Y,
#   hotpath.ko checks X/Y, redirect cycles C, kernel installs I/J, install cycles K, read-path cycles R,
#   call sites S, console installs A/B, wrong results W
#
#   HOTPATH_LANE_HTTP_PORT, HOTPATH_LANE_GRPC_PORT   the lane backend's ports (default 18090, 15061)
#   LANE_KEEP=1   keep the run folder (console log, results, backend logs) after success too
set -uo pipefail
. "$(dirname "$0")/common.sh"
. "$lane_dir/credentials.sh"
cd "$repo_root"

http=${HOTPATH_LANE_HTTP_PORT:-18090}
grpc=${HOTPATH_LANE_GRPC_PORT:-15061}
# The budget caps a hang; it is not a speed check, and it is not what finds one. The guest runs under
# TCG, so its every step is CPU-bound on the host and slows with whatever else the machine runs: alone
# the lane takes 150-250 s here; with both cores taken its agent parsed the kernel in 58 s instead of
# ~20; with three test runs, four builds and a CPU burner beside it (load average 15) the guest's agent
# parsed the kernel in 175 s, reached the backend 400 s after boot, and the whole job (with its kernel
# install cycles) ran past 20 minutes. No fixed total fits every load, so every wait on the guest fails
# when the guest writes nothing new for LANE_STALL seconds (lane_wait, default 600 s: a working guest
# logs every few seconds), and the total only caps what a guest that keeps talking without finishing
# could take. It counts from the backend's start (fetching and building the image are bounded by their
# own tools).
budget=${LANE_BUDGET:-3000}
run=$(mktemp -d /tmp/hotpath-lane.XXXXXX)
data=$run/data
mkdir -p "$data"
t0=$SECONDS
release=unknown
summarized=0 stack= qemu= qemu2= kwaiter= checker= builder=

# In this suite a failed step is a failed check: print it, the counts and the summary line.
die() {
	printf 'FAIL - %s\n' "$*"
	exit 1
}
finish() {
	local rc=$?
	trap - EXIT
	if [ -n "$checker" ]; then
		kill -TERM "$checker" 2>/dev/null
		wait "$checker" 2>/dev/null
	fi
	[ -n "$qemu" ] && kill -TERM "$qemu" 2>/dev/null
	[ -n "$qemu2" ] && kill -TERM "$qemu2" 2>/dev/null
	if [ -n "$kwaiter" ]; then
		kill -TERM "$kwaiter" 2>/dev/null
		wait "$kwaiter" 2>/dev/null
	fi
	if [ -n "$builder" ]; then
		kill -TERM "$builder" 2>/dev/null
		wait "$builder" 2>/dev/null
	fi
	if [ -n "$stack" ]; then
		kill -TERM "$stack" 2>/dev/null
		wait "$stack" 2>/dev/null
	fi
	[ -n "$qemu" ] && wait "$qemu" 2>/dev/null
	[ -n "$qemu2" ] && wait "$qemu2" 2>/dev/null
	if [ "$summarized" = 0 ]; then
		echo "lane: 0 passed, 1 failed, 0 skipped"
		echo "kernel-lane: kernel $release, 0 functions in 0 modules, entry counts exact 0/0, block counts exact 0/0," \
			"hotpath.ko checks 0/0, redirect cycles 0, kernel installs 0/0, install cycles 0, read-path cycles 0, call sites 0, console installs 0/0, wrong results 0"
	fi
	[ "$rc" != 0 ] || [ "${LANE_KEEP:-0}" = 1 ] || rm -rf "$run"
	exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM
left() { echo $((budget - (SECONDS - t0))); }
step() { say "$* (lane wall time so far $((SECONDS - t0)) s)"; }
# stage NAME: the host's wall time since the previous stage, for checks.py's time table (NAME=SECONDS,...).
times= mark=$SECONDS
stage() {
	times=${times:+$times,}$1=$((SECONDS - mark))
	mark=$SECONDS
}

t_fetch=$SECONDS
step "fetching"
"$lane_dir/fetch.sh" || die "fetching the lane's packages failed (see above)"
lane_paths
release=$abi-amd64
stage fetch
# The guest image is built while Hotpath starts: neither needs the other, and each leaves a core idle
# part of its time (the time table's "image+backend" is the wall of both, side by side).
step "building the guest image"
"$lane_dir/build.sh" >/dev/null &
builder=$!

t0=$SECONDS # the budget starts here (see above); the wall times printed from here on count from it too
step "starting Hotpath as make run does (HTTP $http, gRPC $grpc), beside the image's build"
# An install flow waits for the agent's answer HOTPATH_PLAN_INSTALL_TIMEOUT_S (default 120 s): the console
# flow's agent dies in its first install and answers only once restarted, after it has parsed the
# emulated kernel again, which takes minutes on a loaded machine. A quick command (the instructions
# of a function) waits HOTPATH_COMMAND_TIMEOUT_S (default 15 s) before the request answers 504: the
# emulated guest's agent, one command at a time, took longer at load average 15 (run s16b), so the
# lane allows 100 s (checks.py's requests wait 120 s). This host's agent samples at 199 Hz, as in the
# end-to-end suite (e2e/run.sh): its samples are stored for the lane's whole run, and no check reads them.
HOTPATH_DATA_DIR=$data HOTPATH_HTTP_PORT=$http HOTPATH_GRPC_PORT=$grpc HOTPATH_QUIET=1 \
	HOTPATH_AGENT_ARGS=${HOTPATH_AGENT_ARGS:---frequency 199} \
	HOTPATH_PLAN_INSTALL_TIMEOUT_S=${HOTPATH_PLAN_INSTALL_TIMEOUT_S:-1200} \
	HOTPATH_COMMAND_TIMEOUT_S=${HOTPATH_COMMAND_TIMEOUT_S:-100} \
	"$repo_root/scripts/run.sh" >"$run/stack.out" 2>&1 &
stack=$!
for _ in $(seq 240); do
	curl -fsS -o /dev/null "http://127.0.0.1:$http/api/v1/health" 2>/dev/null && lane_credentials_ready "$data" && break
	kill -0 "$stack" 2>/dev/null || { cat "$run/stack.out"; die "Hotpath did not start (see above and $data/log/)"; }
	sleep 0.5
done
lane_credentials_ready "$data" || die "the backend was not ready within 120 s (see $data/log/)"
wait "$builder" || { builder=; die "building the guest image failed (see above)"; }
builder=
stage image+backend

say "run folder $run (kept if the lane fails)"
step "booting the guest (kernel $release, QEMU software emulation)"
# The guest's agent kills itself (SIGKILL) at the redirect of its first kernel install: checks.py's
# console flow then sees the kernel clean and the restarted agent finish the install it is sent again.
LANE_AGENT_KILL_AT=entry lane_prepare "$run" "$data" "http://127.0.0.1:$http" "$grpc" test
LANE_TIMEOUT=$(left) "$lane_dir/boot.sh" "$run" >"$run/boot.out" 2>&1 &
qemu=$!
# The second guest, booted beside the first with no backend (guest/jobs.sh's kmod job): hotpath.ko's own
# proofs and the agent's kernel target without the daemon (ktarget, jump labels, static calls, livepatch,
# a draining heap). Each guest is one emulator thread, so the two jobs take a host core each instead of
# one after the other on one (they took ~120 s of the first guest's ~225 s). $run/kmod-done says when
# its job ended ("done"), or "FAIL" and why (the same stall and panic checks as the first guest's).
run2=$run/kmod
LANE_HOSTNAME=hotpath-lane-kmod lane_prepare "$run2" - - 0 kmod
LANE_TIMEOUT=$(left) "$lane_dir/boot.sh" "$run2" >"$run2/boot.out" 2>&1 &
qemu2=$!
(
	(lane_wait "$run2/results.log" '^@@done' "$(left)" "$qemu2" "the second guest's job did not finish") \
		>"$run/kmod-wait.out" 2>&1
	if [ $? = 0 ]; then echo done; else echo "FAIL $(sed -n 's/^FAIL - //p' "$run/kmod-wait.out" | head -n 1)"; fi \
		>"$run/kmod-done.tmp"
	mv "$run/kmod-done.tmp" "$run/kmod-done"
) &
kwaiter=$!
lane_wait "$run/console.log" '^LANE net-up' "$(left)" "$qemu" "the guest did not bring its network up"
stage boot
step "guest network up"
lane_wait "$run/console.log" 'hotpathd: welcome' "$(left)" "$qemu" "the guest's agent did not reach the backend"
stage agent-connect
step "guest agent connected; checking the guest as a host while its test job runs"
# checks.py starts now: the checks of the guest as a host (its catalog, modules, code) need only its
# agent, and run on the host while the job runs in the guest; the rest waits for the job's end, which
# this script tells it by writing $run/job-done (with the host's steps for the time table).
# HOTPATH_GRPC_PORT: where console.spec.ts's scripted agents (fakes of the guest's build) connect.
HOTPATH_GRPC_PORT=$grpc "$repo_root/backend/.venv/bin/python" "$lane_dir/checks.py" --url "http://127.0.0.1:$http" \
	--password-file "$data/admin-password" --results "$run/results.log" \
	--ko "$build/stage/lane/hotpath_lane.ko" --release "$release" --hotpath-ko "$build/stage/lane/hotpath.ko" \
	--dkms-version "$("$repo_root/deploy/dkms/install.sh" --version)" --deadline "$(($(date +%s) + $(left)))" \
	--e2e "$repo_root/e2e" --run "$run" --job-done "$run/job-done" \
	--results-kmod "$run2/results.log" --kmod-done "$run/kmod-done" &
checker=$!
lane_wait "$run/results.log" '^@@done' "$(left)" "$qemu" "the guest's test job did not finish"
stage rest-of-job
step "guest test job done"
echo "$times" >"$run/job-done.tmp" && mv "$run/job-done.tmp" "$run/job-done"
wait "$checker"
rc=$?
checker=
step "checks done (fetching took $((t0 - t_fetch)) s before that)"
summarized=1
exit $rc
