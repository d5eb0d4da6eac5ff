#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install Hotpath's kernel module, hotpath.ko (agent/kmod/), as the DKMS package hotpath/VERSION:
# stage its source with deploy/dkms/dkms.conf into SOURCETREE/hotpath-VERSION, then `dkms add`,
# `build` and `install` it for one kernel. DKMS builds it again for every kernel installed later
# (AUTOINSTALL). Idempotent: each step already done is skipped. The kernel lane builds the module it
# proves with this script, into scratch trees (e2e/kernel-lane/build.sh). `--help` says the rest.
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: deploy/dkms/install.sh [install|remove|status] [OPTIONS]

Installs hotpath.ko, Hotpath's kernel module (agent/kmod/, GPL-2.0), as the DKMS package
hotpath/VERSION, so that it is built for a kernel now and DKMS builds it again for every kernel
installed later. Run it as root from a Hotpath checkout (or any copy that keeps deploy/dkms/ and
agent/kmod/ side by side). It needs dkms (Debian/Ubuntu: apt-get install dkms) and the headers of
the kernel it builds for.

Actions:
  install  (the default) Stage agent/kmod/ and dkms.conf into SOURCETREE/hotpath-VERSION, then
           dkms add, build and install it for KERNEL. Each step already done is skipped, so a
           second run changes nothing. A staged source that differs from this checkout's (a newer
           checkout of the same VERSION) is removed from DKMS and replaced; other versions of
           hotpath are removed from DKMS first: DKMS holds one version at a time.
           It does not load the module: `modprobe hotpath` does (stop hotpathd first if an older
           one is loaded: `rmmod hotpath` reverts whatever the agent installed in the kernel).
  remove   dkms remove every version of hotpath from every kernel and delete the staged sources.
           A loaded module stays loaded until `rmmod hotpath`.
  status   What DKMS holds of hotpath (dkms status).

Options:
  -k, --kernel RELEASE     The kernel to build for (default: the running kernel, uname -r).
  --kernelsourcedir DIR    That kernel's headers (default: /lib/modules/RELEASE/build, which the
                           headers package provides).
  --build-only             Add and build, do not install: nothing is written under the install tree.
  --dkmstree DIR           DKMS's own tree (default /var/lib/dkms). DKMS's module signing key is
                           then kept there too, not in /var/lib/dkms.
  --sourcetree DIR         Where the source is staged (default /usr/src).
  --installtree DIR        Where modules are installed (default /lib/modules); no depmod is run
                           for another tree (depmod works on /lib/modules).
                           These three build into scratch folders (absolute paths), as the kernel
                           lane does; nothing is then written to the system's trees.
  --version                Print VERSION and exit.
  -h, --help               Print this text and exit.

VERSION is the module's ABI version, HOTPATH_ABI_VERSION in agent/kmod/hotpath_uapi.h: the number
the module reports to the agent (which refuses a module of another ABI) and to modinfo. There is no
second version number to keep in step.

Exit status: 0 done (or nothing to do); 1 refused or failed, with the reason on stderr (no headers
for the kernel: which package to install; dkms missing; a build error: the end of its make.log);
2 a usage error.

Examples:
  deploy/dkms/install.sh                      # build and install for the running kernel
  deploy/dkms/install.sh -k 6.1.0-56-amd64    # for another installed kernel (its headers needed)
  deploy/dkms/install.sh status
  deploy/dkms/install.sh remove
More: docs/deployment.md ("The kernel module: hotpath.ko with DKMS").
EOF
}

say() { printf '[hotpath-dkms] %s\n' "$*"; }
die() {
	printf '[hotpath-dkms] error: %s\n' "$*" >&2
	exit 1
}
usage_error() {
	printf '[hotpath-dkms] %s (see deploy/dkms/install.sh --help)\n' "$*" >&2
	exit 2
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=hotpath

# Read the command line.
action=
kernel=
ksrc=
build_only=0
dkms_tree=
source_tree=
install_tree=
want_version=0
# value OPTION ARG: ARG as OPTION's value, or a usage error when it is missing.
value() {
	[ -n "${2:-}" ] || usage_error "option $1 needs a value"
	case $2 in -*) usage_error "option $1 needs a value, not '$2'" ;; esac
	printf '%s' "$2"
}
while [ $# -gt 0 ]; do
	case $1 in
	-h | --help)
		usage
		exit 0
		;;
	--version) want_version=1 ;;
	-k | --kernel)
		kernel=$(value "$1" "${2:-}")
		shift
		;;
	--kernelsourcedir)
		ksrc=$(value "$1" "${2:-}")
		shift
		;;
	--dkmstree)
		dkms_tree=$(value "$1" "${2:-}")
		shift
		;;
	--sourcetree)
		source_tree=$(value "$1" "${2:-}")
		shift
		;;
	--installtree)
		install_tree=$(value "$1" "${2:-}")
		shift
		;;
	--build-only) build_only=1 ;;
	install | remove | status)
		[ -z "$action" ] || usage_error "one action at a time ('$action', then '$1')"
		action=$1
		;;
	-*) usage_error "unknown option '$1'" ;;
	*) usage_error "unknown action '$1' (install, remove or status)" ;;
	esac
	shift
done
action=${action:-install}

# The package version: the module's ABI version, from the one header that defines it.
kmod=$here/../../agent/kmod
uapi=$kmod/hotpath_uapi.h
[ -f "$uapi" ] && [ -f "$kmod/hotpath_main.c" ] && [ -f "$kmod/Kbuild" ] ||
	die "the module's source is not beside this script ($kmod: Kbuild, hotpath_main.c, hotpath_uapi.h); run it from a Hotpath checkout"
kmod=$(cd "$kmod" && pwd)
version=$(sed -nE 's/^#define[[:space:]]+HOTPATH_ABI_VERSION[[:space:]]+([0-9]+)[[:space:]]*$/\1/p' "$uapi")
[[ "$version" =~ ^[0-9]+$ ]] || die "$uapi defines no HOTPATH_ABI_VERSION (a number): cannot name the package"
if [ "$want_version" = 1 ]; then
	echo "$version"
	exit 0
fi

# Check every path and name this root script hands on (they end up in rm -rf and dkms's commands).
for opt in dkmstree:"$dkms_tree" sourcetree:"$source_tree" installtree:"$install_tree" kernelsourcedir:"$ksrc"; do
	name=${opt%%:*} dir=${opt#*:}
	[ -z "$dir" ] && continue
	[[ "$dir" == /* ]] || usage_error "--$name must be an absolute path, not '$dir'"
	[[ "$dir" =~ ^[A-Za-z0-9._/+-]+$ ]] || usage_error "--$name '$dir' holds characters other than letters, digits and ._/+-"
	[[ "/$dir/" != */../* ]] || usage_error "--$name '$dir' must not contain '..'"
done
kernel=${kernel:-$(uname -r)}
[[ "$kernel" =~ ^[0-9][A-Za-z0-9._+~-]{0,63}$ ]] ||
	usage_error "'$kernel' is not a kernel release (like $(uname -r): a digit first, then letters, digits and ._+~-)"

# The headers of KERNEL, or which package gives them.
headers_package() {
	local id=
	[ -r /etc/os-release ] && id=$(. /etc/os-release && echo "${ID:-} ${ID_LIKE:-}")
	case " $id " in
	*" debian "* | *" ubuntu "*) echo "linux-headers-$1 (apt-get install linux-headers-$1)" ;;
	*" fedora "* | *" rhel "* | *" centos "*) echo "kernel-devel-$1 (dnf install kernel-devel-$1)" ;;
	*) echo "the headers (kernel build files) of $1 from your distribution" ;;
	esac
}
check_headers() {
	if [ -n "$ksrc" ]; then
		[ -f "$ksrc/Makefile" ] && [ -d "$ksrc/include" ] ||
			die "--kernelsourcedir $ksrc holds no kernel headers (no Makefile and include/ there)"
		return 0
	fi
	local dir=/lib/modules/$kernel/build
	[ -f "$dir/Makefile" ] && [ -d "$dir/include" ] ||
		die "no headers for kernel $kernel ($dir is missing): install $(headers_package "$kernel"), or name them with --kernelsourcedir"
}

# dkms itself, version 3 or later (the options and status format this script uses).
check_dkms() {
	command -v dkms >/dev/null ||
		die "dkms is missing: install it (Debian/Ubuntu: apt-get install --no-install-recommends dkms)"
	local v
	v=$(dkms --version 2>/dev/null | sed -nE 's/^dkms[^0-9]*([0-9]+)\..*/\1/p' | head -1)
	[ -n "$v" ] && [ "$v" -ge 3 ] ||
		die "dkms 3 or later is needed, this is '$(dkms --version 2>&1 | head -1)'"
}

check_root() {
	[ "$(id -u)" = 0 ] || die "run as root: dkms installs into the kernel's module tree"
}

# The dkms options that name the trees, for every dkms command below.
trees=()
[ -n "$dkms_tree" ] && trees+=(--dkmstree "$dkms_tree")
[ -n "$source_tree" ] && trees+=(--sourcetree "$source_tree")
[ -n "$install_tree" ] && trees+=(--installtree "$install_tree" --no-depmod)
# With its own tree, DKMS's signing key lives there too (dkms creates /var/lib/dkms/mok.key otherwise).
if [ -n "$dkms_tree" ]; then
	export mok_signing_key=${mok_signing_key:-$dkms_tree/mok.key}
	export mok_certificate=${mok_certificate:-$dkms_tree/mok.pub}
fi
src_root=${source_tree:-/usr/src}
dkms_root=${dkms_tree:-/var/lib/dkms}

# versions: every version of hotpath DKMS holds, one a line.
versions() {
	dkms status -m "$module" "${trees[@]}" 2>/dev/null | sed -nE "s|^$module/([^,:]+)[,:].*|\\1|p" | sort -u
}
# state VERSION: added, built or installed for KERNEL, or nothing when DKMS does not hold VERSION.
state() {
	local out
	out=$(dkms status -m "$module" -v "$1" -k "$kernel" "${trees[@]}" 2>/dev/null) || true
	if grep -qE "^$module/$1, $kernel, [^:]*: installed" <<<"$out"; then
		echo installed
	elif grep -qE "^$module/$1, $kernel, [^:]*: built" <<<"$out"; then
		echo built
	elif versions | grep -qxF "$1"; then
		echo added
	fi
}
# run WHAT CMD...: a dkms step, its output shown; on failure, the end of the build's make.log.
run() {
	local what=$1
	shift
	say "$what: $*"
	"$@" && return 0
	local log
	for log in "$dkms_root/$module/$version/build/make.log" "$dkms_root/$module/$version/$kernel/$(uname -m)/log/make.log"; do
		if [ -f "$log" ]; then
			echo "--- end of $log ---" >&2
			tail -n 25 "$log" >&2
			break
		fi
	done
	die "$what failed (dkms's words above)"
}

# remove_version VERSION: out of DKMS (every kernel), and its staged source deleted.
remove_version() {
	[[ "$1" =~ ^[A-Za-z0-9][A-Za-z0-9._+~-]*$ ]] || die "DKMS lists a version of hotpath named '$1': not one this script removes"
	[ -n "$(state "$1")" ] && run "removing hotpath/$1 from DKMS" dkms remove -m "$module" -v "$1" --all "${trees[@]}"
	if [ -d "$src_root/$module-$1" ]; then
		say "deleting the staged source $src_root/$module-$1"
		rm -rf "${src_root:?}/$module-$1"
	fi
}

case $action in
status)
	check_dkms
	out=$(dkms status -m "$module" "${trees[@]}")
	if [ -n "$out" ]; then echo "$out"; else echo "$module: not added to DKMS"; fi
	exit 0
	;;
remove)
	check_dkms
	check_root
	all=$(versions)
	# Staged sources are the folders hotpath-* whose dkms.conf names this package.
	staged=$(cd "$src_root" 2>/dev/null && for d in "$module"-*; do
		grep -qsx "PACKAGE_NAME=\"$module\"" "$d/dkms.conf" && echo "${d#"$module"-}"
	done) || true
	all=$(printf '%s\n%s\n' "$all" "$staged" | grep -v '^$' | sort -u) || true
	if [ -z "$all" ]; then
		say "nothing to remove: DKMS holds no hotpath and $src_root has no hotpath source"
		exit 0
	fi
	for v in $all; do remove_version "$v"; done
	[ -d /sys/module/hotpath ] && [ -z "$install_tree" ] &&
		say "hotpath.ko is still loaded: 'rmmod hotpath' unloads it (it reverts whatever the agent installed first)"
	say "removed"
	exit 0
	;;
esac

# install: the kernel's headers, dkms, root, and an architecture the module is written for.
[ "$(uname -m)" = x86_64 ] || die "hotpath.ko is written for x86-64 (this machine is $(uname -m))"
check_headers
check_dkms
check_root
if [ -n "$install_tree" ] && [ "$build_only" = 0 ]; then
	# A scratch install tree: the kernel's folder in it is where dkms puts the module.
	mkdir -p "$install_tree/$kernel"
fi

# Stage the source beside a temporary name, then compare it with what is staged already.
mkdir -p "$src_root" "$dkms_root"
dest=$src_root/$module-$version
tmp=$(mktemp -d "$src_root/.$module-$version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$kmod/Kbuild" "$kmod"/*.c "$kmod"/*.S "$kmod"/*.h "$tmp/"
sed "s/@PACKAGE_VERSION@/$version/" "$here/dkms.conf" >"$tmp/dkms.conf"
grep -qx "PACKAGE_VERSION=\"$version\"" "$tmp/dkms.conf" || die "$here/dkms.conf has no PACKAGE_VERSION=\"@PACKAGE_VERSION@\" line to fill in"
chmod 755 "$tmp"
chmod 644 "$tmp"/*

# One version at a time: another version of hotpath leaves DKMS first.
for v in $(versions); do
	[ "$v" = "$version" ] || remove_version "$v"
done
if [ -d "$dest" ] && diff -r -q "$dest" "$tmp" >/dev/null 2>&1; then
	say "source already staged in $dest"
else
	# A different source of the same version (a newer checkout), or DKMS holding this version without
	# its source: out with the old, so nothing is built from a mix.
	if [ -d "$dest" ] || [ -n "$(state "$version")" ]; then
		say "hotpath/$version in DKMS or $dest is not this checkout's agent/kmod: replacing it"
		remove_version "$version"
	fi
	mv "$tmp" "$dest"
	say "staged agent/kmod into $dest (hotpath/$version)"
fi

kflags=(-k "$kernel")
[ -n "$ksrc" ] && kflags+=(--kernelsourcedir "$ksrc")
[ -n "$(state "$version")" ] || run "adding" dkms add -m "$module" -v "$version" "${trees[@]}"
case $(state "$version") in
added) run "building for $kernel" dkms build -m "$module" -v "$version" "${kflags[@]}" "${trees[@]}" ;;
*) say "hotpath/$version is already built for $kernel" ;;
esac
if [ "$build_only" = 1 ]; then
	say "built: $dkms_root/$module/$version/$kernel/$(uname -m)/module/ (--build-only: not installed)"
	exit 0
fi
case $(state "$version") in
built) run "installing for $kernel" dkms install -m "$module" -v "$version" "${kflags[@]}" "${trees[@]}" ;;
installed) say "hotpath/$version is already installed for $kernel" ;;
*) die "dkms did not build hotpath/$version for $kernel (dkms status: $(dkms status -m "$module" "${trees[@]}" 2>&1 | tr '\n' ' '))" ;;
esac
[ "$(state "$version")" = installed ] || die "dkms install ended, but dkms status does not say hotpath/$version is installed for $kernel"
say "installed: hotpath/$version for $kernel; load it with 'modprobe hotpath'"
