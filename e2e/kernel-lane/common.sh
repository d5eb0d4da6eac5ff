# SPDX-License-Identifier: Apache-2.0
# Shared by the kernel lane's scripts (sourced, not run): where the cache lives, how a step reports
# and fails, and how the lane finds what fetch.sh unpacked.
#
#   HOTPATH_LANE_CACHE   cache folder (default: .cache/kernel-lane at the top of the repository,
#                        ignored by git); fetch.sh fills it once, later runs reuse it
lane_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$lane_dir/../.." && pwd)
lane_cache=${HOTPATH_LANE_CACHE:-$repo_root/.cache/kernel-lane}
# What the guest calls this machine under QEMU's user networking.
lane_host_addr=10.0.2.2

say() { printf '[lane] %s\n' "$*"; }
die() { printf '[lane] error: %s\n' "$*" >&2; exit 1; }

# lane_abi: the kernel ABI fetch.sh unpacked last (for example 6.1.0-56), or fail with what to run.
lane_abi() {
	[ -s "$lane_cache/current" ] || die "the kernel lane is not fetched: run e2e/kernel-lane/fetch.sh"
	cat "$lane_cache/current"
}

# lane_paths: set the variables every later step uses, from the fetched ABI.
lane_paths() {
	abi=$(lane_abi)
	release=$abi-amd64
	kroot=$lane_cache/$abi/root
	vmlinuz=$kroot/boot/vmlinuz-$release
	kmodules=$kroot/lib/modules/$release/kernel
	kheaders=$kroot/usr/src/linux-headers-$release
	busybox=$kroot/bin/busybox
	build=$lane_cache/$abi/build
	for f in "$vmlinuz" "$busybox" "$kheaders/Makefile"; do
		[ -e "$f" ] || die "the lane cache is incomplete ($f is missing): remove $lane_cache/$abi and run fetch.sh again"
	done
}

# lane_log_tail LOG: the last lines of the guest's serial console, for an error message.
lane_log_tail() {
	echo "--- last lines of the guest's serial console ($1) ---" >&2
	tail -n "${LANE_TAIL_LINES:-40}" "$1" 2>/dev/null | tr -d '\r' >&2
	echo "---" >&2
}

# lane_guest_gone LOG: why the guest stopped, read from its console.
lane_guest_gone() {
	if grep -q 'Kernel panic' "$1" 2>/dev/null; then
		echo "the guest kernel panicked: $(grep -m1 'Kernel panic' "$1" | tr -d '\r')"
	elif grep -q '^LANE FAIL' "$1" 2>/dev/null; then
		echo "the guest's init gave up: $(grep -m1 '^LANE FAIL' "$1" | tr -d '\r' | cut -c11-)"
	else
		echo "QEMU exited before the guest was ready"
	fi
}

# lane_wait FILE PATTERN SECONDS PID WHAT: wait until FILE (the guest's console.log or
# results.log) has a line matching PATTERN (grep -E), while QEMU (PID) runs. Fails with the reason
# and the tail of the serial console (console.log beside FILE) when the guest gives up, panics or
# exits, when the guest says nothing new (neither its console nor its results grow) for LANE_STALL
# seconds (default 600), or when SECONDS pass. The stall is what tells a hang: the guest runs under
# TCG, so a loaded machine slows every step of it several times over, but a guest that works keeps
# writing (the agent's log, each check's result); the SECONDS bound only caps the whole wait.
lane_wait() {
	local file=$1 pattern=$2 secs=$3 pid=$4 what=$5 start=$SECONDS
	local log; log=$(dirname "$file")/console.log
	local stall=${LANE_STALL:-600} size=-1 now quiet=$SECONDS
	while ! grep -qE "$pattern" "$file" 2>/dev/null; do
		if grep -qE '^LANE FAIL|Kernel panic' "$log" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null; then
			lane_log_tail "$log"
			die "$what: $(lane_guest_gone "$log")"
		fi
		# Their sizes, not their bytes (read every half second); either file may not exist yet, and
		# stat's failure must not end a caller under -e.
		now=$(stat -c %s "$log" "$file" 2>/dev/null || true)
		if [ "$now" != "$size" ]; then
			size=$now quiet=$SECONDS
		elif [ $((SECONDS - quiet)) -ge "$stall" ]; then
			lane_log_tail "$log"
			die "$what: the guest wrote nothing for $stall s (a hang)"
		fi
		if [ $((SECONDS - start)) -ge "$secs" ]; then
			lane_log_tail "$log"
			die "$what: not seen within $secs s"
		fi
		sleep 0.5
	done
}

# lane_prepare RUNDIR DATA_DIR URL GRPC_PORT JOB: write what the guest finds under /lane for one boot
# (RUNDIR/boot/lane/): boot.conf and the agent's credentials (credentials.sh). The guest's host id
# is derived from this machine's and the data folder's identity, so the lane guest of one
# installation is the same host in its backend from one boot to the next. DATA_DIR "-" means no
# backend: the guest's agent daemon is not started. URL is the backend's console and REST API.
lane_prepare() {
	local run=$1 data=$2 url=$3 grpc=$4 job=$5 args= host_id server=
	mkdir -p "$run/boot/lane"
	host_id=$(printf 'hotpath-kernel-lane\n%s\n%s\n' "$(cat /etc/machine-id 2>/dev/null)" "$(cd "$data" 2>/dev/null && pwd)" |
		sha256sum | cut -c1-32)
	if [ "$data" != - ]; then
		args=$(lane_credentials "$data" "$url" "$host_id" "$run/boot/lane") ||
			die "the guest's agent credentials could not be prepared (see above)"
		server=$lane_host_addr:$grpc
	fi
	# LANE_SAMPLE_HZ: the guest agent's sampling rate per CPU (hotpathd run --frequency). Every sample
	# (an interrupt, its call chain walked) is emulated on the one host thread that runs the guest's
	# CPUs, so at the agent's default 997 Hz the sampler alone took about half of it: an install and
	# revert cycle of guest/ktarget.sh took 20-24 s of guest time beside `hotpathd sample --stacks`
	# at 997 Hz and 12 s without (2026-11-27, load 3). Samples still flow at the lower rate; every
	# count the lane checks comes from probes, not samples.
	# LANE_ARM_TIMEOUT is a bound for a hang, not a figure: the agent arms a kernel measurement in a
	# few seconds on a quiet host, but under emulation on a loaded one it took over 20 s (2026-11-27).
	cat >"$run/boot/lane/boot.conf" <<CONF
LANE_SERVER=$server
LANE_HOSTNAME=${LANE_HOSTNAME:-hotpath-lane}
LANE_HOST_ID=$host_id
LANE_AGENT_ARGS="$args"
LANE_JOB=$job
LANE_SAMPLE_HZ=${LANE_SAMPLE_HZ:-97}
LANE_N_READS=${LANE_N_READS:-1000}
LANE_N_STEPS=${LANE_N_STEPS:-1001}
LANE_NAPS=${LANE_NAPS:-5}
LANE_NAP_MS=${LANE_NAP_MS:-100}
LANE_MEASURE_SECONDS=${LANE_MEASURE_SECONDS:-8}
LANE_ARM_TIMEOUT=${LANE_ARM_TIMEOUT:-300}
LANE_KMOD_CYCLES=${LANE_KMOD_CYCLES:-200}
LANE_KTARGET_CYCLES=${LANE_KTARGET_CYCLES:-10}
LANE_KCYCLES=${LANE_KCYCLES:-20}
LANE_AGENT_KILL_AT=${LANE_AGENT_KILL_AT:-}
CONF
}
