#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# A code heap freed while a task sleeps inside it (issue 18), in the lane's guest. hotpath.ko frees a
# heap after an RCU-tasks grace period, which a task asleep in a copy passes (a voluntary sleep is
# quiescent for it), so the module also walks every task's stack, as livepatch does, and keeps a heap a
# task may still be inside: the heap drains (its slot, names and ORC entries kept, the module pinned)
# until a re-check finds it empty (hotpath.ko's README, docs/decisions.md).
#
# With ktarget.sh's plan of lane_mix (/tmp/kplan.json) installed by a background `hotpathd install`, a
# task writes "mixhold 7" to /proc/hotpath_lane: lane_write calls the copy (its call site is patched), the
# copy calls lane_here, which puts the task to sleep until "release". Then `hotpathd revert kernel`
# reverts the install while the task sleeps in the copy:
#   - the revert succeeds (HEAP_FREE's answer is unchanged) and the heap drains:
#     /sys/module/hotpath/parameters/draining reads 1, the kernel log names the sleeper as the task inside
#     it, the copy keeps its name (kallsyms) and the sleeper's stack still walks through it;
#   - after at least 3 s of guest time (three of the drain's re-checks) it still drains;
#   - rmmod hotpath is refused while it drains (the drain holds the module);
#   - released, the sleeper returns through the copy with the original's result (no oops);
#   - the heap is then released: draining reads 0, the kernel log says so, kallsyms names no copy;
#   - the kernel log has no warning, oops or BUG.
# Every wait is a bound for a hang (LANE_ARM_TIMEOUT s of guest time), never a check of a time. Lines
# "ok - NAME: DETAIL" / "FAIL - NAME: DETAIL" are checks (checks.py takes each as a lane check); the
# last line is
#   kdrain: revert with a task asleep in the copy R/1, the heap drained after its release D/1, wrong W
export PATH=/bin:/usr/bin
P=/sys/module/hotpath_lane/parameters
DR=/sys/module/hotpath/parameters/draining
S=/tmp/kdrain-state
bound=${LANE_ARM_TIMEOUT:-300}
nbad=0
reverted=0
drained=0

ok() { echo "ok - $*"; }
bad() {
	echo "FAIL - $*"
	nbad=$((nbad + 1))
}
. /lane/lib.sh # num, within
summary() {
	echo "kdrain.sh took $(awk -v a="$t0" '{ printf "%.1f", $1 - a }' /proc/uptime) s of guest time (under emulation)"
	echo "kdrain: revert with a task asleep in the copy $reverted/1, the heap drained after its release $drained/1, wrong $nbad"
}


in_heap() {
	a=$(num "$1")
	h=$(num "$heap")
	[ "$a" -ge "$h" ] && [ "$a" -lt $((h + heap_len)) ]
}
draining() { [ "$(cat $DR 2>/dev/null)" = "$1" ]; }
held() { [ "$(cat $P/held)" = "$1" ]; }
asleep() { held 1 && [ "$(cut -d' ' -f3 /proc/$sleeper/stat 2>/dev/null)" = D ]; }
installed() { grep -q '"status":"installed"' /tmp/kdrain.out || ! kill -0 $holder 2>/dev/null; }
copy_named() { grep -qE ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms; }
stack() { sed 's/^\[<[0-9a-f]*>\] //' "/proc/$sleeper/stack" 2>/dev/null | tr '\n' ' '; }
log_since() { dmesg | tail -n +$((log0 + 1)); }
release() {
	echo release >/proc/hotpath_lane
	wait $sleeper
}

t0=$(cut -d' ' -f1 /proc/uptime)
if [ ! -s /tmp/kplan.json ] || ! grep -q '"status":"ok"' /tmp/kplan.json; then
	bad "no plan of lane_mix from ktarget.sh (/tmp/kplan.json)"
	summary
	exit 1
fi
if [ ! -r $DR ]; then
	bad "hotpath.ko has no draining parameter ($DR): a module without the drain"
	summary
	exit 1
fi
draining 0 || bad "a heap drains before the frame: draining $(cat $DR)"
log0=$(dmesg | wc -l)
echo "mix 7" >/proc/hotpath_lane
orig=$(cat $P/mix_result)

# The install, held by a background hotpathd until `hotpathd revert kernel`.
: >/tmp/kdrain.out
hotpathd install /tmp/kplan.json --state-dir $S --json --quiet >/tmp/kdrain.out 2>/tmp/kdrain.err &
holder=$!
within "$bound" installed
heap=$(sed -n 's/.*"heap":"\(0x[0-9a-f]*\)".*/\1/p' /tmp/kdrain.out)
heap_len=$(sed -n 's/.*"heap_bytes":\([0-9]*\).*/\1/p' /tmp/kdrain.out)
if [ -z "$heap" ] || [ -z "$heap_len" ]; then
	bad "hotpathd install of lane_mix's plan: $(tail -n 3 /tmp/kdrain.out /tmp/kdrain.err)"
	kill $holder 2>/dev/null
	wait $holder
	summary
	exit 1
fi

# The sleeper: lane_write -> the copy of lane_mix -> lane_here, asleep there until "release".
sh -c 'echo "mixhold 7" >/proc/hotpath_lane' &
sleeper=$!
if ! within "$bound" asleep; then
	bad "the task writing 'mixhold 7' (pid $sleeper) is not asleep in lane_here after $bound s: held $(cat $P/held)"
	release
	hotpathd revert kernel --state-dir $S >/dev/null 2>&1
	wait $holder
	summary
	exit 1
fi
where=$(cat $P/mix_where)
in_heap "$where" && ok "pid $sleeper sleeps in lane_here, called from the copy (return address $where in the heap $heap)" ||
	bad "pid $sleeper sleeps in lane_here, called from $where, not from the heap $heap"

# The revert while it sleeps there.
hotpathd revert kernel --state-dir $S >/tmp/kdrain-rev.out 2>&1
rc=$?
wait $holder
[ $rc = 0 ] &&
	ok "hotpathd revert kernel succeeded with pid $sleeper asleep in the copy: $(tail -n 1 /tmp/kdrain-rev.out)" ||
	bad "hotpathd revert kernel with pid $sleeper asleep in the copy: status $rc: $(tail -n 3 /tmp/kdrain-rev.out /tmp/kdrain.err)"
# What the install's process did is done: the device is closed, so whatever hotpath.ko still keeps is
# the drain's.
if draining 1 && asleep; then
	ok "the heap drains: $DR reads 1 while pid $sleeper sleeps in it"
	reverted=1
else
	bad "after the revert with pid $sleeper asleep in the copy: draining '$(cat $DR)', held $(cat $P/held)"
fi
# What an operator sees of it: `hotpathd installed` names the draining heap (and its JSON counts it).
hotpathd installed --state-dir $S >/tmp/kdrain-ins.out 2>&1
hotpathd installed --state-dir $S --json >/tmp/kdrain-ins.json 2>&1
grep -q '^hotpath.ko: 1 kernel code heap draining' /tmp/kdrain-ins.out && grep -q '"kernel_heaps_draining":1' /tmp/kdrain-ins.json &&
	ok "hotpathd installed says a heap drains: $(grep '^hotpath.ko' /tmp/kdrain-ins.out)" ||
	bad "hotpathd installed does not say a heap drains: $(cat /tmp/kdrain-ins.out) $(head -c 200 /tmp/kdrain-ins.json)"
line=$(log_since | grep -m 1 'hotpath: heap [0-9]* drains:')
echo "$line" | grep -q "drains: sh:$sleeper has a return address inside it" &&
	ok "the kernel log names the sleeper as the task inside the heap: ${line#*] }" ||
	bad "the kernel log does not name pid $sleeper as inside the heap: '$line'"
st=$(stack)
copy_named && echo "$st" | grep -qE 'lane_mix\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath\]' &&
	ok "while it drains the copy keeps its name and ORC entries: the sleeper's stack walks through it: $st" ||
	bad "while it drains: kallsyms '$(grep -E ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms)', the sleeper's stack '$st'"
# Three of the drain's re-checks (one a second) later, still asleep there, still draining.
sleep 3
draining 1 && asleep && in_heap "$(cat $P/mix_where)" &&
	ok "3 s of guest time later the heap still drains (its re-checks still find pid $sleeper inside)" ||
	bad "3 s later: draining '$(cat $DR)', held $(cat $P/held): the heap was released with the task inside"
# rmmod is refused while a heap drains: the drain holds the module.
if out=$(rmmod hotpath 2>&1); then
	bad "rmmod hotpath succeeded while a heap drains"
	insmod /lane/hotpath.ko
else
	grep -qw hotpath /proc/modules && ok "rmmod hotpath is refused while the heap drains: $out" ||
		bad "rmmod hotpath failed but the module is gone: $out"
fi

# Released, the sleeper returns through the copy: the heap was not int3.
release
held 0 && [ "$(cat $P/mix_result)" = "$orig" ] &&
	ok "released, pid $sleeper returned through the freed copy with the original's result ($orig)" ||
	bad "released: held $(cat $P/held), result $(cat $P/mix_result), the original's $orig"
if within "$bound" draining 0; then
	line=$(log_since | grep -m 1 'hotpath: heap [0-9]* drained:')
	if [ -n "$line" ] && ! copy_named; then
		ok "once the sleeper left, the heap was released: draining 0, kallsyms names no copy, the log says '${line#*] }'"
		drained=1
	else
		bad "draining 0, but the log's line '$line', kallsyms '$(grep -E ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms)'"
	fi
else
	bad "the heap still drains $bound s after the sleeper left: draining $(cat $DR)"
fi
refs=$(cat /sys/module/hotpath/refcnt)
[ "$refs" = 0 ] && ok "hotpath.ko's reference count is 0 again (no open device, no drain)" ||
	bad "hotpath.ko's reference count after the drain: $refs"
bads=$(log_since | grep -E 'WARNING:|Oops|BUG:|Call Trace|general protection|int3' | head -n 3)
[ -z "$bads" ] && ok "the kernel log is clean after the drain" || bad "the kernel log after the drain: $bads"
summary
[ $nbad = 0 ] && [ $reverted = 1 ] && [ $drained = 1 ]
