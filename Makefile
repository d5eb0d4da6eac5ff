# SPDX-License-Identifier: Apache-2.0
# Hotpath: the two commands a new user needs are `make run` and `make test`.
# Everything else here is a building block of those two.
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: help run test deps deps-test agent backend frontend build bench check-compose clean

help:
	@echo "make run     install what is missing, build, and run Hotpath on this host (Ctrl-C stops it)"
	@echo "make test    install what the tests need and run every test"
	@echo "make agent   build agent/build/hotpathd"
	@echo "make build   build the agent, the backend's generated code and the console"
	@echo "make bench   run the benchmarks in bench/"

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

clean:
	$(MAKE) -C agent clean
	rm -rf frontend/dist
