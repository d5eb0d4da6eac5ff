# SPDX-License-Identifier: Apache-2.0
# Hotpath: the two commands a new user needs are `make run` and `make test`.
# Everything else here is a building block of those two.
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: help run test deps deps-test agent backend frontend build bench check-compose clean lane kernel-lane-test

help:
	@echo "make run     install what is missing, build, and run Hotpath on this host (Ctrl-C stops it)"
	@echo "make test    install what the tests need and run every test"
	@echo "make agent   build agent/build/hotpathd"
	@echo "make build   build the agent, the backend's generated code and the console"
	@echo "make bench   run the benchmarks in bench/"
	@echo "make lane    boot a Debian 6.1 kernel under QEMU as a second host of a running 'make run'"
	@echo "make kernel-lane-test   the kernel lane's proofs alone (also part of make test)"

run: deps build
	./scripts/run.sh

test: deps-test build
	./scripts/test.sh

deps:
	./scripts/install-deps.sh run

deps-test:
	./scripts/install-deps.sh test

agent:
	$(MAKE) -C agent

backend:
	$(MAKE) -C backend setup proto openapi

frontend: backend
	cd frontend && npm run gen:api && npm run build

build: agent backend frontend

# The kernel lane (e2e/kernel-lane/, docs/kernel-lane.md): a real Debian kernel under QEMU.
lane: agent
	./e2e/kernel-lane/lane.sh

kernel-lane-test: deps-test build
	./e2e/kernel-lane/test.sh

bench: agent backend frontend
	./bench/kernel_parse
	./bench/sampling_overhead
	./bench/stack_sampling
	./bench/probe_cost
	./bench/console_tree
	./bench/cfg_layout
	./bench/catalog_load
	./bench/chaos
	./bench/plan
	./bench/replace_cycles
	./bench/replace

clean:
	$(MAKE) -C agent clean
	rm -rf frontend/dist
