#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# Jump labels in a kernel copy (issue 18): hotpathd plans hotpath_lane:lane_keyed, a function with two
# static-key sites whose result depends on both keys, installs the copy through hotpath.ko and, while it
# is installed, flips the keys: every key state must give the results the original gives in that state
# (computed before the install), from the copy (lane_keyed's call of lane_keyed_here returns into the
# install's heap: /sys/module/hotpath_lane/parameters/keyed_where). Then the keys flip in a background
# loop while calls run: each result must be one that some key state gives (a call racing a flip may see
# either state of a key, as the original's sites may). Lines "ok - NAME: DETAIL" / "FAIL - NAME: DETAIL"
# are checks (checks.py takes each as a lane check); the last line is
#   kkeys: states S/T as the original, flips F, copy ran R, wrong results W
export PATH=/bin:/usr/bin
P=/sys/module/hotpath_lane/parameters
L=/proc/hotpath_lane
S=/tmp/kkeys-state
inputs="0 1 2 3 5 8 13 21 34 55"
states=0 tried=0 flips=0 ran=0 wrong=0 holder=
t0=$(cut -d' ' -f1 /proc/uptime)

ok() { echo "ok - $*"; }
bad() { echo "FAIL - $*"; }
num() { echo $(($1)); }
keys() { echo "keys $1 $2" >$L; }
results() {
	for n in $inputs; do
		echo "keyed $n" >$L && printf '%s ' "$(cat $P/keyed_result)"
	done
}
summary() { echo "kkeys: states $states/$tried as the original, flips $flips, copy ran $ran, wrong results $wrong"; }

# The original's results in each key state (a b), and where it runs.
for s in "0 0" "1 0" "0 1" "1 1"; do
	keys $s
	eval "orig_${s% *}${s#* }=\"$(results)\""
done
keys 0 1 # the keys' defaults
where0=$(cat $P/keyed_where)
if [ "$orig_00" != "$orig_10" ] && [ "$orig_00" != "$orig_01" ] && [ "$orig_00" != "$orig_11" ] &&
	[ "$orig_10" != "$orig_01" ] && [ "$orig_10" != "$orig_11" ] && [ "$orig_01" != "$orig_11" ]; then
	ok "the four key states give four different results of the original"
else
	bad "the four key states give four different results of the original: $orig_00 / $orig_10 / $orig_01 / $orig_11"
fi

# Exact block counts of lane_keyed in every key state, then the plan from them.
: >/tmp/kkprof.err
hotpathd measure kernel hotpath_lane:lane_keyed --blocks --metrics count --seconds "${LANE_MEASURE_SECONDS:-8}" \
	--json >/tmp/kkprof.json 2>>/tmp/kkprof.err &
m=$!
i=0
while ! grep -q armed /tmp/kkprof.err && kill -0 $m 2>/dev/null && [ $i -lt 400 ]; do
	sleep 0.1
	i=$((i + 1))
done
for s in "0 0" "1 0" "0 1" "1 1"; do
	keys $s
	results >/dev/null
done
keys 0 1
# Every call to count has returned: the window ends now (SIGINT ends it early), not after its
# --seconds; the counts are the same.
grep -q armed /tmp/kkprof.err && kill -INT $m 2>/dev/null
wait $m
last=$(grep '\[' /proc/kallsyms | cut -d' ' -f1 | sort | tail -n 1)
base=$(printf '0x%x' $(((0x$last + 0x200000) & ~0xfff)))
hotpathd plan kernel hotpath_lane:lane_keyed --profile /tmp/kkprof.json --base "$base" --json \
	>/tmp/kkplan.json 2>/tmp/kkplan.err
reads=$(grep -o '"key_reads":[0-9]*' /tmp/kkplan.json | head -n 1 | cut -d: -f2)
if ! grep -q '"status":"ok"' /tmp/kkplan.json; then
	bad "jump-label plan: hotpathd plan kernel hotpath_lane:lane_keyed is not ok: $(head -c 400 /tmp/kkplan.json) $(tail -n 3 /tmp/kkplan.err)"
	summary
	exit 1
fi
[ "${reads:-0}" -ge 2 ] &&
	ok "jump-label plan: lane_keyed moves, its $reads jump-label sites written as reads of their keys" ||
	bad "jump-label plan: lane_keyed's copy reads ${reads:-no} keys, expected 2 sites: $(grep -o '"kept_in_place":[^]]*' /tmp/kkplan.json)"

# The install, held by a background hotpathd (as in ktarget.sh).
: >/tmp/kkinst.out
hotpathd install /tmp/kkplan.json --state-dir $S --json --quiet >/tmp/kkinst.out 2>/tmp/kkinst.err &
holder=$!
i=0
while ! grep -q '"status":"installed"' /tmp/kkinst.out; do
	if ! kill -0 $holder 2>/dev/null || [ $i -gt 1200 ]; then
		bad "jump-label install: hotpathd install failed: $(cat /tmp/kkinst.out /tmp/kkinst.err | tail -n 3)"
		summary
		exit 1
	fi
	i=$((i + 1))
	sleep 0.05
done
heap=$(num "$(sed -n 's/.*"heap":"\(0x[0-9a-f]*\)".*/\1/p' /tmp/kkinst.out)")
heap_len=$(sed -n 's/.*"heap_bytes":\([0-9]*\).*/\1/p' /tmp/kkinst.out)
in_copy() {
	w=$(num "$(cat $P/keyed_where)")
	[ "$w" -ge "$heap" ] && [ "$w" -lt $((heap + heap_len)) ]
}

# Each key state in turn while the copy is installed: each key flips both ways.
for s in "0 1" "0 0" "1 0" "1 1" "0 1" "1 1" "0 0"; do
	keys $s
	flips=$((flips + 1))
	tried=$((tried + 1))
	got=$(results)
	eval "want=\$orig_${s% *}${s#* }"
	in_copy && ran=$((ran + 1))
	if [ "$got" = "$want" ]; then
		states=$((states + 1))
	else
		wrong=$((wrong + 1))
		echo "keys $s installed: results $got, the original's $want"
	fi
done
[ $states = $tried ] && ok "each key state, flipped while the copy is installed, gives the original's results ($states states)" ||
	bad "each key state, flipped while the copy is installed, gives the original's results: $states of $tried"
[ $ran = $tried ] && ok "the copy ran in every key state: lane_keyed's call returned into the code heap ($ran of $tried)" ||
	bad "the copy ran in every key state: in $ran of $tried"

# Flips racing calls: a background loop flips both keys while calls run; each result must be one of
# the four states' for its input (n = 21, the eighth input).
pick() { echo "$1" | cut -d' ' -f8; }
allowed=" $(pick "$orig_00") $(pick "$orig_10") $(pick "$orig_01") $(pick "$orig_11") "
(j=0; while [ $j -lt 40 ]; do keys $((j % 2)) $(((j / 2) % 2)); j=$((j + 1)); done) &
flipper=$!
calls=0 odd=0
while kill -0 $flipper 2>/dev/null || [ $calls -lt 20 ]; do
	echo "keyed 21" >$L
	r=$(cat $P/keyed_result)
	calls=$((calls + 1))
	case "$allowed" in *" $r "*) ;; *) odd=$((odd + 1)); echo "racing call $calls: $r is no key state's result" ;; esac
	[ $calls -lt 2000 ] || break
done
wait $flipper
flips=$((flips + 40))
wrong=$((wrong + odd))
in_copy && [ $odd = 0 ] && ok "calls racing 40 key flips: $calls results, each one a key state's, from the copy" ||
	bad "calls racing 40 key flips: $odd of $calls results are no key state's (copy ran: $(in_copy && echo yes || echo no))"

# Revert: the original runs again, in the keys' current state.
keys 0 1
if hotpathd revert kernel --state-dir $S >/tmp/kkrev.out 2>&1; then
	wait $holder
	got=$(results)
	if [ "$got" = "$orig_01" ] && [ "$(cat $P/keyed_where)" = "$where0" ]; then
		ok "after the revert the original lane_keyed runs with the original's results"
	else
		wrong=$((wrong + 1))
		bad "after the revert the original lane_keyed runs with the original's results: $got at $(cat $P/keyed_where)"
	fi
else
	bad "jump-label revert: $(tail -n 3 /tmp/kkrev.out)"
	kill $holder 2>/dev/null
	wait $holder
fi
echo "kkeys.sh took $(awk -v a="$t0" '{ printf "%.1f", $1 - a }' /proc/uptime) s of guest time (under emulation)"
summary
[ $wrong = 0 ] && [ $states = $tried ] && [ $ran = $tried ]
