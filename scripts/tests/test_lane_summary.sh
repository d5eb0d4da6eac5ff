#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The kernel lane's summary (e2e/kernel-lane/checks.py): a check that could not run is shown with its
# reason and counted as skipped in "lane: P passed, F failed, S skipped", never as passed; it does not
# fail the lane, a failed check does. Drives the lane's own Checks and finish with three checks (no
# guest needed: this is the counting, not the checks). Run from the repository's root.
set -u
py=backend/.venv/bin/python
[ -x "$py" ] || py=python3
out=$("$py" - <<'PY'
import sys
from types import SimpleNamespace
sys.path.insert(0, "e2e/kernel-lane")
import checks as lane

def run(fail):
    c = lane.Checks()
    c.run("passes", lambda: None)
    def cannot():
        raise lane.NotRun("no such thing on this machine")
    c.run("cannot run here", cannot)
    if fail:
        def fails():
            raise AssertionError("on purpose")
        c.run("fails", fails)
    state = lane.new_state()
    rc = lane.finish(c, SimpleNamespace(release="6.1.0-test-amd64"), state)
    print(f"rc={rc}")

run(False)
run(True)

# A guest script's frame (script_checks): its ok/FAIL lines become checks, its summary line the state.
c = lane.Checks()
state = lane.new_state()
out = ("ok - the reader reads known data: reads 10\nFAIL - the copy ran: in 2 of 3 cycles\n"
       "kcycles: root vfs_read, functions 2, cycles 3/3, call sites 5, install us per entry 1, revert ms 2.0, "
       "reads 77, wrong results 1\n")
lane.kcycles_checks(c, {"kcycles": (out, 0)}, state)
lane.ktarget_checks(c, {"ktarget": ("ktarget: installs 3/3, cycles 2, copy ran 2, call sites 4, wrong results 0\n", 1)}, state)
print(f"scripts: passed {c.passed}, failed {c.failed}, read-path cycles {state['read_cycles']}, "
      f"install cycles {state['install_cycles']}, call sites {state['call_sites']}, wrong {state['wrong']}")

# The time table: each guest's frames, the second guest's under its own heading.
one = "@@info job-start=1.0\n@@begin kcycles t=1.00\nok\n@@end kcycles rc=0 t=3.50\n@@info job-end=4.0\n"
two = "@@info job-start=2.0\n@@begin kmodtest t=2.00\n@@end kmodtest rc=0 t=9.00\n@@info job-end=9.5\n"
table = lane.time_table(one, "", lane.parse_results(one)[1], "boot=3", lane.Checks(), two)
for line in table.split("\n"):
    print("table:" + " ".join(line.split()))
PY
)
expect() {
	local name=$1 want=$2
	if grep -qxF -- "$want" <<<"$out"; then echo "ok - lane summary: $name"; else echo "FAIL - lane summary: $name: no line '$want' in:"; printf '%s\n' "$out" | sed 's/^/#   /'; fi
}
expect "a check not run is shown with its reason" "not run - cannot run here: no such thing on this machine"
expect "it is counted as skipped, not passed" "lane: 1 passed, 0 failed, 1 skipped"
expect "a skip alone does not fail the lane" "rc=0"
expect "a failure beside it is counted" "lane: 1 passed, 1 failed, 1 skipped"
expect "a failure fails the lane" "rc=1"
# kcycles: its ok line and "ran to its end" pass, its FAIL line fails; ktarget's summary is read but its
# status 1 fails "ran to its end".
expect "a guest script's lines and summary are checks and state" \
	"scripts: passed 2, failed 2, read-path cycles 3, install cycles 2, call sites 4, wrong 1"
expect "the time table has the first guest's frames" "table:guest's test job, by frame (guest uptime; 1 frames):"
expect "with their times" "table:kcycles at 1.0 took 2.5"
expect "and the second guest's under its own heading" "table:second guest's test job, by frame (guest uptime; 1 frames):"
expect "each job's whole time" "table:whole job at 2.0 took 7.5 (between frames 0.5)"
