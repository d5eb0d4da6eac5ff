#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run every linter and formatter check of the project, each as one test case, and end with one
# "N passed, N failed" line (scripts/test.sh runs this as its "lint" suite).
#   agent     clang-format (agent/.clang-format); cppcheck's warning and portability checks (agent/Makefile)
#   python    ruff (lint, import order, format --check) and mypy (strict types), configured in
#             backend/pyproject.toml, over the backend, its tests, the agent's Python stream tests, the
#             Python benchmarks, the kernel lane's checks and scripts/simulate_hosts.py; import-linter
#             (lint-imports): the layers of backend/app and no import cycles between the modules of a
#             package, also in that file
#   console   Prettier (.prettierrc.json at the top: the console and the browser tests; `npm run format`
#             in frontend/ rewrites), ESLint: typescript-eslint with type information, React hooks rules,
#             the console's layers (no import cycle, no feature importing another; frontend/eslint.config.js)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
passed=0 failed=0

# check NAME CMD...: one case, run in the background beside the others (the checks are independent and
# mostly one process each: run one after the other they took 110 s of a 2-core machine, mypy and ESLint
# the most); `report` waits for them and prints each verdict in the order they were started, a case's
# output only when it failed.
out=$(mktemp -d /tmp/hotpath-lint.XXXXXX)
trap 'rm -rf "$out"' EXIT
names=()
check() {
	local name=$1 i=${#names[@]}; shift
	names+=("$name")
	( "$@" >"$out/$i.log" 2>&1; echo $? >"$out/$i.rc" ) &
}
report() {
	wait
	local i
	for i in "${!names[@]}"; do
		if [ "$(cat "$out/$i.rc")" = 0 ]; then
			echo "ok - ${names[$i]}"; passed=$((passed + 1))
		else
			tail -40 "$out/$i.log"
			echo "FAIL - ${names[$i]}"; failed=$((failed + 1))
		fi
	done
}

check "agent: clang-format" make -s -C agent lint
check "agent: cppcheck" make -s -C agent cppcheck
py=backend/.venv/bin
# bench/replace, bench/layout_vs_bolt and bench/hot_set_counting are Python without a .py name, which ruff does not pick from a folder.
benchpy="bench/replace bench/layout_vs_bolt bench/hot_set_counting"
check "python: ruff" "$py/ruff" check --config backend/pyproject.toml backend agent/tests/python bench $benchpy e2e/kernel-lane deploy \
	scripts
check "python: ruff format" "$py/ruff" format --check --config backend/pyproject.toml backend agent/tests/python bench $benchpy \
	e2e/kernel-lane deploy scripts
check "python: mypy" bash -c "cd backend && .venv/bin/mypy"
check "python: layers" bash -c "cd backend && .venv/bin/lint-imports --no-cache"
check "console: eslint" bash -c 'cd frontend && npx eslint --max-warnings 0 .'
check "typescript: prettier" frontend/node_modules/.bin/prettier --check --log-level warn \
	"frontend/src/**/*.{ts,tsx,css}" "frontend/bench/**/*.ts" "frontend/*.{ts,js}" "e2e/**/*.ts" "e2e/*.ts"
report

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
