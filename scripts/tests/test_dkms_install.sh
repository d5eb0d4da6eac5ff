#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/dkms/install.sh's answers that need no kernel headers: its help, its version (the module's
# ABI version, read from the one header that defines it), and its refusals — a usage error (exit 2)
# or a refusal with the reason (exit 1) — each leaving the trees it was pointed at untouched. The
# build itself is proved by the kernel lane, which builds the hotpath.ko it loads with this script.
# Every case runs the real script, with scratch trees (--dkmstree, --sourcetree, --installtree) where
# it could write; the cases that reach dkms need it installed (scripts/install-deps.sh test).
set -u
cd "$(dirname "$0")/../.."
script=deploy/dkms/install.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trees=(--dkmstree "$tmp/dkms" --sourcetree "$tmp/src" --installtree "$tmp/lib")

ok() { echo "ok - dkms install.sh: $1"; }
fail() {
	echo "FAIL - dkms install.sh: $1"
	printf '%s\n' "$out" | sed 's/^/#   /'
}
# run ARGS...: the script's combined output in $out, its status in $rc.
run() {
	out=$(bash "$script" "$@" 2>&1)
	rc=$?
}
# expect NAME STATUS TEXT ARGS...: exit STATUS, TEXT (fixed string) in the output, no tree created.
expect() {
	local name=$1 status=$2 text=$3
	shift 3
	run "$@"
	if [ "$rc" != "$status" ]; then
		fail "$name: exit status $rc, not $status"
	elif ! grep -qF -- "$text" <<<"$out"; then
		fail "$name: no '$text' in its words"
	elif [ -e "$tmp/dkms" ] || [ -e "$tmp/src" ] || [ -e "$tmp/lib" ]; then
		fail "$name: it wrote into a tree ($(ls -d "$tmp"/* | tr '\n' ' '))"
	else
		ok "$name"
	fi
}

run --help
if [ "$rc" = 0 ] && grep -q '^  install ' <<<"$out" && grep -q '^  remove ' <<<"$out" &&
	grep -q -- '--kernelsourcedir' <<<"$out" && grep -q 'HOTPATH_ABI_VERSION' <<<"$out"; then
	ok "--help names the actions, the options and where the version comes from"
else
	fail "--help (status $rc)"
fi

abi=$(sed -nE 's/^#define HOTPATH_ABI_VERSION ([0-9]+)$/\1/p' agent/kmod/hotpath_uapi.h)
run --version
if [ -n "$abi" ] && [ "$rc" = 0 ] && [ "$out" = "$abi" ] &&
	grep -qx 'PACKAGE_VERSION="@PACKAGE_VERSION@"' deploy/dkms/dkms.conf; then
	ok "--version is HOTPATH_ABI_VERSION of hotpath_uapi.h ($abi), which install.sh writes into dkms.conf"
else
	fail "--version printed '$out' (status $rc); the header says '$abi'"
fi

expect "an unknown option is a usage error" 2 "unknown option '--frobnicate'" install --frobnicate "${trees[@]}"
expect "an unknown action is a usage error" 2 "unknown action 'upgrade'" upgrade "${trees[@]}"
expect "two actions are a usage error" 2 "one action at a time" install remove "${trees[@]}"
expect "an option without its value is a usage error" 2 "option --kernel needs a value" "${trees[@]}" --kernel
expect "a kernel release that is a path is refused" 2 "is not a kernel release" -k ../../etc "${trees[@]}"
expect "a relative tree is refused" 2 "--sourcetree must be an absolute path" --sourcetree src --dkmstree "$tmp/dkms"
expect "a tree with '..' is refused" 2 "must not contain '..'" --dkmstree "$tmp/x/../dkms" --sourcetree "$tmp/src"

# No headers for a release: refused before anything is staged, naming the package that has them.
rel=0.0.0-hotpath-test
pkg="/lib/modules/$rel/build"
if [ -r /etc/os-release ] && grep -qE '^ID(_LIKE)?=.*(debian|ubuntu)' /etc/os-release; then pkg="linux-headers-$rel"; fi
expect "no headers for a release: refused, naming $pkg" 1 "$pkg" install -k "$rel" "${trees[@]}"
expect "--kernelsourcedir without headers in it is refused" 1 "holds no kernel headers" \
	-k "$rel" --kernelsourcedir "$tmp" "${trees[@]}"

# Headers that look right, but no dkms on PATH (Debian keeps it in /usr/sbin): refused, naming the package.
mkdir -p "$tmp/headers/include" && touch "$tmp/headers/Makefile"
if PATH=/usr/bin:/bin command -v dkms >/dev/null; then
	out="dkms is in /usr/bin or /bin here: $(PATH=/usr/bin:/bin command -v dkms)"
	fail "dkms missing: cannot hide it from the script"
else
	out=$(PATH=/usr/bin:/bin bash "$script" -k "$rel" --kernelsourcedir "$tmp/headers" "${trees[@]}" 2>&1)
	rc=$?
	if [ "$rc" = 1 ] && grep -qF "dkms is missing" <<<"$out" && grep -qF "apt-get install --no-install-recommends dkms" <<<"$out" &&
		[ ! -e "$tmp/src" ] && [ ! -e "$tmp/dkms" ]; then
		ok "dkms missing: refused, naming the package, nothing staged"
	else
		fail "dkms missing (status $rc)"
	fi
fi

# With dkms, on empty scratch trees: status says nothing is added; remove has nothing to do (exit 0).
if command -v dkms >/dev/null; then
	expect "status of empty trees: not added" 0 "hotpath: not added to DKMS" status "${trees[@]}"
	expect "remove with nothing installed does nothing and succeeds" 0 "nothing to remove" remove "${trees[@]}"
else
	out="dkms is not on PATH: scripts/install-deps.sh test installs it"
	fail "status and remove need dkms"
fi

# With dkms and headers that build nothing (a Makefile that fails), in scratch trees: the source is
# staged with its version, dkms adds it, the failed build is reported with the end of its make.log;
# a second run stages and adds nothing again; a staged source that differs from the checkout's is
# replaced; remove leaves nothing of hotpath in either tree.
if command -v dkms >/dev/null; then
	printf 'all:\n\t@echo "headers of the dkms test: no kernel to build against"; exit 1\nclean:\n\t@true\n' >"$tmp/headers/Makefile"
	staged=$tmp/src/hotpath-$abi
	run -k "$rel" --kernelsourcedir "$tmp/headers" "${trees[@]}"
	if [ "$rc" = 1 ] && grep -qF "staged agent/kmod into $staged" <<<"$out" && grep -qF "no kernel to build against" <<<"$out" &&
		grep -qF "building for $rel failed" <<<"$out" && grep -qx "PACKAGE_VERSION=\"$abi\"" "$staged/dkms.conf" &&
		diff -q agent/kmod/hotpath_main.c "$staged/hotpath_main.c" >/dev/null && diff -q agent/kmod/Kbuild "$staged/Kbuild" >/dev/null &&
		dkms status -m hotpath --dkmstree "$tmp/dkms" --sourcetree "$tmp/src" | grep -qx "hotpath/$abi: added"; then
		ok "a failed build: source staged with version $abi, added to DKMS, the build's make.log shown, exit 1"
	else
		fail "a failed build (status $rc)"
	fi
	run -k "$rel" --kernelsourcedir "$tmp/headers" "${trees[@]}"
	if [ "$rc" = 1 ] && grep -qF "source already staged in $staged" <<<"$out" && ! grep -qF "adding:" <<<"$out"; then
		ok "a second run stages and adds nothing again"
	else
		fail "the second run (status $rc)"
	fi
	echo "/* changed */" >>"$staged/hotpath_main.c"
	run -k "$rel" --kernelsourcedir "$tmp/headers" "${trees[@]}"
	if grep -qF "is not this checkout's agent/kmod: replacing it" <<<"$out" && grep -qF "adding:" <<<"$out" &&
		diff -q agent/kmod/hotpath_main.c "$staged/hotpath_main.c" >/dev/null; then
		ok "a staged source that differs from the checkout's is removed from DKMS and replaced"
	else
		fail "replacing a changed source (status $rc)"
	fi
	run remove "${trees[@]}"
	if [ "$rc" = 0 ] && [ ! -e "$staged" ] &&
		[ -z "$(dkms status -m hotpath --dkmstree "$tmp/dkms" --sourcetree "$tmp/src")" ]; then
		ok "remove takes hotpath out of DKMS and deletes the staged source"
	else
		fail "remove (status $rc)"
	fi
fi
