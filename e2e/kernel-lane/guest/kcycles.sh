#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# Install/revert cycles of a kernel read-path group while a reader checks every byte it reads (issue 18:
# "1,000 install/revert cycles, no wrong result, no oops/warning in the guest's dmesg, original bytes
# restored at the end"). In the lane's guest:
#   1. /lane/kreader writes a file of known content into the guest's tmpfs and reads it with read(2) in
#      a loop, checking every byte, for the whole run (stopped while only the counts' and plans' model opens
#      and the planner run: below);
#   2. for each of KCYCLES_ROOTS (default "vfs_read ksys_read shmem_file_read_iter") in turn, until one
#      plans ok: exact kprobe block counts of the root and of the counted functions it calls directly
#      while the reader reads, then `hotpathd plan kernel ROOT` from them; each refusal, and what each
#      plan keeps in place and why, are printed;
#   3. `hotpathd install PLAN --cycles N --check /lane/kcheck.sh`: N installs and reverts in one
#      process (the model opened once), each checked by the engine (every byte the install wrote back
#      to its original after the revert, every member hashing as planned) and by kcheck.sh: the copy
#      ran while installed (a kprobe event on a function the copy calls that stays in place records
#      its return address, which must lie in the install's heap) and does not after the revert;
#   4. the reader stopped: its reads, mismatches (must be 0); dmesg has no Oops, BUG, WARNING, or
#      general protection fault; ftrace lists none of the group's functions.
# Lines "ok - NAME: DETAIL" / "FAIL - NAME: DETAIL" are checks (checks.py takes each as a lane check);
# the last line is
#   kcycles: root R, functions F, cycles C/N, call sites S, install us per entry U, revert ms V, reads X, wrong results W
# (times under emulation: not performance figures).
export PATH=/bin:/usr/bin
cycles=${1:-5}
T=/sys/kernel/tracing
S=/tmp/kcycles-state
wrong=0
t0=$(cut -d' ' -f1 /proc/uptime)
ok() { echo "ok - $*"; }
# members PLAN: the functions of the plan's group, one per line (its "group" array, before "totals").
members() { sed -n 's/.*"group":\[\(.*\)\],"totals".*/\1/p' "$1" | grep -o '{"function":"[^"]*"' | cut -d'"' -f4; }
bad() { echo "FAIL - $*"; }
summary() {
	echo "kcycles.sh took $(awk -v a="$t0" '{ printf "%.1f", $1 - a }' /proc/uptime) s of guest time (under emulation)"
	echo "kcycles: root ${root:-none}, functions ${nfun:-0}, cycles ${done_c:-0}/$cycles, call sites ${sites:-0}," \
		"install us per entry ${per_entry:-0}, revert ms ${rev_ms:-0}, reads ${reads:-0}, wrong results $wrong"
}

dmesg_before=$(dmesg | grep -cE 'Oops|BUG|WARNING|general protection')
/lane/kreader /tmp/kread.dat 262144 3000 /tmp/kreader.status >/tmp/kreader.out 2>/tmp/kreader.err &
reader=$!
i=0
while [ ! -s /tmp/kreader.status ] && kill -0 $reader 2>/dev/null && [ $i -lt 600 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -s /tmp/kreader.status ] && ok "the reader reads known data: $(cat /tmp/kreader.status)" ||
	{ bad "the reader did not start: $(cat /tmp/kreader.out /tmp/kreader.err)"; summary; exit 1; }

# For each root in turn, until one plans ok: exact counts of the root and of the counted functions it calls
# directly (KCYCLES_COUNTED: the other roots and the read path's callees; a callee joins a root's group only
# when counted, and only a direct callee can join it) while the reader reads, then `hotpathd plan kernel
# ROOT` from them. A function the root does not call cannot join its plan: counting it would only cost
# the guest a kprobe at each of its blocks, armed and disarmed one by one (filemap_read's alone are most
# of the 180 rows all six had, and most of that measurement's 60-90 s of guest time).
roots=${KCYCLES_ROOTS:-vfs_read ksys_read shmem_file_read_iter}
counted=${KCYCLES_COUNTED:-$roots rw_verify_area filemap_read touch_atime}
# progress WHAT: a progress line with the guest's uptime (where the frame's time goes; the stall watch).
progress() { echo "# kcycles: $* at $(cut -d' ' -f1 /proc/uptime) s of guest uptime"; }
# measure_root R: exact block counts of R and the counted functions it calls, in /tmp/kcprof.json; the
# window ends (SIGINT) once the reader made some hundreds of reads under the armed probes. The reader is
# stopped (SIGSTOP) from the inspect until the probes are armed, and again once they are counted, until
# the plans are made: nothing is installed then, and a reader reading flat out takes one of the guest's two
# CPUs, so half of the one emulator thread, from the model's opens and the planner (each took about twice
# as long beside it).
measure_root() {
	kill -STOP $reader
	callees=$(hotpathd inspect kernel "$1" 2>/dev/null | sed -n 's/^  0x[0-9a-f]* -> 0x[0-9a-f]* \([A-Za-z0-9_.]*\)$/\1/p' | sort -u)
	set_=$1
	for f in $counted; do
		[ "$f" != "$1" ] && echo "$callees" | grep -qx "$f" && set_="$set_ $f"
	done
	progress "$1's callees read"
	echo "measure kernel $set_ (the counted functions $1 calls: $(echo "$callees" | wc -w) callees read from its live text)"
	: >/tmp/kcprof.err
	# shellcheck disable=SC2086 # set_ is a word list
	hotpathd measure kernel $set_ --blocks --metrics count --seconds "${KCYCLES_MEASURE_SECONDS:-6}" \
		--json >/tmp/kcprof.json 2>>/tmp/kcprof.err &
	m=$!
	i=0
	while ! grep -q armed /tmp/kcprof.err && kill -0 $m 2>/dev/null && [ $i -lt 1200 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	progress "armed"
	kill -CONT $reader
	r0=$(sed -n 's/reads \([0-9]*\).*/\1/p' /tmp/kreader.status)
	# Some hundreds of reads counted, then the window ends (SIGINT) with what it counted.
	while kill -0 $m 2>/dev/null && [ "$(sed -n 's/reads \([0-9]*\).*/\1/p' /tmp/kreader.status)" -lt $((r0 + 512)) ]; do
		sleep 0.2
	done
	grep -q armed /tmp/kcprof.err && kill -INT $m 2>/dev/null
	progress "counted"
	wait $m
	progress "measured"
	kill -STOP $reader
	[ -z "$HOTPATH_TIMING" ] || grep '^  ' /tmp/kcprof.err
	grep -q '"results"' /tmp/kcprof.json || grep -q '"count"' /tmp/kcprof.json ||
		echo "measure: $(tail -n 3 /tmp/kcprof.err)"
}
last=$(grep '\[' /proc/kallsyms | cut -d' ' -f1 | sort | tail -n 1)
base=$(printf '0x%x' $(((0x$last + 0x200000) & ~0xfff)))
root=
for r in $roots; do
	measure_root "$r"
	hotpathd plan kernel "$r" --profile /tmp/kcprof.json --base "$base" --json >/tmp/kcplan.$r.json 2>/tmp/kcplan.$r.err
	st=$(sed -n 's/^[^"]*{"root":"[^"]*","status":"\([a-z_]*\)".*/\1/p' /tmp/kcplan.$r.json | head -n 1)
	[ -n "$st" ] || st=$(grep -o '"status":"[a-z_]*"' /tmp/kcplan.$r.json | head -n 1 | cut -d'"' -f4)
	progress "planned"
	echo "plan kernel $r: ${st:-no plan} $(grep -o '"message":"[^"]*"' /tmp/kcplan.$r.json | head -n 1) $(tail -n 1 /tmp/kcplan.$r.err)"
	echo "  members: $(members /tmp/kcplan.$r.json | tr '\n' ' ')"
	echo "  kept in place: $(grep -o '"kept_in_place":\[[^]]*\]' /tmp/kcplan.$r.json | head -c 1500)"
	if [ "$st" = ok ]; then
		root=$r
		cp /tmp/kcplan.$r.json /tmp/kcplan.json
		break
	fi
done
kill -CONT $reader
if [ -z "$root" ]; then
	bad "kernel read-path plan: none of $roots plans ok (above)"
	summary
	exit 1
fi
nfun=$(grep -o '"functions":[0-9]*' /tmp/kcplan.json | head -n 1 | cut -d: -f2)
ok "kernel read-path plan: $root is ok ($nfun functions: $(members /tmp/kcplan.json | tr '\n' ' '))"

# The check's probe: a function a member of the group calls and that stays in place, whose return address
# tells where its caller ran. A candidate is taken only once, before any install, its kprobe event has
# recorded a return address inside a member's original code while the reader reads (__fsnotify_parent,
# for one, is called only when a parent directory is watched: it never fires here).
# member_ranges: "START END" (hex, 16 digits) of each member's original code, from the plan's group.
member_ranges() {
	g=$(sed -n 's/.*"group":\[\(.*\)\],"totals".*/\1/p' /tmp/kcplan.json)
	starts=$(echo "$g" | grep -o '{"function":"[^"]*","address":"0x[0-9a-f]*"' | sed 's/.*"address":"0x\([0-9a-f]*\)"/\1/')
	sizes=$(echo "$g" | grep -o '"module":"[^"]*","size":[0-9]*' | sed 's/.*"size"://')
	set -- $sizes
	for a in $starts; do
		printf '%s %016x\n' "$a" $((0x$a + $1))
		shift
	done
}
member_ranges >/tmp/kcranges
# fires_in_members: the event's return addresses so far include one inside a member (the trace's
# "ret=0x..." and the ranges are 16-digit lowercase hex: compared as strings).
fires_in_members() {
	grep -o 'ret=0x[0-9a-f]*' $T/trace | cut -c7- | head -n 200 |
		awk 'NR == FNR { lo[NR] = $1; hi[NR] = $2; n = NR; next }
			{ for (i = 1; i <= n; i++) if ($1 >= lo[i] && $1 < hi[i]) { found = 1; exit } }
			END { exit !found }' /tmp/kcranges -
}
probe=
for f in ${KCYCLES_PROBES:-security_file_permission rw_verify_area __fsnotify_parent copy_page_to_iter touch_atime}; do
	members /tmp/kcplan.json | grep -qx "$f" && continue # copied: its return address is no witness
	echo "p:kcycles/ret $f ret=\$stack0:x64" >>$T/kprobe_events 2>/dev/null || continue
	: >$T/trace
	echo 1 >$T/events/kcycles/ret/enable
	i=0
	while ! fires_in_members && [ $i -lt 100 ]; do
		sleep 0.2
		i=$((i + 1))
	done
	if fires_in_members; then
		probe=$f
		break
	fi
	echo "the check's witness: $f is not called from the group's code while the reader reads ($(grep -c 'ret=' $T/trace) calls from elsewhere)"
	echo 0 >$T/events/kcycles/ret/enable
	echo "-:kcycles/ret" >>$T/kprobe_events
done
if [ -n "$probe" ]; then
	ok "the check's witness: a kprobe event on $probe records its return address, inside the group's code before any install"
else
	bad "the check's witness: no callee outside the group is called from its code (tried ${KCYCLES_PROBES:-security_file_permission rw_verify_area __fsnotify_parent copy_page_to_iter touch_atime})"
fi
export KCYCLES_PROBE=$probe

: >/tmp/kcycles.out
# hotpathd's messages and kcheck.sh's progress line after every revert (on stderr) pass through to this
# frame as they come, so a long run (LANE_KCYCLES=1000) is not taken for a hung guest; the JSON goes to
# /tmp/kcycles.out.
{
	hotpathd install /tmp/kcplan.json --cycles "$cycles" --check /lane/kcheck.sh --state-dir $S --json \
		2>&1 >/tmp/kcycles.out
	echo $? >/tmp/kcycles.rc
} | tee /tmp/kcycles.err
rc=$(cat /tmp/kcycles.rc)
sum=$(grep '"status"' /tmp/kcycles.out | tail -n 1)
done_c=$(echo "$sum" | grep -o '"done":[0-9]*' | cut -d: -f2)
cw=$(echo "$sum" | grep -o '"wrong":[0-9]*' | cut -d: -f2)
per_entry=$(echo "$sum" | grep -o '"install_us_per_entry":[0-9.]*' | cut -d: -f2 | cut -d. -f1)
rev_ms=$(echo "$sum" | grep -o '"revert_ms":[0-9.]*' | cut -d: -f2)
rev_ms=$(printf '%.1f' "${rev_ms:-0}")
sites=$(echo "$sum" | grep -o '"call_sites":[0-9.]*' | cut -d: -f2)
sites=$(printf '%.0f' "${sites:-0}")
wrong=$((wrong + ${cw:-0}))
head -n 2 /tmp/kcycles.out
[ "$(grep -c '"cycle"' /tmp/kcycles.out)" -gt 2 ] && echo "..." && grep '"cycle"' /tmp/kcycles.out | tail -n 1
grep '"cycle"' /tmp/kcycles.out | grep -v '"wrong":""' | head -n 5
echo "summary: $sum"
tail -n 5 /tmp/kcycles.err
[ $rc = 0 ] && [ "${done_c:-0}" = "$cycles" ] && [ "${cw:-1}" = 0 ] &&
	ok "install and revert cycles of $root's group in one process: $done_c, each checked (the copy ran, written bytes restored, functions as planned)" ||
	bad "install and revert cycles of $root's group: status $rc, ${done_c:-0} of $cycles, ${cw:-?} wrong"
[ "${sites:-0}" -ge 1 ] && ok "call sites patched per install: $sites" || bad "call sites patched per install: ${sites:-0}"
echo "per install (under emulation, not performance figures): $(echo "$sum" | grep -o '"install_ms":[0-9.]*'), install us per entry $per_entry, $(echo "$sum" | grep -o '"calls_ms":[0-9.]*'), revert ms $rev_ms"

# Nothing left: no journal, nothing of the group in ftrace, the reader right all along, dmesg clean.
[ -n "$probe" ] && { echo 0 >$T/events/kcycles/ret/enable; echo "-:kcycles/ret" >>$T/kprobe_events; }
left=$(ls $S/replace 2>/dev/null | grep -c journal)
traced=$(grep -cE "^($(members /tmp/kcplan.json | tr '\n' '|')x_none_)[[:space:]]" $T/enabled_functions)
[ "$left" = 0 ] && [ "$traced" = 0 ] && ok "nothing left installed: no journal, no group function in ftrace" ||
	{ wrong=$((wrong + 1)); bad "nothing left installed: $left journals, $traced group functions in ftrace"; }
kill -TERM $reader
wait $reader
rrc=$?
reads=$(sed -n 's/^kreader: reads \([0-9]*\),.*/\1/p' /tmp/kreader.out | tail -n 1)
mis=$(sed -n 's/.*mismatches \([0-9]*\),.*/\1/p' /tmp/kreader.out | tail -n 1)
[ $rrc = 0 ] && [ "${mis:-1}" = 0 ] && ok "the reader read known data through every cycle: $(tail -n 1 /tmp/kreader.out)" ||
	{ wrong=$((wrong + 1)); bad "the reader: status $rrc: $(tail -n 1 /tmp/kreader.out) $(head -n 3 /tmp/kreader.err)"; }
dmesg_after=$(dmesg | grep -cE 'Oops|BUG|WARNING|general protection')
[ "$dmesg_after" = "$dmesg_before" ] && ok "dmesg: no Oops, BUG, WARNING or general protection fault" ||
	{ wrong=$((wrong + 1)); bad "dmesg: $(dmesg | grep -E 'Oops|BUG|WARNING|general protection' | tail -n 3)"; }
summary
[ $wrong = 0 ]
