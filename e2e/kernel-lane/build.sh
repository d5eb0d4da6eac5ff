#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build the kernel lane's guest image from the fetched kernel: an uncompressed initramfs holding
# busybox, /init (guest/init), hotpathd with the shared libraries it links (the very binary the host
# runs: see docs/decisions.md), the virtio network modules with what they depend on, the test module
# module/hotpath_lane.c and the lane's livepatch module/hotpath_lanepatch.c built against the fetched headers, Hotpath's kernel module agent/kmod/
# as its DKMS package (deploy/dkms) builds and installs it for the fetched kernel, the static test
# programs guest/lanework.c, guest/kreader.c and guest/kmodtest.c, and the guest scripts (ktarget.sh,
# kcycles.sh and its kcheck.sh, kkeys.sh, kscalls.sh, klivepatch.sh, kdrain.sh). Prints the image's path.
# Per-boot settings (where the backend is, credentials, the job to run) are not in it: boot.sh appends
# them as a second archive.
#
#   HOTPATHD   the agent binary to carry (default agent/build/hotpathd)
set -euo pipefail
. "$(dirname "$0")/common.sh"
lane_paths
hotpathd=${HOTPATHD:-$repo_root/agent/build/hotpathd}
[ -x "$hotpathd" ] || die "$hotpathd is missing: run 'make agent' first"
command -v cpio >/dev/null || die "cpio is missing: run e2e/kernel-lane/fetch.sh"
command -v gcc-12 >/dev/null || die "gcc-12 (the compiler the kernel's headers name) is missing: apt-get install gcc-12"
command -v dkms >/dev/null ||
	die "dkms is missing (the lane builds hotpath.ko with it): run scripts/install-deps.sh test, or apt-get install --no-install-recommends dkms"

mkdir -p "$build"
stage=$build/stage
rm -rf "$stage" "$build/module" "$build/kmod"
mkdir -p "$stage"/{bin,sbin,usr/bin,proc,sys,dev,tmp,run,etc,root,lane,lib/modules}

# The test module and the lane's livepatch (module/hotpath_lanepatch.c), against the fetched kernel's headers (their Makefile was pointed at the cache).
cp -r "$lane_dir/module" "$build/module"
make -s -C "$kheaders" M="$build/module" modules >"$build/module.log" 2>&1 ||
	{ tail -20 "$build/module.log" >&2; die "building module/hotpath_lane.c against $release failed"; }
cp "$build/module/hotpath_lane.ko" "$build/module/hotpath_lanepatch.ko" "$stage/lane/"
# Hotpath's own module (agent/kmod) through its DKMS package (deploy/dkms): install.sh stages it,
# dkms adds, builds and installs it for the fetched kernel, all in scratch trees under the build folder
# (nothing in /var/lib/dkms, /usr/src or /lib/modules of this machine), and the lane carries the file
# dkms installed. So every check of hotpath.ko proves the module DKMS builds on a host. No fallback to a
# plain make: dkms missing or refusing fails the lane with its words. dkms signs the module as it does
# on a Debian host with that kernel's kbuild (sign-file from the fetched linux-kbuild, a key of its own
# in the scratch tree); the guest loads it like an unsigned module (its key is not the kernel's).
dkms_dir=$build/dkms
rm -rf "$dkms_dir"
mkdir -p "$dkms_dir/tree" "$dkms_dir/src" "$dkms_dir/lib"
sign_file=$kroot/usr/lib/linux-kbuild-${abi%.*}/scripts/sign-file \
	"$repo_root/deploy/dkms/install.sh" install --kernel "$release" --kernelsourcedir "$kheaders" \
	--dkmstree "$dkms_dir/tree" --sourcetree "$dkms_dir/src" --installtree "$dkms_dir/lib" >"$build/kmod.log" 2>&1 ||
	{ tail -30 "$build/kmod.log" >&2; die "building hotpath.ko through DKMS (deploy/dkms/install.sh) for $release failed (all of it: $build/kmod.log)"; }
ko=$dkms_dir/lib/$release/updates/dkms/hotpath.ko
[ -f "$ko" ] || die "dkms reported hotpath.ko installed, but $ko is not there (see $build/kmod.log)"
cp "$ko" "$stage/lane/"

# The guest workload: static, so its only read()s are the ones it counts.
gcc -static -O2 -Wall -Wextra -Werror -o "$stage/lane/lanework" "$lane_dir/guest/lanework.c" ||
	die "building guest/lanework.c failed (static linking needs libc6-dev)"
gcc -static -O2 -Wall -Wextra -Werror -o "$stage/lane/kreader" "$lane_dir/guest/kreader.c" ||
	die "building guest/kreader.c failed"
gcc -static -O2 -Wall -Wextra -Werror -I "$repo_root/agent/kmod" -o "$stage/lane/kmodtest" "$lane_dir/guest/kmodtest.c" ||
	die "building guest/kmodtest.c failed"

# busybox and the init.
cp "$busybox" "$stage/bin/busybox"
cp "$lane_dir/guest/init" "$stage/init"
cp "$lane_dir/guest/jobs.sh" "$stage/lane/jobs.sh"
cp "$lane_dir/guest/ktarget.sh" "$stage/lane/ktarget.sh"
cp "$lane_dir/guest/kkeys.sh" "$stage/lane/kkeys.sh"
cp "$lane_dir/guest/kscalls.sh" "$stage/lane/kscalls.sh"
cp "$lane_dir/guest/kcycles.sh" "$lane_dir/guest/kcheck.sh" "$lane_dir/guest/klivepatch.sh" "$lane_dir/guest/kdrain.sh" \
	"$lane_dir/guest/lib.sh" "$stage/lane/"
chmod 755 "$stage/init" "$stage/lane/jobs.sh" "$stage/lane/ktarget.sh" "$stage/lane/kkeys.sh" "$stage/lane/kscalls.sh" \
	"$stage/lane/kcycles.sh" "$stage/lane/kcheck.sh" "$stage/lane/klivepatch.sh" "$stage/lane/kdrain.sh"

# hotpathd and its shared libraries (ldd's closure, each at the path the dynamic loader looks in).
cp "$hotpathd" "$stage/usr/bin/hotpathd"
libs=$(ldd "$hotpathd" | awk '/=> \// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}') ||
	die "ldd $hotpathd failed"
[ -n "$libs" ] || die "ldd found no libraries for $hotpathd (a static build? then drop this step)"
for lib in $libs; do
	mkdir -p "$stage$(dirname "$lib")"
	cp -L "$lib" "$stage$lib"
done

# Kernel modules: the virtio network stack and every module it depends on (read from each module's
# own .modinfo "depends=" field, since the unpacked package has no modules.dep), in load order.
declare -A modpath seen
while IFS= read -r -d '' ko; do modpath[$(basename "$ko" .ko)]=$ko; done < <(find "$kmodules" -name '*.ko' -print0)
order=()
add_module() {
	local m=${1//-/_} dep deps
	[ -n "${seen[$m]:-}" ] && return 0
	seen[$m]=1
	[ -n "${modpath[$m]:-}" ] || die "kernel module $m is not in linux-image-$release"
	deps=$(tr '\0' '\n' <"${modpath[$m]}" | sed -n 's/^depends=//p' | tr ',' ' ')
	for dep in $deps; do add_module "$dep"; done
	order+=("$m")
	cp "${modpath[$m]}" "$stage/lib/modules/$m.ko"
}
for m in virtio_pci virtio_net; do add_module "$m"; done
printf '%s\n' "${order[@]}" >"$stage/lane/modules.order"

(cd "$stage" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) >"$build/initramfs.cpio.tmp" ||
	die "cpio failed"
mv "$build/initramfs.cpio.tmp" "$build/initramfs.cpio"
echo "$release" >"$build/release"
say "guest image $build/initramfs.cpio ($(du -h "$build/initramfs.cpio" | cut -f1)): hotpathd, ${#order[@]} virtio modules, hotpath_lane.ko, hotpath.ko (DKMS hotpath/$("$repo_root/deploy/dkms/install.sh" --version))" >&2
echo "$build/initramfs.cpio"
