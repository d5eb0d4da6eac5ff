#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# Static calls in a kernel copy (issue 18): hotpathd plans hotpath_lane:lane_scall, a function with a
# static call site and a static tail-call site of the static call lane_sc, installs the copy through
# hotpath.ko and, while it is installed, updates lane_sc (static_call_update, which rewrites the
# original's two sites and the trampoline): every target must give the results the original gives with
# that target (computed before the install), from the copy (lane_scall's call of lane_scall_here returns
# into the install's heap: /sys/module/hotpath_lane/parameters/scall_where). Then the call is updated in
# a background loop while calls run: each result must be one that some target gives (a call racing an
# update may see either target, as the original's sites may). Lines "ok - NAME: DETAIL" / "FAIL - NAME:
# DETAIL" are checks (checks.py takes each as a lane check); the last line is
#   kscalls: targets S/T as the original, updates U, copy ran R, wrong results W
export PATH=/bin:/usr/bin
P=/sys/module/hotpath_lane/parameters
L=/proc/hotpath_lane
S=/tmp/kscalls-state
inputs="0 1 2 3 5 8 13 21 34 55"
targets=0 tried=0 updates=0 ran=0 wrong=0 holder=
t0=$(cut -d' ' -f1 /proc/uptime)

ok() { echo "ok - $*"; }
bad() { echo "FAIL - $*"; }
num() { echo $(($1)); }
target() { echo "sctarget $1" >$L; }
results() {
	for n in $inputs; do
		echo "scall $n" >$L && printf '%s ' "$(cat $P/scall_result)"
	done
}
summary() { echo "kscalls: targets $targets/$tried as the original, updates $updates, copy ran $ran, wrong results $wrong"; }

# The original's results with each target (0 lane_sc_one, 1 lane_sc_two, 2 __static_call_return0), and
# where it runs.
for t in 0 1 2; do
	target $t
	eval "orig_$t=\"$(results)\""
done
target 0 # the static call's initial target
where0=$(cat $P/scall_where)
if [ "$orig_0" != "$orig_1" ] && [ "$orig_0" != "$orig_2" ] && [ "$orig_1" != "$orig_2" ]; then
	ok "the three targets give three different results of the original"
else
	bad "the three targets give three different results of the original: $orig_0 / $orig_1 / $orig_2"
fi

# Exact block counts of lane_scall with every target, then the plan from them.
: >/tmp/ksprof.err
hotpathd measure kernel hotpath_lane:lane_scall --blocks --metrics count --seconds "${LANE_MEASURE_SECONDS:-8}" \
	--json >/tmp/ksprof.json 2>>/tmp/ksprof.err &
m=$!
i=0
while ! grep -q armed /tmp/ksprof.err && kill -0 $m 2>/dev/null && [ $i -lt 400 ]; do
	sleep 0.1
	i=$((i + 1))
done
for t in 0 1 2; do
	target $t
	results >/dev/null
done
target 0
# Every call to count has returned: the window ends now (SIGINT ends it early), not after its
# --seconds; the counts are the same.
grep -q armed /tmp/ksprof.err && kill -INT $m 2>/dev/null
wait $m
last=$(grep '\[' /proc/kallsyms | cut -d' ' -f1 | sort | tail -n 1)
base=$(printf '0x%x' $(((0x$last + 0x200000) & ~0xfff)))
hotpathd plan kernel hotpath_lane:lane_scall --profile /tmp/ksprof.json --base "$base" --json \
	>/tmp/ksplan.json 2>/tmp/ksplan.err
calls=$(grep -o '"trampoline_calls":[0-9]*' /tmp/ksplan.json | head -n 1 | cut -d: -f2)
tramp=$(grep -o '"trampoline":"0x[0-9a-f]*"' /tmp/ksplan.json | head -n 1 | cut -d'"' -f4)
sct=$(grep ' __SCT__lane_sc[[:space:]]' /proc/kallsyms | cut -d' ' -f1)
if ! grep -q '"status":"ok"' /tmp/ksplan.json; then
	bad "static-call plan: hotpathd plan kernel hotpath_lane:lane_scall is not ok: $(head -c 400 /tmp/ksplan.json) $(tail -n 3 /tmp/ksplan.err)"
	summary
	exit 1
fi
[ "${calls:-0}" -ge 2 ] && [ -n "$tramp" ] && [ "$(num "$tramp")" = "$(num "0x$sct")" ] &&
	ok "static-call plan: lane_scall moves, its $calls static call sites written as calls of the trampoline __SCT__lane_sc ($tramp)" ||
	bad "static-call plan: lane_scall's copy calls the trampoline at ${calls:-no} sites (expected 2, a call and a tail call) at ${tramp:-none}, __SCT__lane_sc is 0x$sct: $(grep -o '"kept_in_place":[^]]*' /tmp/ksplan.json)"

# The install, held by a background hotpathd (as in ktarget.sh).
: >/tmp/ksinst.out
hotpathd install /tmp/ksplan.json --state-dir $S --json --quiet >/tmp/ksinst.out 2>/tmp/ksinst.err &
holder=$!
i=0
while ! grep -q '"status":"installed"' /tmp/ksinst.out; do
	if ! kill -0 $holder 2>/dev/null || [ $i -gt 1200 ]; then
		bad "static-call install: hotpathd install failed: $(cat /tmp/ksinst.out /tmp/ksinst.err | tail -n 3)"
		summary
		exit 1
	fi
	i=$((i + 1))
	sleep 0.05
done
heap=$(num "$(sed -n 's/.*"heap":"\(0x[0-9a-f]*\)".*/\1/p' /tmp/ksinst.out)")
heap_len=$(sed -n 's/.*"heap_bytes":\([0-9]*\).*/\1/p' /tmp/ksinst.out)
in_copy() {
	w=$(num "$(cat $P/scall_where)")
	[ "$w" -ge "$heap" ] && [ "$w" -lt $((heap + heap_len)) ]
}

# Each target in turn while the copy is installed: every update from and to each target.
for t in 0 1 2 0 2 1 0; do
	target $t
	updates=$((updates + 1))
	tried=$((tried + 1))
	got=$(results)
	eval "want=\$orig_$t"
	in_copy && ran=$((ran + 1))
	if [ "$got" = "$want" ]; then
		targets=$((targets + 1))
	else
		wrong=$((wrong + 1))
		echo "target $t installed: results $got, the original's $want"
	fi
done
[ $targets = $tried ] && ok "each target, set while the copy is installed, gives the original's results ($targets updates)" ||
	bad "each target, set while the copy is installed, gives the original's results: $targets of $tried"
[ $ran = $tried ] && ok "the copy ran with every target: lane_scall's call returned into the code heap ($ran of $tried)" ||
	bad "the copy ran with every target: in $ran of $tried"

# Updates racing calls: a background loop updates lane_sc while calls run; each result must be one the
# original could give for its input (n = 21, the eighth input). n is odd, so lane_scall calls lane_sc twice
# (r = lane_sc(n), then the tail call lane_sc(r + n)), and an update between the two gives the first
# call's target and the second's: the original does the same, so every pair of targets is allowed. The
# targets as the module defines them (0 lane_sc_one, 1 lane_sc_two, 2 __static_call_return0), checked
# against the original's results for one target each.
pick() { echo "$1" | cut -d' ' -f8; }
sc() {
	case $1 in
	0) echo $((($2 * 3 + 1) & 0xffffffff)) ;;
	1) echo $(((($2 ^ 0x5a5a5a) + 7) & 0xffffffff)) ;;
	*) echo 0 ;;
	esac
}
allowed=" "
for a in 0 1 2; do
	first=$(sc $a 21)
	for b in 0 1 2; do allowed="$allowed$(sc $b $((first + 21))) "; done
done
oracle=0
for t in 0 1 2; do
	eval "want=\$orig_$t"
	[ "$(pick "$want")" = "$(sc $t $(($(sc $t 21) + 21)))" ] && oracle=$((oracle + 1))
done
[ $oracle = 3 ] && ok "the racing calls' oracle gives the original's result for each target (3 of 3)" ||
	bad "the racing calls' oracle gives the original's result for each target: $oracle of 3"
(j=0; while [ $j -lt 40 ]; do target $((j % 3)); j=$((j + 1)); done) &
updater=$!
calls=0 odd=0
while kill -0 $updater 2>/dev/null || [ $calls -lt 20 ]; do
	echo "scall 21" >$L
	r=$(cat $P/scall_result)
	calls=$((calls + 1))
	case "$allowed" in *" $r "*) ;; *) odd=$((odd + 1)); echo "racing call $calls: $r is no target's result" ;; esac
	[ $calls -lt 2000 ] || break
done
wait $updater
updates=$((updates + 40))
wrong=$((wrong + odd))
in_copy && [ $odd = 0 ] && ok "calls racing 40 static call updates: $calls results, each one a target's, from the copy" ||
	bad "calls racing 40 static call updates: $odd of $calls results are no target's (copy ran: $(in_copy && echo yes || echo no))"

# Revert: the original runs again, with the call's current target.
target 1
if hotpathd revert kernel --state-dir $S >/tmp/ksrev.out 2>&1; then
	wait $holder
	got=$(results)
	if [ "$got" = "$orig_1" ] && [ "$(cat $P/scall_where)" = "$where0" ]; then
		ok "after the revert the original lane_scall runs with the original's results"
	else
		wrong=$((wrong + 1))
		bad "after the revert the original lane_scall runs with the original's results: $got at $(cat $P/scall_where)"
	fi
else
	bad "static-call revert: $(tail -n 3 /tmp/ksrev.out)"
	kill $holder 2>/dev/null
	wait $holder
fi
target 0
echo "kscalls.sh took $(awk -v a="$t0" '{ printf "%.1f", $1 - a }' /proc/uptime) s of guest time (under emulation)"
summary
[ $wrong = 0 ] && [ $targets = $tried ] && [ $ran = $tried ]
