#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run shell commands inside the kernel lane's guest and print what they print: a quick way to try
# hotpathd (or anything else) on the 6.1 kernel, where kprobes, fentry and modules exist.
#
#   e2e/kernel-lane/run-in-guest.sh 'hotpathd measure kernel vfs_read --seconds 3 --json' ...
#
# Each argument is one command line, run in order by the guest's busybox sh as root, with
# /usr/bin/hotpathd (HOTPATHD, default agent/build/hotpathd), the test module hotpath_lane loaded and
# /lane/lanework at hand. No backend is involved. Prints each command's output between
# "@@begin command-N" and "@@end command-N rc=STATUS" (from the guest's results serial port), then
# exits 1 if any command failed. LANE_TIMEOUT (default 300) bounds the whole boot.
set -euo pipefail
. "$(dirname "$0")/common.sh"
[ $# -gt 0 ] || die "usage: run-in-guest.sh COMMAND... (each a shell command line run in the guest)"
"$lane_dir/fetch.sh" >&2
lane_paths
"$lane_dir/build.sh" >/dev/null
run=$(mktemp -d /tmp/hotpath-guest.XXXXXX)
lane_prepare "$run" - - 0 commands
printf '%s\n' "$@" >"$run/boot/lane/commands"
LANE_TIMEOUT=${LANE_TIMEOUT:-300} "$lane_dir/boot.sh" "$run" >"$run/boot.out" 2>&1 &
qemu=$!
stop() { kill -TERM "$qemu" 2>/dev/null || true; wait "$qemu" 2>/dev/null || true; }
trap stop EXIT
lane_wait "$run/results.log" '^@@done' "${LANE_TIMEOUT:-300}" "$qemu" "the guest did not run the commands" >&2
tr -d '\r' <"$run/results.log" | sed '/^@@done/,$d'
say "guest console: $run/console.log" >&2
rc=0
grep -qE '^@@end command-[0-9]+ rc=[1-9]' "$run/results.log" && rc=1
stop
trap - EXIT
exit $rc
