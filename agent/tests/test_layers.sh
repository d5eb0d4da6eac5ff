#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The agent's layering: src/<layer>/ may include its own layer and the layers
# below it, never one above (LAYERS in the Makefile, bottom to top). The
# generated protocol messages (hotpath/v1/*.pb-c.h) belong to the daemon and
# the layers above it. Run from the agent directory.
set -u
layers=$(sed -nE 's/^LAYERS[[:space:]]*:=[[:space:]]*//p' Makefile)
rank() { local i=0; for l in $layers; do [ "$l" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }
daemon_rank=$(rank daemon)
bad=0
for dir in src/*/; do
	layer=$(basename "$dir")
	own=$(rank "$layer")
	if [ "$own" -lt 0 ]; then
		echo "FAIL - layers: src/$layer is not a layer named in the Makefile's LAYERS"
		bad=1
		continue
	fi
	while IFS=: read -r file line inc; do
		dep=${inc%%/*}
		if [ "$dep" = hotpath ]; then
			[ "$own" -ge "$daemon_rank" ] && continue
			echo "FAIL - layers: $file:$line includes the protocol ($inc) below the daemon layer"
			bad=1
			continue
		fi
		[ "$dep" = "$inc" ] && continue  # generated, same-folder header (e.g. a BPF skeleton)
		r=$(rank "$dep")
		if [ "$r" -lt 0 ] || [ "$r" -gt "$own" ]; then
			echo "FAIL - layers: $file:$line ($layer) includes $inc from a layer above it"
			bad=1
		fi
	done < <(grep -nE '^#include "[^"]+"' "$dir"*.[ch] | sed -E 's/^([^:]+):([0-9]+):#include "([^"]+)".*/\1:\2:\3/')
done
[ $bad = 0 ] && echo "ok - layers: every src/<layer> includes only itself and the layers below it ($layers)"
exit $bad
