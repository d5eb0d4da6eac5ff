#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# The jobs the kernel lane's guest can run once its agent started (LANE_JOB in /lane/boot.conf).
# Output goes to the results channel (the second serial port) in frames the host splits:
#   @@begin NAME t=UPTIME
#   ...the command's output (JSON where the command has --json)...
#   @@end NAME rc=STATUS t=UPTIME
# (UPTIME: the guest's /proc/uptime when the frame began and ended, for the lane's time table) and
# "@@done" when the job's proofs are over.
#
#   none       nothing: the guest is just a Hotpath host
#   workload   keep the test module busy, so the console shows live hotness in module code
#   test       the lane's proofs with the agent daemon (e2e/kernel-lane/test.sh reads their frames), then
#              the workload and mixwatch (lane_mix driven and checked while the console installs and
#              reverts it)
#   kmod       the proofs of hotpath.ko and the kernel target that need no daemon (test.sh's second guest)
#   commands   each line of /lane/commands as a shell command, one frame each (run-in-guest.sh)
export PATH=/bin:/usr/bin
. /lane/boot.conf
T=/sys/kernel/tracing
P=/sys/module/hotpath_lane/parameters

# guest_uptime: the guest's uptime in seconds (two decimals).
guest_uptime() { cut -d' ' -f1 /proc/uptime; }

# frame NAME CMD...: run CMD and frame its output, status and guest times.
frame() {
	name=$1
	shift
	echo "@@begin $name t=$(guest_uptime)"
	"$@" 2>&1
	rc=$?
	echo "@@end $name rc=$rc t=$(guest_uptime)"
}

# The workload: reads on /proc/hotpath_lane (vfs_read -> proc_reg_read -> lane_read -> lane_step),
# flat out, or with LIGHT=1 a burst of 2,000 reads a second (see job_test's end).
workload() {
	while :; do
		if [ "${LIGHT:-0}" = 1 ]; then
			/lane/lanework read 2000 >/dev/null
			sleep 1
		else
			/lane/lanework read 20000 >/dev/null || sleep 1
		fi
	done
}

# mix_round: lane_mix on 18 fixed inputs (as guest/ktarget.sh), the results in $got; no fork.
mix_round() {
	got=
	for n in 0 1 2 3 4 5 6 7 8 9 10 15 21 25 30 33 35 45; do
		echo "mix $n" >/proc/hotpath_lane && read -r r <$P/mix_result && got="$got$r "
	done
}

# mixwatch: what the console's kernel flow (checks.py, console.spec.ts) installs and reverts while it
# runs: lane_mix driven in rounds 50 ms apart, every round's results checked against the original's (taken
# first, before the agent daemon installs anything), and every 20 rounds a status line: rounds, wrong
# rounds, whether ftrace lists lane_mix (a redirect or a probe on it) and where lane_mix's call of
# lane_here returned to (inside a copy while one runs).
mixwatch() {
	mix_round
	orig=$got
	read -r where0 <$P/mix_where
	echo "@@info mixwatch-orig-where=$where0 mixwatch-orig-entry=$(entry_insn)"
	rounds=0 wrong=0 was=no
	while :; do
		sleep 0.05
		mix_round
		rounds=$((rounds + 1))
		[ "$got" = "$orig" ] || wrong=$((wrong + 1))
		if [ $((rounds % 20)) = 0 ]; then
			traced=no
			grep -q '^lane_mix[[:space:]]' $T/enabled_functions && traced=yes
			read -r where <$P/mix_where
			echo "@@info mixwatch-rounds=$rounds mixwatch-wrong=$wrong mixwatch-traced=$traced mixwatch-where=$where"
			# Once ftrace lets go of lane_mix (a probe, a measurement or a redirect ended), its entry
			# as the agent reads it now, in the background (a parse of the kernel takes a while here);
			# written only if ftrace still lets go of it once read (a measurement armed meanwhile, the
			# next flow's, would have shown its own call there), else at the next letting go.
			if [ $was = yes ] && [ $traced = no ]; then
				(
					e=$(entry_insn)
					grep -q '^lane_mix[[:space:]]' $T/enabled_functions ||
						echo "@@info mixwatch-rounds=$rounds mixwatch-entry=$e"
				) &
			fi
			was=$traced
		fi
	done
}

# entry_insn: lane_mix's first instruction, bytes and text, as `hotpathd inspect` decodes the live
# kernel text (spaces as '_', so it is one word of an @@info line).
entry_insn() {
	hotpathd inspect kernel hotpath_lane:lane_mix 2>/dev/null | grep -m 1 -E '^ +0x' | sed 's/^ *//; s/[[:space:]]\+/_/g'
}

# probed NAME: the kernel has an armed probe on NAME: an enabled kprobe (a registered but disabled
# one is listed too, marked [DISABLED]), or a BPF program attached through ftrace.
probed() {
	grep "[[:space:]]$1[+[:space:]]" /sys/kernel/debug/kprobes/list 2>/dev/null | grep -qv DISABLED ||
		grep -q "^$1[[:space:]]" $T/enabled_functions 2>/dev/null
}

# measured NAME GO OUT ARGS...: run `hotpathd measure kernel ARGS --json` in the background, wait until
# it is armed (at most LANE_ARM_TIMEOUT s), then create GO so the waiting lanework starts its counted
# calls, and wait for the measurement's JSON. Once lanework has written its last line to OUT ("... made
# N ..."), every counted call has returned, so the window is ended then (SIGINT: the agent's "Ctrl-C
# ends the window early") rather than running out its --seconds: the count is the same, the guest's
# time is not spent waiting (under emulation each window's idle seconds still cost wall time). Armed means the agent says so (its "... armed ..." line
# on stderr): counting starts only once every probe of the measurement is armed, so the kernel listing
# a probe on NAME (the first of several, with --blocks) is not enough. The first output line says
# whether the kernel lists a probe on NAME too, so a count that comes out wrong tells whether the
# kernel ever had a probe there.
measured() {
	sym=$1 go=$2 out=$3
	shift 3
	# Emptied here, not by the background job's redirection: the loop below must not read the
	# previous measurement's "armed" before the new job has truncated the file.
	: >/tmp/measure.out
	: >/tmp/measure.err
	hotpathd measure kernel "$@" --json >>/tmp/measure.out 2>>/tmp/measure.err &
	m=$!
	# Guest time in centiseconds (uptime has two decimals): under TCG on a loaded host a poll takes
	# far longer than its 0.1 s sleep, so the bound and the figure are the clock's, not a loop count.
	t0=$(cut -d' ' -f1 /proc/uptime | tr -d .)
	i=0
	while ! grep -q armed /tmp/measure.err && kill -0 $m 2>/dev/null && [ $i -lt $((LANE_ARM_TIMEOUT * 10)) ]; do
		sleep 0.1
		i=$((($(cut -d' ' -f1 /proc/uptime | tr -d .) - t0) / 10))
	done
	sleep 0.2
	if grep -q armed /tmp/measure.err; then
		if probed "$sym"; then
			echo "armed after $((i * 100)) ms: the agent says so and the kernel lists a probe on $sym"
		else
			echo "armed after $((i * 100)) ms by the agent's word, but the kernel lists no probe on $sym"
		fi
	elif probed "$sym"; then
		echo "not armed after $((i * 100)) ms by the agent's word, though the kernel lists a probe on $sym"
	else
		echo "not armed after $((i * 100)) ms: no probe on $sym"
	fi
	touch "$go"
	if grep -q armed /tmp/measure.err; then
		while kill -0 $m 2>/dev/null && ! grep -q ' made ' "$out"; do
			sleep 0.1
		done
		kill -INT $m 2>/dev/null
	fi
	wait $m
	rc=$?
	cat /tmp/measure.out /tmp/measure.err
	return $rc
}

# The kernel's own answer to a probe it refuses, through tracefs, for comparison with the agent's.
kernel_refusal() {
	echo "p:lane_refused $1" >>$T/kprobe_events 2>/tmp/kp.err
	rc=$?
	if [ $rc = 0 ]; then
		echo "accepted"
		echo "-:lane_refused" >>$T/kprobe_events
	else
		echo "refused: $(sed 's/.*write error: //' /tmp/kp.err) | $(tail -n 2 $T/error_log | tr '\n' ' ')"
	fi
}

# "NAME ADDRESS": the second basic block of a vmlinux function on the kprobe blacklist. Blocks are
# measured by kprobes at their start only, so this is an address the kernel refuses to probe and no
# other mechanism stands in for. Candidates are blacklisted functions of at least 64 bytes (from the
# blacklist's ranges), in kallsyms order; the agent's own decoding names the block.
bad_block() {
	for s in $(awk '
		function hex(h, i, v) { v = 0; h = tolower(h)
			for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
			return v }
		FILENAME == ARGV[1] { split($1, r, "-"); if (hex(substr(r[2], 11)) - hex(substr(r[1], 11)) >= 64) big[$2] = 1; next }
		NF == 3 && ($2 == "t" || $2 == "T") && ($3 in big) { print $3; if (++n == 5) exit }' \
		/sys/kernel/debug/kprobes/blacklist /proc/kallsyms); do
		a=$(hotpathd inspect kernel "$s" 2>/dev/null | awk '/^block 0x/ { if (++n == 2) { print $2; exit } }')
		[ -n "$a" ] && echo "$s $a" && return 0
	done
}

# agent_parsed: wait (at most LANE_ARM_TIMEOUT s) until the agent daemon, started beside this job, has
# parsed the whole kernel: its parse writes the noreturn cache (docs/agent-cli.md), which spares each
# later one-function parse (inspect, measure, plan) the parse of its callees. Started before that, the
# job's first parses ran without the cache and beside the daemon's own on the guest's one emulator
# thread, each slowing the other. Without the file (no daemon, or it failed) the job goes on: slower,
# the same results.
agent_parsed() {
	[ -n "$LANE_SERVER" ] || return 0
	t0=$(cut -d' ' -f1 /proc/uptime | tr -d .)
	i=0
	while [ ! -s /run/hotpathd/kernel-noreturn ] && [ $i -lt "$LANE_ARM_TIMEOUT" ]; do
		sleep 0.5
		i=$((($(cut -d' ' -f1 /proc/uptime | tr -d .) - t0) / 100))
	done
	if [ -s /run/hotpathd/kernel-noreturn ]; then
		echo "the agent's whole parse wrote its noreturn cache after $i s"
	else
		echo "no noreturn cache after $i s: the job goes on without it"
	fi
}

# The measurements and refusals (the agent's CLI, no daemon; in the second guest, job_kmod): the kernel's
# own answer to a kprobe at vfs_read+1 and inside a blacklisted function, then exact entry and block
# counts, lane_step's blocks, wall and virtualized timers, and the agent's refusals of the same probes.
measures() {
	bad=$(bad_block)
	echo "@@info bad-block-found=$(guest_uptime)"
	frame kernel-refuses-unaligned kernel_refusal vfs_read+1
	frame kernel-refuses-blacklisted kernel_refusal "${bad#* }"
	echo "@@info blacklisted=${bad% *} blacklisted-block=${bad#* }"
	if hotpathd measure --help >/dev/null 2>&1; then
		echo "@@info measure=yes"
		# Entry count: exactly LANE_N_READS read() calls by one pid.
		/lane/lanework read "$LANE_N_READS" /tmp/go-entry >/tmp/entry.out 2>&1 &
		pid=$!
		frame measure-entry measured vfs_read /tmp/go-entry /tmp/entry.out vfs_read --metrics count --pid $pid \
			--seconds "$LANE_MEASURE_SECONDS"
		wait $pid
		rc=$?
		echo "@@info entry-pid=$pid entry-reads=$LANE_N_READS entry-rc=$rc $(tail -n 1 /tmp/entry.out)"
		# Block counts: lane_step's blocks under exactly LANE_N_STEPS reads on one open file.
		/lane/lanework read "$LANE_N_STEPS" /tmp/go-steps >/tmp/steps.out 2>&1 &
		pid=$!
		frame measure-blocks measured lane_step /tmp/go-steps /tmp/steps.out hotpath_lane:lane_step --blocks --metrics count \
			--seconds "$LANE_MEASURE_SECONDS"
		wait $pid
		rc=$?
		echo "@@info steps-pid=$pid steps-reads=$LANE_N_STEPS steps-rc=$rc $(tail -n 1 /tmp/steps.out)"
		frame inspect-lane_step hotpathd inspect kernel hotpath_lane:lane_step --json
		# Wall and virtualized timers: LANE_NAPS sleeps of LANE_NAP_MS ms inside lane_nap.
		/lane/lanework nap "$LANE_NAPS" "$LANE_NAP_MS" /tmp/go-nap >/tmp/nap.out 2>&1 &
		pid=$!
		frame measure-timers measured lane_nap /tmp/go-nap /tmp/nap.out hotpath_lane:lane_nap --metrics count,wall,vtime \
			--pid $pid --seconds "$LANE_MEASURE_SECONDS"
		wait $pid
		rc=$?
		echo "@@info nap-pid=$pid naps=$LANE_NAPS nap-ms=$LANE_NAP_MS nap-rc=$rc $(tail -n 1 /tmp/nap.out)"
		# Probes the kernel refuses, asked of the agent.
		frame agent-refuses-unaligned hotpathd measure kernel vfs_read+0x1 --metrics count --seconds 1 --json
		frame agent-refuses-blacklisted hotpathd measure kernel "${bad#* }" --metrics count --seconds 1 --json
	else
		echo "@@info measure=no"
	fi
}

job_test() {
	echo "@@info job-start=$(guest_uptime)"
	frame release uname -r
	frame modules cat /proc/modules
	# (JIT'd BPF programs and ftrace trampolines are not modules: the code model leaves them out)
	frame module-text-symbols sh -c "grep -E '^[0-9a-f]+ [tT] .*\[' /proc/kallsyms | grep -vE '\[(bpf|__builtin)'"
	frame agent-parsed agent_parsed
	# A kernel read-path group (vfs_read and the callees that join it) installed and reverted
	# LANE_KCYCLES times in one process through hotpath.ko while a reader checks every byte it reads.
	# (hotpath.ko's own proofs and the other install frames run in the second guest: job_kmod.)
	frame kcycles /lane/kcycles.sh "$LANE_KCYCLES"
	frame kcycles-dmesg dmesg
	echo "@@info job-end=$(guest_uptime)"
	echo "@@done"
	# From here on the host's checks drive the agent daemon (plans, installs, a restart with its whole
	# parse) while these two keep lane_mix and the reads going. The guest's two CPUs are one emulator
	# thread that runs each busy CPU in turn, so a loop kept busy on one CPU halves the daemon's share
	# of it whatever its nice level: they pause between rounds (mixwatch 50 ms, the workload a second
	# after each 2,000 reads), and still call lane_mix and the read path some hundred times a second.
	renice -n 19 -p $$ >/dev/null 2>&1
	mixwatch &
	LIGHT=1 workload
}

# The second guest's job (test.sh boots it beside the first, with no backend: the proofs of hotpath.ko
# and of the agent's kernel target that need no agent daemon, each guest being one emulator thread on a
# host core of its own): the whole parse that writes the noreturn cache (as the daemon's does in the
# first guest), the measurements and refusals (measures), hotpath.ko's own proofs, the agent's kernel target on lane_mix, jump labels and static
# calls in copies, livepatch and a draining heap through a copy (both on ktarget.sh's plan), then
# nothing of any of it left in ftrace, hotpath.ko unloaded and loaded again, and the kernel's log.
job_kmod() {
	echo "@@info job-start=$(guest_uptime)"
	frame kmod-parse hotpathd parse kernel --quiet
	measures
	# What the kernel says of the hotpath.ko it loaded: its version and source hash (the DKMS build's?).
	frame kmod-version cat /sys/module/hotpath/version /sys/module/hotpath/srcversion
	frame kmodtest /lane/kmodtest "$LANE_KMOD_CYCLES"
	# The agent's kernel target: hotpathd install / revert kernel of a plan of lane_mix.
	frame ktarget /lane/ktarget.sh "$LANE_KTARGET_CYCLES"
	# Jump labels in a kernel copy: a plan of lane_keyed installed while its static keys flip.
	frame kkeys /lane/kkeys.sh
	# Static calls in a kernel copy: a plan of lane_scall installed while its static call is updated.
	frame kscalls /lane/kscalls.sh
	# Livepatch's reliable-stack check through a kernel copy: a patch's transition ends while a task sleeps
	# in a copy of lane_mix (ktarget.sh's plan), and waits on it when the copy has no ORC entries.
	frame klivepatch /lane/klivepatch.sh
	# A copy reverted while a task sleeps in it: its heap drains (kept, the module pinned) until the task
	# has left, then is released.
	frame kdrain /lane/kdrain.sh
	frame kmod-ftrace-after cat $T/enabled_functions
	frame kmod-reload sh -c 'rmmod hotpath && insmod /lane/hotpath.ko && grep -w hotpath /proc/modules'
	frame kmod-dmesg dmesg
	echo "@@info job-end=$(guest_uptime)"
	echo "@@done"
}

job_commands() {
	n=0
	while IFS= read -r line; do
		n=$((n + 1))
		frame "command-$n" sh -c "$line" </dev/null
	done </lane/commands
	echo "@@done"
}

case "$1" in
none) ;;
workload) workload ;;
test) job_test ;;
kmod) job_kmod ;;
commands) job_commands ;;
*)
	echo "unknown lane job '$1'"
	exit 2
	;;
esac
