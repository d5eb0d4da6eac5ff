#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the libFuzzer targets in fuzz/ for a fixed number of inputs each, from seed corpora made
# here: slices of hotpathd's own machine code for the decoder and CFG builder, small programs
# gcc compiles (optimized, with debug info, stripped, a relocatable object) for the ELF reader,
# resource words and metric lists for the measurement request parser, small CFGs with counts for
# edge derivation, and kallsyms text (a recording with modules, this machine's own) for the kernel
# symbol reader. The planner's target takes its code from hotpathd itself and its
# choices from the input bytes (seeded with short slices of the same machine code); a plan is
# slower than a decode, so it runs a third of the inputs. Profile files are fuzzed from seeds of
# each shape they come in; the installer's inputs (a plan's JSON, an undo journal) from one of each;
# value profiles of indirect call sites from one report; the kernel's noreturn cache file from one
# written as the agent writes it and the same cut short.
# Fixed seeds keep a run repeatable. A crash, leak, sanitizer report or broken invariant fails the
# case and leaves the input that caused it in build/fuzz/artifacts/. Run from the agent directory.
# FUZZ_RUNS raises the number of inputs for a longer session (default 60000 per target).
# The targets run FUZZ_JOBS at a time (default: one per core), the slowest first; each is one
# process with its own seed, inputs and log, so running them side by side changes no input any of
# them sees, only the wall time. Their verdicts print in that order once all have ended.
set -u
runs=${FUZZ_RUNS:-60000}
jobs=${FUZZ_JOBS:-$(nproc)}
TMP=$(mktemp -d /tmp/hotpath-fuzz-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/cfg" "$TMP/elf" "$TMP/spec" "$TMP/edges" "$TMP/plan" "$TMP/profile" "$TMP/kallsyms" "$TMP/install" "$TMP/static" \
	"$TMP/icalls" "$TMP/kcache" "$TMP/caps" \
	build/fuzz/artifacts

# Decoder seeds: the first 40 4-KiB slices of real x86-64 code.
objcopy -O binary --only-section=.text build/hotpathd "$TMP/text.bin"
head -c $((40 * 4096)) "$TMP/text.bin" | split -b 4096 -a 3 - "$TMP/cfg/text-"
# A computed goto whose label table follows the code (fuzz_cfg reads tables from the input's own bytes,
# laid out at 0xffffffff81000000): lea rdi, [rip+0x19]; and eax, 3; jmp [rdi+rax*8]; three handlers; at
# +32 the table (+13, +14, +16, +13), then a zero word that ends it.
printf '\x48\x8d\x3d\x19\x00\x00\x00\x83\xe0\x03\xff\x24\xc7\xc3\x90\xc3\x31\xc0\xc3' >"$TMP/cfg/labels"
head -c 13 /dev/zero | tr '\0' '\314' >>"$TMP/cfg/labels"
printf '\x0d\x00\x00\x81\xff\xff\xff\xff\x0e\x00\x00\x81\xff\xff\xff\xff' >>"$TMP/cfg/labels"
printf '\x10\x00\x00\x81\xff\xff\xff\xff\x0d\x00\x00\x81\xff\xff\xff\xff' >>"$TMP/cfg/labels"
head -c 8 /dev/zero >>"$TMP/cfg/labels"
# Planner seeds: 20 slices of 512 bytes.
head -c $((20 * 512)) "$TMP/text.bin" | split -b 512 -a 3 - "$TMP/plan/text-"

# ELF seeds: one small program in four forms.
cat >"$TMP/p.c" <<'C'
static int sq(int i) { return i * i; }
int sum(int n) { int s = 0; for (int i = 0; i < n; i++) s += sq(i); return s; }
int main(int argc, char **argv) { (void)argv; return sum(argc) & 1; }
C
gcc -O2 -o "$TMP/elf/prog" "$TMP/p.c" &&
	gcc -O0 -g -o "$TMP/elf/prog-debug" "$TMP/p.c" &&
	strip -o "$TMP/elf/prog-stripped" "$TMP/elf/prog" &&
	gcc -O2 -c -o "$TMP/elf/prog.o" "$TMP/p.c" || { echo "FAIL - fuzz seeds: gcc could not build them"; exit 1; }

# Measurement request seeds: resource words and metric lists of every form.
for w in vfs_read libc.so.6:malloc fx_work+0x1a fx_work+26 0xffffffff81234560 foo.constprop.0 \
	count count,wall,vtime,concurrency cycles,icache_stall 'f+0x' 'mod:'; do
	printf '%s' "$w" >"$TMP/spec/$(printf '%s' "$w" | md5sum | cut -c1-12)"
done
# Edge seeds: small CFGs (block count, entry flag, successor specs, targets, counts).
printf '\x04\x01\x01\x20\x03\xe9\x10\x02\x00\x03\xe8\x01\x20\x00\x30\x07\xd1' >"$TMP/edges/loop"
printf '\x06\x00\x02\x40\x20\x00\x64\x01\x30\x00\x1e\x02\x10\x30\x00\x46\x00\x00\x5a' >"$TMP/edges/diamond"
# kallsyms seeds: the recording from a kernel with modules, and the start of this machine's own.
cp tests/fixtures/kallsyms-6.1/kallsyms "$TMP/kallsyms/lane-6.1"
head -n 400 /proc/kallsyms >"$TMP/kallsyms/live" 2>/dev/null || true

# Kernel noreturn cache seeds: a file as the agent writes it for the fuzz target's key (its FNV-1a 64
# sum over the text before the end line), and the same cut short.
python3 - "$TMP/kcache" <<'PY' || { echo "FAIL - fuzz seeds: python3 could not write the cache seeds"; exit 1; }
import sys
text = ("hotpath-kernel-noreturn 1\nagent 5f1c0ffee0\nboot 1b2c3d4e-0000-4000-8000-00000000abcd\n"
        "build eb4fbcd037e7253717950bf2b93bd5566f47c56f\nvmlinux 64 16384\nn 10\np 2c0\np 3ff0\n")
h = 0xcbf29ce484222325
for b in text.encode():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
full = text + "end 3 %016x\n" % h
open(sys.argv[1] + "/written", "w").write(full)
open(sys.argv[1] + "/cut", "w").write(full[: len(full) // 2])
PY

# Capability cache seeds: a file as the agent writes it for the fuzz target's key, and the same cut
# short.
python3 - "$TMP/caps" <<'PY' || { echo "FAIL - fuzz seeds: python3 could not write the capability cache seeds"; exit 1; }
import sys
names = ["fentry", "fexit", "kprobes", "kretprobes", "tracepoints", "raw_tracepoints", "tp_btf", "uprobes",
         "uretprobes", "uprobe_multi"]
text = ("hotpath-caps 1\nagent 5f1c0ffee0\nboot 1b2c3d4e-0000-4000-8000-00000000abcd\n"
        "release 6.1.0-lane\nlockdown none\n")
for i, n in enumerate(names):
    text += "cap %s %d %s\n" % (n, i % 2, "a %s program attached and fired" % n if i % 2 else "failed: EPERM")
h = 0xcbf29ce484222325
for b in text.encode():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
full = text + "end %d %016x\n" % (len(names), h)
open(sys.argv[1] + "/written", "w").write(full)
open(sys.argv[1] + "/cut", "w").write(full[: len(full) // 2])
PY

fuzz() {
	local name=$1 corpus=$2 n=${3:-$runs} log="$TMP/$1.log"
	if [ ! -x "build/fuzz/$name" ]; then
		echo "FAIL - $name: build/fuzz/$name is not built (needs clang and its sanitizer runtimes)"
		return
	fi
	if "build/fuzz/$name" -seed=1 -runs="$n" -malloc_limit_mb=1024 -timeout=10 \
		-artifact_prefix=build/fuzz/artifacts/ "$corpus" >"$log" 2>&1; then
		echo "ok - $name: $(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | head -1)s, $(grep -oE 'cov: [0-9]+' "$log" | tail -1) edges, no crash or broken invariant"
	else
		echo "FAIL - $name: $(grep -E 'invariant broken|ERROR:|runtime error' "$log" | head -3 | tr '\n' ' ')"
		grep -E 'Test unit written' "$log" | sed 's/^/# /'
		tail -40 "$log" | sed 's/^/# /'
	fi
}

# Profile seeds: the three shapes a profile comes in, on hotpathd's own code (a plan of one of
# its functions, which carries a saved hotpath-profile/1, and a measure-style report).
root=hp_profile_find
addr=$(nm build/hotpathd | awk -v f="$root" '$3 == f { print "0x" $1 }')
printf '{"resources": [{"function": "%s", "block": "%s", "metrics": {"count": 12}, "labels": {"count": "exact"}}], "edges": [{"from": null, "to": "%s", "count": 12, "exact": true}]}' \
	"$root" "$addr" "$addr" >"$TMP/profile/measure.json"
build/hotpathd plan elf build/hotpathd "$root" --profile "$TMP/profile/measure.json" --l1i 32768,8,64 --json \
	>"$TMP/profile/plan.json" 2>/dev/null || true
python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["profile"]))' "$TMP/profile/plan.json" \
	>"$TMP/profile/saved.json" 2>/dev/null || true

# Installer seeds: a plan's JSON (first byte even) and an undo journal (odd).
{ printf 'P'; cat "$TMP/profile/plan.json"; } >"$TMP/install/plan" 2>/dev/null || true
python3 - "$TMP/install/journal" <<'PY'
import json, sys, zlib
recs = [{"op": "begin", "version": 1, "id": "hotpath-1-f-00000000", "pid": 1, "root": "f"},
        {"op": "undo", "kind": "entry", "addr": "0x401000", "len": 5, "orig": "554889e541", "now": "e9fbff0f00"},
        {"op": "installed"}]
with open(sys.argv[1], "wb") as f:
    f.write(b"J")
    for r in recs:
        s = json.dumps(r, separators=(",", ":")).encode()
        f.write(b"HPJ1 %d %08x " % (len(s), zlib.crc32(s)) + s + b"\n")
PY

# Value profile seed: indirect call sites as `hotpathd icalls --json` reports them.
printf '{"format": "hotpath-icalls/1", "sites": [{"function": "f", "site": "0x1c", "calls": 10, "targets": [{"function": "g", "indirect": 6, "direct": 2}, {"function": "h", "count": 2}]}, {"function": "k", "site": 7, "calls": 0}]}' \
	>"$TMP/icalls/two-sites"

# Jump-label and static call seed: a table of two entries (as 16-byte jump entries; the same bytes
# read as 8-byte static call sites) and the text they point into, a nop5 and a jmp to the target.
python3 - "$TMP/static/two-sites" <<'PY'
import struct, sys
table, lo = 0xffffffff82000000, 0xffffffff81ff0000
def entry(i, code, target):
    at = table + 16 * i
    return struct.pack("<iiq", code - at, target - (at + 4), 0x1000 + 1)
text = bytes.fromhex("0f1f440000909090") + bytes.fromhex("e90b000000") + b"\xcc" * 19
with open(sys.argv[1], "wb") as f:
    f.write(entry(0, lo, lo + 0x10) + entry(1, lo + 8, lo + 0x18) + text)
PY

# Slowest first (seconds at 60000 inputs in a make test run on 2 cores: plan 65-124 at a third of
# them, kallsyms 61-87, cfg 17-20, elf 19, install 15-21, the rest 1-6), so the last to start are short.
targets=(
	"fuzz_plan $TMP/plan $((runs / 3))"
	"fuzz_kallsyms $TMP/kallsyms"
	"fuzz_cfg $TMP/cfg"
	"fuzz_elf $TMP/elf"
	"fuzz_install $TMP/install"
	"fuzz_edges $TMP/edges"
	"fuzz_profile $TMP/profile"
	"fuzz_spec $TMP/spec"
	"fuzz_kernel_cache $TMP/kcache"
	"fuzz_caps_cache $TMP/caps"
	"fuzz_static_branch $TMP/static"
	"fuzz_icall_values $TMP/icalls"
)
for t in "${targets[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
	read -ra args <<<"$t"
	fuzz "${args[@]}" >"$TMP/${args[0]}.verdict" &
done
wait
for t in "${targets[@]}"; do
	name=${t%% *}
	cat "$TMP/$name.verdict" 2>/dev/null || echo "FAIL - $name: it left no verdict"
done
