#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# kcycles.sh's per-cycle check, run by `hotpathd install --cycles --check` while installed
# (HOTPATH_INSTALLED=1) and once reverted (0). The reader (kreader) must be alive and have found no
# wrong byte. With a witness probe (KCYCLES_PROBE: a kprobe event recording the return address of a
# function the group's copy calls and that stays in place), the trace is cleared, then read after the
# reader's next 2 reads' worth of progress: while installed some return address must lie in the heap
# [HOTPATH_HEAP, +HOTPATH_HEAP_BYTES) (the copy ran), once reverted none may.
export PATH=/bin:/usr/bin
T=/sys/kernel/tracing
# After each revert a progress line on stderr (kcycles.sh shows it), for the lane's stall watch.
[ "$HOTPATH_INSTALLED" = 1 ] || echo "# read-path cycle $((HOTPATH_CYCLE + 1)) done at $(cut -d' ' -f1 /proc/uptime) s of guest uptime" >&2
st() { sed -n 's/reads \([0-9]*\) mismatches \([0-9]*\)/\1 \2/p' /tmp/kreader.status; }
set -- $(st)
[ "${2:-1}" = 0 ] || { echo "kcheck: cycle $HOTPATH_CYCLE: the reader found wrong bytes: $(cat /tmp/kreader.status)"; exit 1; }
[ -n "$KCYCLES_PROBE" ] || exit 0
: >$T/trace
# Wait for events (the reader reads all the time; a status line is rewritten every 256 reads).
i=0
while ! grep -q 'ret=' $T/trace; do
	i=$((i + 1))
	[ $i -le 600 ] || { echo "kcheck: cycle $HOTPATH_CYCLE: no call of $KCYCLES_PROBE in 60 s"; exit 1; }
	sleep 0.1
done
h=$((HOTPATH_HEAP))
e=$((h + HOTPATH_HEAP_BYTES))
inside=0 outside=0
for a in $(grep -o 'ret=0x[0-9a-f]*' $T/trace | cut -d= -f2 | head -n 64); do
	v=$((a))
	if [ "$v" -ge "$h" ] && [ "$v" -lt "$e" ]; then inside=$((inside + 1)); else outside=$((outside + 1)); fi
done
if [ "$HOTPATH_INSTALLED" = 1 ]; then
	[ $inside -gt 0 ] && exit 0
	echo "kcheck: cycle $HOTPATH_CYCLE: installed, but no call of $KCYCLES_PROBE returned into the heap ($outside outside)"
	exit 1
fi
[ $inside = 0 ] && exit 0
echo "kcheck: cycle $HOTPATH_CYCLE: reverted, but $inside calls of $KCYCLES_PROBE returned into the old heap"
exit 1
