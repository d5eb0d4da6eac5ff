#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Boot the kernel lane's guest under QEMU (software emulation: these hosts have no usable KVM) and
# stay in the foreground until it stops.
#
#   boot.sh RUNDIR
#
# RUNDIR/boot/ holds the per-boot files the guest finds under /lane (boot.conf, credentials), written
# by the caller (lane.sh or test.sh, with credentials.sh). They are packed as a second archive after
# the guest image that build.sh made. Writes RUNDIR/console.log (the serial console: kernel, init
# markers, the agent's log) and RUNDIR/results.log (the second serial port: the job's framed output),
# and RUNDIR/qemu.pid.
#
#   LANE_TIMEOUT   stop QEMU after this many seconds (default: none)
#   LANE_MEMORY    guest memory in MiB (default 2048)   LANE_CPUS  guest CPUs (default 2)
#   LANE_TCG_THREAD  single (default) or multi. The guest's CPUs are emulated by one host thread
#                  taking turns: with one thread per CPU (QEMU 7.2's multi-threaded TCG) a kprobe
#                  armed or disarmed on vfs_read while the other CPU runs vfs_read crashed the guest
#                  within a few dozen attempts (NULL instruction fetch, then "kernel BUG at
#                  arch/x86/kernel/kprobes/core.c"), and never did in hundreds of attempts with one
#                  thread. Kernel code patching is what the lane exists to exercise.
#
# The guest's command line has no_timer_check: on a loaded host the emulated CPU can be too slow for the
# kernel's boot-time check that the timer interrupt arrives through the IO-APIC, and the guest then
# panicked at boot ("IO-APIC + timer doesn't work!", seen once in a loaded make test). The parameter
# skips that check, as virtual machines commonly do (the kernel's admin-guide/kernel-parameters.txt:
# "Disables the code which tests for broken timer IRQ sources"); the timer itself works under QEMU.
set -euo pipefail
. "$(dirname "$0")/common.sh"
run=${1:?usage: boot.sh RUNDIR}
lane_paths
image=$build/initramfs.cpio
[ -f "$image" ] || die "no guest image: run e2e/kernel-lane/build.sh"
[ -f "$run/boot/lane/boot.conf" ] || die "$run/boot/lane/boot.conf is missing"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing: run e2e/kernel-lane/fetch.sh"

# The kernel unpacks concatenated cpio archives in order, so the per-boot files simply follow.
(cd "$run/boot" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$run/boot.cpio"
cat "$image" "$run/boot.cpio" >"$run/guest.cpio"
: >"$run/console.log"; : >"$run/results.log"

cmd=(qemu-system-x86_64 -accel "tcg,thread=${LANE_TCG_THREAD:-single}" -cpu max -m "${LANE_MEMORY:-2048}" -smp "${LANE_CPUS:-2}"
	-display none -monitor none -no-reboot
	-kernel "$vmlinuz" -initrd "$run/guest.cpio"
	-append "console=ttyS0 panic=-1 quiet no_timer_check"
	-netdev user,id=net0 -device virtio-net-pci,netdev=net0,romfile=
	-serial "file:$run/console.log" -serial "file:$run/results.log")
if [ -n "${LANE_TIMEOUT:-}" ]; then
	cmd=(timeout --signal=TERM --kill-after=5 "$LANE_TIMEOUT" "${cmd[@]}")
fi
"${cmd[@]}" &
qemu=$!
echo $qemu >"$run/qemu.pid"
stop() { kill -TERM "$qemu" 2>/dev/null || true; }
trap stop INT TERM
wait "$qemu"
