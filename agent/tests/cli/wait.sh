# SPDX-License-Identifier: Apache-2.0
# Shared by the command-line tests (sourced): wait for a process started in the background by what
# it shows, never by a guessed delay (`prog &` forks a shell that has yet to exec prog; on a loaded
# machine that can take seconds). Each wait gives up after HANG_S seconds (a hang, not a slow start).
HANG_S=${HOTPATH_HANG_S:-120}

# wait_for FILE PATTERN: until FILE holds a line matching PATTERN (grep -E); 1 after HANG_S s.
wait_for() {
	local end=$((SECONDS + HANG_S))
	until grep -Eq -- "$2" "$1" 2>/dev/null; do
		[ $SECONDS -lt $end ] || { echo "no '$2' in $1 after $HANG_S s"; return 1; }
		sleep 0.05
	done
}

# wait_in_sleep PID: until process PID is blocked in nanosleep or clock_nanosleep (x86-64 syscalls
# 35 and 230, /proc/PID/syscall), i.e. it reached the sleep of its main loop: its program is exec'd
# and loaded, libraries and all. 1 when PID is gone or after HANG_S s.
wait_in_sleep() {
	local end=$((SECONDS + HANG_S)) nr
	while :; do
		kill -0 "$1" 2>/dev/null || { echo "process $1 is gone"; return 1; }
		read -r nr _ <"/proc/$1/syscall" 2>/dev/null
		[ "${nr:-}" = 35 ] || [ "${nr:-}" = 230 ] && return 0
		[ $SECONDS -lt $end ] || { echo "process $1 never slept in $HANG_S s (syscall ${nr:-?})"; return 1; }
		sleep 0.05
	done
}
