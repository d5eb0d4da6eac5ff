#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetch what the kernel lane needs, once. QEMU, cpio and dkms are host tools and are installed with apt like
# every other dependency (only when missing). The guest's parts go into the lane's cache folder and
# never into the system: Debian's current amd64 kernel image and its headers (the ABI is resolved from
# the linux-image-amd64 meta-package, not written down here) and busybox-static, each downloaded with
# `apt-get download` and unpacked with `dpkg -x`. A second run with a complete cache does nothing.
# Prints the kernel release it fetched.
set -euo pipefail
. "$(dirname "$0")/common.sh"

[ "$(id -u)" = 0 ] || die "run as root: QEMU and cpio are installed with apt-get when missing"
command -v apt-get >/dev/null || die "the kernel lane fetches Debian's kernel packages with apt-get, which this host lacks"
export DEBIAN_FRONTEND=noninteractive

# Host tools.
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v cpio >/dev/null || missing+=(cpio)
# build.sh builds hotpath.ko through its DKMS package (deploy/dkms), as a host would.
command -v dkms >/dev/null || missing+=(dkms)
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	apt-get update -qq || true
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "could not install ${missing[*]} with apt-get"
fi

# depends_on PACKAGE PREFIX: the first dependency of PACKAGE whose name starts with PREFIX.
depends_on() {
	apt-cache depends "$1" 2>/dev/null | sed -nE "s/^ +Depends: ($2[^ <>]*)\$/\\1/p" | head -1
}

# resolve: the ABI the meta-package names today, and the exact package names of that ABI.
resolve() {
	local image
	image=$(depends_on linux-image-amd64 linux-image-) || true
	abi=${image#linux-image-}; abi=${abi%-amd64}
	[ -n "$image" ] && [ "$abi" != "$image" ] || return 1
	headers=linux-headers-$abi-amd64
	common=$(depends_on "$headers" linux-headers-) || true
	kbuild=$(depends_on "$headers" linux-kbuild-) || true
	[ -n "$common" ] && [ -n "$kbuild" ] || return 1
	pkgs=(busybox-static "$image" "$headers" "$common" "$kbuild")
}

# download DIR: apt-get download of every package into DIR; on failure keep apt's words for the error.
download() {
	rm -rf "$1"; mkdir -p "$1"
	(cd "$1" && apt-get download -q -o APT::Sandbox::User=root "${pkgs[@]}") >"$lane_cache/fetch.log" 2>&1
}

mkdir -p "$lane_cache"
if ! resolve; then
	say "package lists do not name the kernel's packages; running apt-get update"
	apt-get update -qq || die "apt-get update failed: cannot resolve Debian's current kernel (linux-image-amd64)"
	resolve || die "cannot resolve the kernel ABI: apt-cache does not know linux-image-amd64's linux-image-*-amd64 and its headers"
fi
dest=$lane_cache/$abi
if [ -f "$dest/complete" ]; then
	echo "$abi" >"$lane_cache/current"
	say "cached: kernel $abi-amd64 in $dest"
	exit 0
fi

say "fetching kernel $abi-amd64: ${pkgs[*]}"
if ! download "$dest/deb"; then
	# Old kernel ABIs leave the mirrors: refresh the lists once and resolve again.
	say "download failed; refreshing the package lists and trying again"
	apt-get update -qq || true
	resolve || die "cannot resolve the kernel ABI after apt-get update"
	dest=$lane_cache/$abi
	download "$dest/deb" || die "could not fetch the lane's packages (${pkgs[*]}): $(tail -3 "$lane_cache/fetch.log" | tr '\n' ' ')"
fi

rm -rf "$dest/root"; mkdir -p "$dest/root"
for deb in "$dest"/deb/*.deb; do
	dpkg-deb -x "$deb" "$dest/root" || die "could not unpack $deb"
done
# The headers' Makefile includes the common half by its installed path; point it at the cache.
mk=$dest/root/usr/src/linux-headers-$abi-amd64/Makefile
sed -i -E "s|^include /usr/src/|include $dest/root/usr/src/|" "$mk"
grep -q "^include $dest/root/" "$mk" || die "unexpected $mk: it no longer includes the common headers by path"
[ -f "$dest/root/boot/vmlinuz-$abi-amd64" ] || die "linux-image-$abi-amd64 has no /boot/vmlinuz-$abi-amd64"
rm -rf "$dest/deb"
touch "$dest/complete"
echo "$abi" >"$lane_cache/current"
say "fetched kernel $abi-amd64 into $dest ($(du -sh "$dest" | cut -f1))"
