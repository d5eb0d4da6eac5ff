#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# Livepatch's reliable-stack check through a kernel copy (issue 18), in the lane's guest. A livepatch
# transition switches a sleeping task only once the task's stack walks reliably: the ORC unwinder must
# get from the task's saved registers through every frame to its user-mode entry without an error, or
# the task keeps the old code and the transition waits. A task asleep inside a copy that hotpath.ko
# installed has a frame in the copy, which the unwinder can cross only with the ORC entries hotpath.ko
# gives the copy from the plan's position map.
#
# One `hotpathd install --cycles 2 --check "/lane/klivepatch.sh check"` of ktarget.sh's plan of lane_mix
# (/tmp/kplan.json; the kernel's model opened once), with HOTPATH_TEST_SKIP_UNWIND=2 (the agent's test
# hook: the second install gets no names or ORC entries, as on a kernel whose ORC table is not in
# kallsyms). In each cycle, while installed, a task writes "mixhold 7" to /proc/hotpath_lane: lane_write
# calls the copy (its call site is patched), the copy calls lane_here, and lane_here puts the task to
# sleep until "release" (a killable wait: livepatch's fake signals leave it asleep). Then the lane's
# livepatch (module/hotpath_lanepatch.c, a patch of cmdline_proc_show) is loaded:
#   cycle 1 (the copy's entries registered): /proc/PID/stack names lane_mix [hotpath] inside the heap,
#     between lane_hold_wait and lane_write; the patch's transition reaches 0 (every task switched) while the
#     sleeper is still asleep in the copy (its stack still names the copy afterwards), /proc/cmdline is
#     the patch's, and livepatch never found the sleeper's stack unreliable;
#   cycle 2, the control (no entries): kallsyms names no copy; livepatch reports the sleeper's stack
#     unreliable (its own debug line, "klp_try_switch_task: sh:PID has an unreliable stack", turned on
#     through dynamic debug) while the transition is still 1 and the sleeper still asleep in the heap:
#     the same check as in cycle 1 fails there, and for the copy's missing entries alone. Once released,
#     the sleeper returns to user mode, switches there, and the transition ends.
# Each cycle then releases the sleeper (its result is the original's), disables the patch (writing 0 to
# enabled: a second transition), unloads it, and checks /proc/cmdline is the original again; every
# wait is a bound for a hang (LANE_ARM_TIMEOUT s of guest time), never a check of a time. The sleeper has
# left the copy before the revert frees its heap. Lines "ok - NAME: DETAIL" / "FAIL - NAME: DETAIL" are
# checks (checks.py takes each as a lane check); the last line is
#   klivepatch: patched with a task asleep in the copy P/1, control held back by the copy's stack C/1,
#   patches reverted R/2, wrong W
export PATH=/bin:/usr/bin
P=/sys/module/hotpath_lane/parameters
L=/sys/kernel/livepatch/hotpath_lanepatch
DDEBUG=/sys/kernel/debug/dynamic_debug/control
bound=${LANE_ARM_TIMEOUT:-300}

ok() { echo "ok - $*"; }
bad() {
	echo "FAIL - $*"
	nbad=$((nbad + 1))
}
. /lane/lib.sh # num, within


# `klivepatch.sh check`: hotpathd runs it while each cycle is installed and once it is reverted
# (HOTPATH_CYCLE, HOTPATH_INSTALLED, HOTPATH_HEAP, HOTPATH_HEAP_BYTES), with the parent's KL_*.
if [ "${1:-}" = check ]; then
	nbad=0
	heap=$(num "$HOTPATH_HEAP")
	in_heap() {
		a=$(num "$1")
		[ "$a" -ge "$heap" ] && [ "$a" -lt $((heap + HOTPATH_HEAP_BYTES)) ]
	}
	held() { [ "$(cat $P/held)" = "$1" ]; }
	gone() { ! kill -0 "$sleeper" 2>/dev/null; }
	transition() { [ "$(cat $L/transition 2>/dev/null)" = "$1" ]; }
	unpatched() { [ ! -e $L ]; }
	unloaded() { rmmod hotpath_lanepatch 2>/dev/null; }
	unreliable() { dmesg | grep -q "klp_try_switch_task: [^ ]*:$sleeper has an unreliable stack"; }
	# Asleep: state D (the killable wait) with lane_here's count of sleepers at 1.
	asleep() { held 1 && [ "$(cut -d' ' -f3 /proc/$sleeper/stat 2>/dev/null)" = D ]; }
	# The sleeper's stack as /proc/PID/stack has it, frames joined with spaces.
	stack() { sed 's/^\[<[0-9a-f]*>\] //' "/proc/$sleeper/stack" 2>/dev/null | tr '\n' ' '; }
	# lane_mix's frame in the copy: named by kallsyms as the original, in hotpath, with lane_hold_wait
	# (where it sleeps; lane_here jumps to it, a tail call, so lane_here has no frame of its own) above it
	# and lane_write (the caller whose call site the install patched) below.
	through_copy() {
		echo "$1" | grep -qE 'lane_hold_wait\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath_lane\] (lane_here\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath_lane\] )?lane_mix\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath\] lane_write\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath_lane\]'
	}
	c=$HOTPATH_CYCLE
	if [ "$HOTPATH_INSTALLED" = 0 ]; then
		held 0 && ! grep -q hotpath_lanepatch /proc/modules && [ "$(cat /proc/cmdline)" = "$KL_CMDLINE" ] &&
			ok "cycle $c reverted: nobody asleep in lane_mix, the livepatch unloaded, /proc/cmdline the original" ||
			bad "cycle $c reverted: held $(cat $P/held), $(grep hotpath_lanepatch /proc/modules), /proc/cmdline '$(cat /proc/cmdline)'"
		[ $nbad = 0 ] || echo "wrong $c $nbad" >>"$KL_TALLY"
		[ $nbad = 0 ]
		exit $?
	fi
	if [ "$c" = 1 ]; then
		label=patched
		ks=$(grep -E ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms | head -n 1)
		[ -n "$ks" ] && in_heap "0x${ks%% *}" || bad "cycle 1: kallsyms names no copy in the heap: '$ks'"
	else
		label=control
		grep -qE ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms &&
			bad "control: the copy has names though HOTPATH_TEST_SKIP_UNWIND=2: $(grep -E ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms)" ||
			ok "control: the second install gave the copy no names or ORC entries (HOTPATH_TEST_SKIP_UNWIND=2): kallsyms names no copy"
	fi
	echo "func klp_try_switch_task +p" >$DDEBUG
	# The sleeper: lane_write -> the copy of lane_mix -> lane_here, asleep there until "release".
	sh -c 'echo "mixhold 7" >/proc/hotpath_lane' &
	sleeper=$!
	if ! within "$bound" asleep; then
		bad "$label: the task writing 'mixhold 7' (pid $sleeper) is not asleep in lane_here after $bound s: held $(cat $P/held)"
		echo release >/proc/hotpath_lane
		wait $sleeper
		exit 1
	fi
	where=$(cat $P/mix_where)
	in_heap "$where" && ok "$label: pid $sleeper sleeps in lane_here, called from the copy (return address $where in the heap $HOTPATH_HEAP)" ||
		bad "$label: pid $sleeper sleeps in lane_here, called from $where, not from the heap $HOTPATH_HEAP"
	if [ $label = patched ]; then
		# (read again if the first read raced the task's last steps into schedule())
		within "$bound" eval 'st=$(stack); through_copy "$st"' && ok "/proc/PID/stack of the sleeper names the copy as lane_mix [hotpath] between lane_hold_wait and lane_write: $st" ||
			bad "/proc/PID/stack of the sleeper through the copy: '$st'"
	else
		st=$(stack)
		echo "the control's /proc/$sleeper/stack (the unwinder without the copy's entries): $st"
	fi
	if ! insmod /lane/hotpath_lanepatch.ko; then
		bad "$label: insmod hotpath_lanepatch.ko failed"
		echo release >/proc/hotpath_lane
		wait $sleeper
		echo "wrong $c $nbad" >>"$KL_TALLY"
		exit 1
	fi
	if [ $label = patched ]; then
		if within "$bound" transition 0; then
			st=$(stack)
			held 1 && ! gone && in_heap "$(cat $P/mix_where)" && through_copy "$st" &&
				ok "livepatch's transition ended (transition 0: every task switched, each stack reliable) while pid $sleeper slept in the copy, still there after it: $st" ||
				bad "livepatch's transition ended, but the sleeper is no longer in the copy: held $(cat $P/held), stack '$st'"
			grep -q hotpath_lanepatch /proc/cmdline && ok "the patch took: /proc/cmdline is cmdline_proc_show's replacement" ||
				bad "the patch did not take: /proc/cmdline is '$(cat /proc/cmdline)'"
			unreliable && bad "livepatch found pid $sleeper's stack unreliable: $(dmesg | grep "$sleeper has an unreliable" | head -n 1)" ||
				ok "livepatch never found the sleeper's stack through the copy unreliable"
		else
			bad "livepatch's transition did not end within $bound s with pid $sleeper asleep in the copy: $(dmesg | grep -m 3 klp_try_switch_task)"
		fi
	else
		if within "$bound" unreliable; then
			transition 1 && held 1 && in_heap "$(cat $P/mix_where)" &&
				ok "control: without the copy's entries livepatch finds the sleeper's stack unreliable ($(dmesg | grep -m 1 "$sleeper has an unreliable" | sed 's/^\[[^]]*\] //')) and the transition waits (transition 1)" ||
				bad "control: livepatch said the stack is unreliable, but transition '$(cat $L/transition 2>/dev/null)', held $(cat $P/held)"
		else
			bad "control: livepatch never reported pid $sleeper's stack unreliable within $bound s (transition '$(cat $L/transition 2>/dev/null)'): the check cannot tell a copy without entries"
		fi
	fi
	# Release the sleeper: it leaves the copy and returns to user mode (where a task still unpatched switches).
	echo release >/proc/hotpath_lane
	wait $sleeper
	held 0 && [ "$(cat $P/mix_result)" = "$KL_MIX7" ] && ok "$label: released, lane_mix's result through the copy is the original's ($KL_MIX7)" ||
		bad "$label: released: held $(cat $P/held), result $(cat $P/mix_result), the original's $KL_MIX7"
	if [ $label = control ]; then
		within "$bound" transition 0 && ok "control: once the sleeper left the copy, the transition ended" ||
			bad "control: the transition did not end within $bound s after the release"
	fi
	echo "func klp_try_switch_task -p" >$DDEBUG
	# Disable (the unpatch transition), then unload.
	echo 0 >$L/enabled
	if within "$bound" unpatched && within "$bound" unloaded && [ "$(cat /proc/cmdline)" = "$KL_CMDLINE" ]; then
		ok "$label: the patch disabled and unloaded, /proc/cmdline the original again"
		echo "reverted $c" >>"$KL_TALLY"
	else
		bad "$label: the patch disabled and unloaded: $L $([ -e $L ] && echo still there), $(grep hotpath_lanepatch /proc/modules), /proc/cmdline '$(cat /proc/cmdline)'"
	fi
	[ $nbad = 0 ] && echo "$label $c" >>"$KL_TALLY" || echo "wrong $c $nbad" >>"$KL_TALLY"
	[ $nbad = 0 ]
	exit $?
fi

# The parent: ktarget.sh's plan, the original's result for 7 and /proc/cmdline, then the two cycles.
nbad=0
t0=$(cut -d' ' -f1 /proc/uptime)
if [ ! -s /tmp/kplan.json ] || ! grep -q '"status":"ok"' /tmp/kplan.json; then
	bad "no plan of lane_mix from ktarget.sh (/tmp/kplan.json)"
	echo "klivepatch: patched with a task asleep in the copy 0/1, control held back by the copy's stack 0/1, patches reverted 0/2, wrong 1"
	exit 1
fi
[ -e $DDEBUG ] || bad "no dynamic debug control at $DDEBUG: the control cannot read livepatch's verdict"
log0=$(dmesg | wc -l)
echo "mix 7" >/proc/hotpath_lane
KL_MIX7=$(cat $P/mix_result)
KL_CMDLINE=$(cat /proc/cmdline)
KL_TALLY=/tmp/klivepatch-tally
: >$KL_TALLY
export KL_MIX7 KL_CMDLINE KL_TALLY LANE_ARM_TIMEOUT
HOTPATH_TEST_SKIP_UNWIND=2 hotpathd install /tmp/kplan.json --cycles 2 --check "/lane/klivepatch.sh check" \
	--state-dir /tmp/klivepatch-state --json --quiet >/tmp/klivepatch.out
rc=$?
sum=$(grep '"status"' /tmp/klivepatch.out | tail -n 1)
echo "in one process: $sum"
[ $rc = 0 ] && echo "$sum" | grep -q '"done":2' && echo "$sum" | grep -q '"wrong":0' ||
	bad "hotpathd install --cycles 2: status $rc: $(tail -n 3 /tmp/klivepatch.out)"
[ -s $KL_TALLY ] || bad "the check never ran (hotpathd install --cycles 2 --check)"
# Nothing left behind: no patch, nobody held, lane_mix not traced.
grep -q hotpath_lanepatch /proc/modules && { bad "the livepatch is still loaded"; rmmod hotpath_lanepatch; }
[ "$(cat $P/held)" = 0 ] || { bad "tasks still held in lane_here: $(cat $P/held)"; echo release >/proc/hotpath_lane; }
bads=$(dmesg | tail -n +$((log0 + 1)) | grep -E 'WARNING:|Oops|BUG:|Call Trace|general protection' | head -n 3)
[ -z "$bads" ] && ok "the kernel log is clean after the livepatch transitions through the copy" ||
	bad "the kernel log after the livepatch transitions: $bads"
for k in $(sed -n 's/^wrong [0-9]* //p' $KL_TALLY); do nbad=$((nbad + k)); done
p=$(grep -c '^patched ' $KL_TALLY)
ctl=$(grep -c '^control ' $KL_TALLY)
rv=$(grep -c '^reverted ' $KL_TALLY)
echo "klivepatch.sh took $(awk -v a="$t0" '{ printf "%.1f", $1 - a }' /proc/uptime) s of guest time (under emulation)"
echo "klivepatch: patched with a task asleep in the copy $p/1, control held back by the copy's stack $ctl/1, patches reverted $rv/2, wrong $nbad"
[ $nbad = 0 ] && [ "$p" = 1 ] && [ "$ctl" = 1 ] && [ "$rv" = 2 ]
