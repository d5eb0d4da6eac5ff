# SPDX-License-Identifier: Apache-2.0
# hotpathd: build with Debian's toolchain, run on a slim Debian with the shared libraries only.
FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        make gcc clang llvm bpftool libbpf-dev libelf-dev libdw-dev zlib1g-dev libzydis-dev libgrpc-dev \
        libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY proto proto
COPY agent agent
# vmlinux.h comes from the build host's BTF; mount /sys/kernel/btf at build time or commit a vmlinux.h.
RUN make -C agent

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
        libbpf1 libelf1 libdw1 zlib1g libzydis4 libgrpc29 libprotobuf-c1 libssl3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/agent/build/hotpathd /usr/local/bin/hotpathd
ENTRYPOINT ["/usr/local/bin/hotpathd"]
CMD ["--help"]
