#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# Helpers the lane's guest scripts share (sourced as /lane/lib.sh by klivepatch.sh and kdrain.sh).

num() { echo $(($1)); } # busybox arithmetic wraps kernel addresses (decimal or hex) alike

# within S CMD...: run CMD until it succeeds, every 0.2 s, for at most S s of guest time (a hang bound).
within() {
	lim=$(($1 * 100))
	shift
	w0=$(cut -d' ' -f1 /proc/uptime | tr -d .)
	while ! "$@"; do
		[ $(($(cut -d' ' -f1 /proc/uptime | tr -d .) - w0)) -lt $lim ] || return 1
		sleep 0.2
	done
}
