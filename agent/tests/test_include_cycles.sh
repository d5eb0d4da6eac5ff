#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# No include circle between the modules of one layer. A module is a source
# file with its header, src/<layer>/X.c + X.h, named X. Module X uses module Y
# when X.c or X.h includes "<layer>/Y.h" (Y other than X); over every layer the
# graph of "uses" must have no cycle (e.g. a.c includes b.h and b.c includes
# a.h). A header without a .c of its own (types only, such as daemon/agent.h,
# the daemon's state) holds no code that could call back, so it is no module
# and an include of it makes no edge. Run from the agent directory.
set -u
bad=0
for dir in src/*/; do
	layer=$(basename "$dir")
	edges=$(grep -HE "^#include \"$layer/[^\"]+\.h\"" "$dir"*.[ch] 2>/dev/null |
		sed -E "s|^src/$layer/([^:/]+)\.[ch]:#include \"$layer/([^\"]+)\.h\".*|\1 \2|" |
		while read -r from to; do
			[ "$from" = "$to" ] && continue
			[ -f "$dir$from.c" ] && [ -f "$dir$to.c" ] && echo "$from $to"
		done | sort -u)
	[ -z "$edges" ] && continue
	if ! out=$(printf '%s\n' "$edges" | tsort 2>&1 >/dev/null) || [ -n "$out" ]; then
		# tsort names each loop it breaks: a header line, then the loop's modules.
		loops=$(printf '%s\n' "$out" | awk '/input contains a loop/ { if (l != "") print l; l = ""; next }
			{ sub(/^tsort: /, ""); l = (l == "" ? $0 : l " -> " $0) } END { if (l != "") print l }')
		while IFS= read -r l; do
			echo "FAIL - include cycles: src/$layer: $l include each other in a circle"
		done <<<"$loops"
		bad=1
	fi
done
[ $bad = 0 ] && echo "ok - include cycles: no layer's modules include each other in a circle"
exit $bad
