# SPDX-License-Identifier: Apache-2.0
# Hotpath: the two commands a new user needs are `make run` and `make test`.
# Everything else here is a building block of those two.
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: help run test deps deps-test agent backend frontend build bench check-compose clean lane kernel-lane-test simulate

help:
	@echo "make run     install what is missing, build, and run Hotpath on this host (Ctrl-C stops it)"
	@echo "make test    install what the tests need and run every test"
	@echo "make agent   build agent/build/hotpathd"
	@echo "make build   build the agent, the backend's generated code and the console"
	@echo "make bench   run the benchmarks in bench/"
	@echo "make lane    boot a Debian 6.1 kernel under QEMU as a second host of a running 'make run'"
	@echo "make kernel-lane-test   the kernel lane's proofs alone (also part of make test)"
	@echo "make simulate           beside a running 'make run': simulated hosts (scripted agents) for the fleet"
	@echo "                        pages and roll-outs; ARGS=\"--hosts 4 --slower 1\" (scripts/simulate_hosts.py --help)"

run: deps build
	./scripts/run.sh

test: deps-test build
	./scripts/test.sh

deps:
	./scripts/install-deps.sh run

deps-test:
	./scripts/install-deps.sh test

# the agent's objects build one per core (a clean clone compiles ~150 C files); under `make build` they
# take their share of its jobs instead
agent:
	$(MAKE) -C agent $(if $(findstring jobserver,$(MAKEFLAGS)),,-j$(shell nproc))

backend:
	$(MAKE) -C backend setup proto openapi bytecode

frontend: backend
	cd frontend && npm run gen:api && npm run build

# The agent (C, a compiler per core) builds beside the backend's setup (pip, one core, mostly waiting on
# the network) and the console after it: in a clean clone, one after the other, they left a core idle for
# most of the build. Each part's output is printed whole when it ends (--output-sync), not interleaved.
build:
	$(MAKE) -j$$(($$(nproc) + 1)) --output-sync=recurse agent backend frontend

# The kernel lane (e2e/kernel-lane/, docs/kernel-lane.md): a real Debian kernel under QEMU.
lane: agent
	./e2e/kernel-lane/lane.sh

kernel-lane-test: deps-test build
	./e2e/kernel-lane/test.sh

# Simulated hosts beside a running `make run` (scripts/simulate_hosts.py --help): the backend tests'
# scripted agent run N times, for the fleet page, hot code and roll-outs. Ctrl-C stops them.
simulate:
	@./scripts/simulate_hosts.py $(ARGS)

# Every benchmark runs to its end even when one fails; then the failures are named and the exit is
# non-zero. bench/smoke.sh (a suite of `make test`) runs each of them at a tiny budget.
BENCHES := kernel_parse sampling_overhead stack_sampling probe_cost console_tree cfg_layout catalog_load \
	catalog_store ingest chaos flame fleet fleet_stacks plan replace_cycles replace layout_vs_bolt hot_set_counting
bench: agent backend frontend
	@failed=; for b in $(BENCHES); do \
		echo "===== bench/$$b ====="; ./bench/$$b || failed="$$failed $$b"; \
	done; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed"; exit 1; fi; \
	echo "make bench: all $(words $(BENCHES)) benchmarks ran"

clean:
	$(MAKE) -C agent clean
	rm -rf frontend/dist
