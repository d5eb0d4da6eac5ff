#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# The agent's kernel target in the lane's guest (issue 18): hotpathd plans hotpath_lane:lane_mix
# (`hotpathd plan kernel`), installs it through hotpath.ko and reverts it, CYCLES times: the first cycle
# as an operator runs it (`hotpathd install`, which holds /dev/hotpath while the install lasts, then
# `hotpathd revert kernel` from another process), the others in one process (`hotpathd install
# --cycles N --check`: the kernel's model opened once, every cycle a whole install, journal first, and a
# whole revert, after which the engine checks every written byte is back and every copied function as
# planned; under emulation a process's start and its model's open took most of a cycle's 10-60 s).
# Every cycle checks lane_mix's results for a fixed set of inputs against the original's (before any
# install), that the copy ran while installed (lane_mix's call of lane_here returned into the code
# heap the install reported: /sys/module/hotpath_lane/parameters/mix_where), that ftrace lists
# lane_mix while installed and not after, and that the install patched call sites (hotpath.ko's
# CALL_PATCH): lane_write's call of lane_mix calls the copy in the heap while installed, and lane_mix
# again after the revert (as `hotpathd inspect` reads lane_write's callees from the live text, on the
# first and the last cycle). Then: a second user is refused while one holds the device, and kill -9 of
# the holding process leaves the kernel as it was (original code running, the call site's bytes back,
# nothing in ftrace, the journal reported as gone and removed). Lines "ok - NAME: DETAIL" /
# "FAIL - NAME: DETAIL" are checks (checks.py takes each as a lane check); the last line is
#   ktarget: installs I/J, cycles C, copy ran R, call sites S, wrong results W
# with S the call sites the installs reported patched, summed over them.
# `ktarget.sh check` is the in-process cycles' check (hotpathd runs it with HOTPATH_CYCLE,
# HOTPATH_INSTALLED, HOTPATH_HEAP, HOTPATH_HEAP_BYTES, HOTPATH_CALL_SITES and this script's KT_* set).
export PATH=/bin:/usr/bin
cycles=${1:-10}
P=/sys/module/hotpath_lane/parameters
T=/sys/kernel/tracing
S=/tmp/ktarget-state
installs=0 tried=0 ran=0 wrong=0 done_cycles=0 holder= sites=0
t0=$(cut -d' ' -f1 /proc/uptime)

ok() { echo "ok - $*"; }
bad() { echo "FAIL - $*"; }
num() { echo $(($1)); } # busybox arithmetic wraps kernel addresses (decimal or hex) alike
results() {
	for n in 0 1 2 3 4 5 6 7 8 9 10 15 21 25 30 33 35 45; do
		echo "mix $n" >/proc/hotpath_lane && printf '%s ' "$(cat $P/mix_result)"
	done
}
traced() { grep -q '^lane_mix[[:space:]]' $T/enabled_functions; }
# The callee line of lane_write's call of lane_mix's site, as the live text has it: "0xSITE -> 0xTARGET NAME".
write_call() {
	hotpathd inspect kernel hotpath_lane:lane_write 2>/dev/null | grep -E "^  $site0 -> " | head -n 1 | sed 's/^ *//'
}
# in_heap ADDR: ADDR lies in the install's heap.
in_heap() {
	a=$(num "$1")
	h=$(num "$heap")
	[ "$a" -ge "$h" ] && [ "$a" -lt $((h + heap_len)) ]
}

# install: start a holding `hotpathd install` in the background; its JSON in /tmp/kinst.out.
install() {
	tried=$((tried + 1))
	: >/tmp/kinst.out
	hotpathd install /tmp/kplan.json --state-dir $S --json --quiet >/tmp/kinst.out 2>/tmp/kinst.err &
	holder=$!
	i=0
	# The install parses the running kernel (vmlinux and modules) for the call sites: tens of
	# seconds under emulation.
	while ! grep -q '"status":"installed"' /tmp/kinst.out; do
		kill -0 $holder 2>/dev/null || { wait $holder; return 1; }
		i=$((i + 1))
		[ $i -le 6000 ] || return 1
		sleep 0.05
	done
	heap=$(sed -n 's/.*"heap":"\(0x[0-9a-f]*\)".*/\1/p' /tmp/kinst.out)
	heap_len=$(sed -n 's/.*"heap_bytes":\([0-9]*\).*/\1/p' /tmp/kinst.out)
	n_sites=$(sed -n 's/.*"call_sites":\([0-9]*\).*/\1/p' /tmp/kinst.out)
	[ -n "$heap" ] && [ -n "$heap_len" ] && [ -n "$n_sites" ] || return 1
	installs=$((installs + 1))
	sites=$((sites + n_sites))
	return 0
}

# in_copy: mix_where (lane_mix's last call of lane_here) lies in the install's heap.
in_copy() { in_heap "$(cat $P/mix_where)"; }

# installed_checks C / reverted_checks C: cycle C's checks while installed ($heap, $heap_len and
# $n_sites as the install reported them) and once reverted, against the original ($orig, $where0,
# $call0); lane_write's call site is read on the first and the last cycle only (an inspect parses the
# kernel's symbols: slow under emulation). Each prints what is wrong and counts it in $nbad; the installed
# one sets $ran_now (1: the copy ran) and $now / $to (the call site as read, its target).
installed_checks() {
	got=$(results)
	[ "$got" = "$orig" ] || { nbad=$((nbad + 1)); echo "cycle $1 installed: results $got"; }
	ran_now=0
	in_copy && ran_now=1
	traced || echo "cycle $1: ftrace does not list lane_mix while installed"
	[ "$n_sites" -ge 1 ] || { nbad=$((nbad + 1)); echo "cycle $1 installed: no call site patched"; }
	now= to=
	if [ "$1" = 1 ] || [ "$1" = "$cycles" ]; then
		now=$(write_call)
		to=$(echo "$now" | sed -n 's/^0x[0-9a-f]* -> \(0x[0-9a-f]*\).*/\1/p')
		if [ -z "$to" ] || ! in_heap "$to"; then
			nbad=$((nbad + 1))
			echo "cycle $1 installed: lane_write's call is '$now', not into the heap at $heap"
		fi
	fi
}
reverted_checks() {
	got=$(results)
	[ "$got" = "$orig" ] || { nbad=$((nbad + 1)); echo "cycle $1 reverted: results $got"; }
	[ "$(cat $P/mix_where)" = "$where0" ] || { nbad=$((nbad + 1)); echo "cycle $1 reverted: lane_mix ran at $(cat $P/mix_where), not $where0"; }
	traced && { nbad=$((nbad + 1)); echo "cycle $1: ftrace still lists lane_mix after the revert"; }
	if [ "$1" = 1 ] || [ "$1" = "$cycles" ]; then
		now=$(write_call)
		[ "$now" = "$call0" ] || { nbad=$((nbad + 1)); echo "cycle $1 reverted: lane_write's call is '$now', not '$call0'"; }
	fi
}
# A line per cycle: the lane's stall check (lane_wait) counts a guest that writes nothing for
# LANE_STALL s as hung, and a loaded host can stretch ten silent cycles past that.
cycle_done() { echo "# cycle $1 of $cycles done at $(cut -d' ' -f1 /proc/uptime) s of guest uptime"; }

# `ktarget.sh check`: the in-process cycles' check, run by hotpathd while installed and once reverted,
# with what the parent exported (KT_*) and hotpathd's HOTPATH_*. Each step adds a line to the tally
# (KT_TALLY) the parent counts; status 1 when something is wrong (hotpathd then counts the cycle wrong).
if [ "${1:-}" = check ]; then
	orig=$KT_ORIG where0=$KT_WHERE0 call0=$KT_CALL0 site0=$KT_SITE0 cycles=$KT_LAST
	heap=$HOTPATH_HEAP heap_len=$HOTPATH_HEAP_BYTES n_sites=$HOTPATH_CALL_SITES c=$((HOTPATH_CYCLE + 1)) nbad=0
	if [ "$HOTPATH_INSTALLED" = 1 ]; then
		installed_checks $c
		echo "installed $c ran=$ran_now sites=$n_sites" >>"$KT_TALLY"
	else
		reverted_checks $c
		echo "reverted $c" >>"$KT_TALLY"
		cycle_done $c
	fi
	[ $nbad = 0 ]
	exit $?
fi

# Exact block counts of lane_mix (kprobes) while it runs on the fixed inputs, then the plan from them.
: >/tmp/kprof.err
hotpathd measure kernel hotpath_lane:lane_mix --blocks --metrics count --seconds "${LANE_MEASURE_SECONDS:-8}" \
	--json >/tmp/kprof.json 2>>/tmp/kprof.err &
m=$!
i=0
while ! grep -q armed /tmp/kprof.err && kill -0 $m 2>/dev/null && [ $i -lt 400 ]; do
	sleep 0.1
	i=$((i + 1))
done
for _ in 1 2 3 4 5; do results >/dev/null; done
# Every call to count has returned: the window ends now (SIGINT ends it early), not after its
# --seconds; the counts are the same.
grep -q armed /tmp/kprof.err && kill -INT $m 2>/dev/null
wait $m
# The plan reads measure's output as it is (kernel addresses, above 2^63, are strings of digits there).
# The plan's own layout address (the install re-bases the code to the heap hotpath.ko gives): 2 MiB past
# the highest module text symbol, where no module's code is (the planner's default, a page past
# hotpath_lane, can be another module's).
last=$(grep '\[' /proc/kallsyms | cut -d' ' -f1 | sort | tail -n 1)
base=$(printf '0x%x' $(((0x$last + 0x200000) & ~0xfff)))
hotpathd plan kernel hotpath_lane:lane_mix --profile /tmp/kprof.json --base "$base" --json \
	>/tmp/kplan.json 2>/tmp/kplan.err
if ! grep -q '"status":"ok"' /tmp/kplan.json; then
	bad "kernel plan: hotpathd plan kernel hotpath_lane:lane_mix is not ok: $(head -c 400 /tmp/kplan.json) $(tail -n 3 /tmp/kplan.err)"
	echo "ktarget: installs 0/1, cycles 0, copy ran 0, call sites 0, wrong results 0"
	exit 1
fi
ok "kernel plan: hotpathd plan kernel hotpath_lane:lane_mix is ok ($(grep -o '"functions":[0-9]*' /tmp/kplan.json | head -n 1))"
echo "entry of lane_mix: $(hotpathd inspect kernel hotpath_lane:lane_mix 2>/dev/null | grep -m 1 -E '^ +0x')"
orig=$(results)
where0=$(cat $P/mix_where)
echo "original results: $orig"
# lane_write's call of lane_mix, whose site the installs patch.
site0=$(hotpathd inspect kernel hotpath_lane:lane_write 2>/dev/null | sed -n 's/^  \(0x[0-9a-f]*\) -> 0x[0-9a-f]* lane_mix$/\1/p' | head -n 1)
call0=$(write_call)
[ -n "$site0" ] && ok "lane_write calls lane_mix before any install: $call0" ||
	bad "lane_write calls lane_mix before any install: $(hotpathd inspect kernel hotpath_lane:lane_write 2>&1 | tail -n 12)"

# The copy as kernel text (issue 18): hotpath.ko gives it the original's name and ORC unwind entries from
# the plan's position map. While installed: /proc/kallsyms lists "lane_mix [hotpath]" inside the heap; a
# kprobe (register_kprobe, from the test module) goes on the copy's entry, hotpath:lane_mix, and fires;
# the stack trace it takes, and one a kprobe event on lane_here takes one call below (a return address in
# the middle of the copy), name lane_mix in hotpath and go on through lane_write to the system call, which
# the unwinder reaches only through the copy's own entries. After the revert the name is gone. (A kprobe
# *event* on the copy, tracefs or BPF, is refused: trace_kprobe takes no function without an ftrace site
# unless the kernel has CONFIG_KPROBE_EVENTS_ON_NOTRACE, and a copy has none.)
stack_checks() {
	ks=$(grep -E ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms | head -n 1)
	[ -n "$ks" ] && in_heap "0x${ks%% *}" && ok "kallsyms names the copy as the original: $ks (heap $heap)" ||
		bad "kallsyms names the copy as the original: '$ks' (heap $heap)"
	# The kprobe on the copy, with its stack trace in the kernel log.
	dmesg -c >/dev/null
	if echo "kprobe hotpath:lane_mix" >/proc/hotpath_lane 2>/tmp/kstack.err; then
		echo "mix 7" >/proc/hotpath_lane
		echo "kprobe off" >/proc/hotpath_lane
		hits=$(cat $P/kprobe_hits)
		st=$(dmesg | sed -n 's/.*hotpath_lane: kstack \([^ ]*\( \[[a-z_]*\]\)\{0,1\}\)$/\1/p' | tr '\n' ' ')
		[ "$hits" = 1 ] && ok "a kprobe on the copy (hotpath:lane_mix) fired once for one call" ||
			bad "a kprobe on the copy fired $hits times for one call"
		echo "$st" | grep -qE 'lane_mix\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath\] .*lane_write\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath_lane\] .*do_syscall_64' &&
			ok "the stack trace from the kprobe on the copy names lane_mix [hotpath] and goes on through lane_write to the system call: $st" ||
			bad "the stack trace from the kprobe on the copy: '$st'"
	else
		bad "a kprobe on the copy (hotpath:lane_mix): $(cat /tmp/kstack.err)"
	fi
	# A kprobe event on lane_here, called from the middle of the copy, with a stacktrace trigger.
	echo 0 >$T/tracing_on
	: >$T/trace
	echo 1 >$T/options/sym-offset
	if echo 'p:hp_below hotpath_lane:lane_here' >>$T/kprobe_events 2>/tmp/kstack.err; then
		echo stacktrace >$T/events/kprobes/hp_below/trigger
		echo 1 >$T/events/kprobes/hp_below/enable
		echo 1 >$T/tracing_on
		echo "mix 7" >/proc/hotpath_lane
		echo 0 >$T/tracing_on
		st=$(awk '/ hp_below: / { want = 1; next } want && /<stack trace>/ { on = 1; next }
			on && /^ =>/ { printf "%s %s ", $2, $3; next } on { exit }' $T/trace)
		echo 0 >$T/events/kprobes/hp_below/enable
		echo '!stacktrace' >$T/events/kprobes/hp_below/trigger
		echo '-:hp_below' >>$T/kprobe_events
		echo "$st" | grep -qE 'lane_mix\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath\] .*lane_write\+0x[0-9a-f]+/0x[0-9a-f]+ \[hotpath_lane\] .*do_syscall_64' &&
			ok "a stack trace from lane_here, called by the copy, names lane_mix [hotpath] and goes on through lane_write to the system call: $st" ||
			bad "a stack trace from lane_here through the copy: '$st' ($(grep -c . $T/trace) trace lines)"
	else
		bad "a kprobe event on lane_here: $(cat /tmp/kstack.err)"
	fi
	echo 0 >$T/options/sym-offset
	echo 1 >$T/tracing_on
}

# The first cycle as an operator runs it: the install held by a background hotpathd, `installed`, a
# second user, `hotpathd revert kernel` from another process.
first_cycle() {
	if ! install; then
		bad "kernel install: cycle 1: hotpathd install failed: $(cat /tmp/kinst.out /tmp/kinst.err | tail -n 3)"
		return 1
	fi
	nbad=0
	installed_checks 1
	wrong=$((wrong + nbad))
	ran=$((ran + ran_now))
	echo "cycle 1 install timings (under emulation): $(grep -o '"timings":{[^}]*}' /tmp/kinst.out)"
	[ "$n_sites" -ge 1 ] && [ -n "$to" ] && in_heap "$to" &&
		ok "the install patched $n_sites call sites; lane_write's call of lane_mix calls the copy: $now" ||
		bad "the install patched call sites: $n_sites, lane_write's call '$now', heap $heap"
	stack_checks
	hotpathd installed --state-dir $S | grep -q 'kernel, held by pid' &&
		ok "installed lists the kernel install with its holder" ||
		bad "installed lists the kernel install with its holder: $(hotpathd installed --state-dir $S)"
	# A second user of the device while one holds it: refused with the reason, nothing written.
	out=$(hotpathd install /tmp/kplan.json --state-dir /tmp/ktarget-second 2>&1)
	rc=$?
	[ $rc = 5 ] && echo "$out" | grep -q 'held by another process' &&
		ok "a second user is refused: $(echo "$out" | tail -n 1)" ||
		bad "a second user is refused: status $rc: $out"
	if ! hotpathd revert kernel --state-dir $S >/tmp/krev.out 2>&1; then
		bad "kernel revert: cycle 1: $(tail -n 3 /tmp/krev.out)"
		return 1
	fi
	wait $holder
	grep -qE ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms &&
		bad "after the revert kallsyms still names a copy: $(grep -E ' lane_mix[[:space:]]+\[hotpath\]$' /proc/kallsyms)" ||
		ok "after the revert kallsyms names no copy"
	nbad=0
	reverted_checks 1
	wrong=$((wrong + nbad))
	done_cycles=1
	cycle_done 1
}
first_cycle

# The other cycles in one process, each checked by `ktarget.sh check` (above).
if [ $done_cycles = 1 ] && [ "$cycles" -gt 1 ]; then
	KT_TALLY=/tmp/ktarget-tally
	: >$KT_TALLY
	export KT_ORIG="$orig" KT_WHERE0="$where0" KT_CALL0="$call0" KT_SITE0="$site0" KT_LAST="$cycles" KT_TALLY
	n=$((cycles - 1))
	tried=$((tried + n))
	hotpathd install /tmp/kplan.json --cycles $n --check "/lane/ktarget.sh check" --state-dir $S --json \
		--quiet >/tmp/kcycles.out
	rc=$?
	sum=$(grep '"status"' /tmp/kcycles.out | tail -n 1)
	cd_=$(echo "$sum" | grep -o '"done":[0-9]*' | cut -d: -f2)
	cw=$(echo "$sum" | grep -o '"wrong":[0-9]*' | cut -d: -f2)
	echo "in one process: $sum"
	grep '"cycle"' /tmp/kcycles.out | grep -v '"wrong":""' | head -n 5
	# A cycle counts as an install when the check saw it installed; its call sites as it reported them.
	installs=$((installs + $(grep -c '^installed ' $KT_TALLY)))
	ran=$((ran + $(grep -c '^installed .* ran=1 ' $KT_TALLY)))
	for k in $(sed -n 's/^installed .* sites=\([0-9]*\)$/\1/p' $KT_TALLY); do sites=$((sites + k)); done
	wrong=$((wrong + ${cw:-1}))
	done_cycles=$((done_cycles + ${cd_:-0}))
	[ $rc = 0 ] && [ "${cd_:-0}" = $n ] && [ "$(grep -c '^reverted ' $KT_TALLY)" = $n ] ||
		bad "kernel install cycles in one process: status $rc, ${cd_:-0} of $n done, ${cw:-?} wrong: $(tail -n 3 /tmp/kcycles.out)"
fi
[ $done_cycles = "$cycles" ] && [ $wrong = 0 ] &&
	ok "install and revert cycles: $done_cycles, each result as the original's" ||
	bad "install and revert cycles: $done_cycles of $cycles, $wrong wrong"
[ $done_cycles -gt 0 ] && [ $done_cycles = "$cycles" ] && [ $wrong = 0 ] &&
	ok "call sites: patched in every install ($sites in $installs), lane_write's call on the copy while installed and back on lane_mix after the revert (read on the first and the last cycle)" ||
	bad "call sites: $sites in $installs installs, $wrong wrong"
[ $ran = "$done_cycles" ] && [ $ran -gt 0 ] &&
	ok "the copy ran while installed: lane_mix's call returned into the code heap in $ran of $done_cycles cycles" ||
	bad "the copy ran while installed: in $ran of $done_cycles cycles"

# kill -9 of the holder: hotpath.ko undoes the install when its fd closes.
if install; then
	kill -9 $holder
	wait $holder 2>/dev/null
	got=$(results)
	now=$(write_call)
	if [ "$got" = "$orig" ] && [ "$(cat $P/mix_where)" = "$where0" ] && ! traced && [ "$now" = "$call0" ]; then
		ok "kill -9 of the holding process: original lane_mix runs, lane_write calls it again ($now), nothing left in ftrace"
	else
		wrong=$((wrong + 1))
		bad "kill -9 of the holding process: results $got, ran at $(cat $P/mix_where), traced $(traced && echo yes || echo no), lane_write's call '$now' (was '$call0')"
	fi
	hotpathd installed --state-dir $S | grep -q process_gone &&
		ok "installed reports the dead holder's install as gone" ||
		bad "installed reports the dead holder's install as gone: $(hotpathd installed --state-dir $S)"
	hotpathd revert kernel --state-dir $S >/dev/null 2>&1 && [ -z "$(ls $S/replace 2>/dev/null | grep journal)" ] &&
		ok "revert kernel removes the dead holder's journal" ||
		bad "revert kernel removes the dead holder's journal: $(ls $S/replace)"
else
	bad "kill -9 of the holding process: the install failed: $(tail -n 3 /tmp/kinst.err)"
fi
echo "ktarget.sh took $(awk -v a="$t0" '{ printf "%.1f", $1 - a }' /proc/uptime) s of guest time (under emulation)"
echo "ktarget: installs $installs/$tried, cycles $done_cycles, copy ran $ran, call sites $sites, wrong results $wrong"
[ $wrong = 0 ] && [ $installs = "$tried" ]
