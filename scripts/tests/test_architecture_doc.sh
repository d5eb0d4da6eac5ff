#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# docs/architecture.md ("as built") stays true to the tree: every source file under agent/src,
# backend/app (not the generated app/gen/ nor the frozen migrations in alembic/versions/) and
# frontend/src (not the tests nor the generated api/schema.d.ts) is named in the doc, in `backticks`,
# by its path below that folder or by its name within the folder's part of the doc (## Agent,
# ## Backend, ## Console); and every source file the doc names in `backticks` exists somewhere in the
# repository. Run from the repository's root; DOC= and ROOT= point it at another doc or tree (its own
# check runs it on a doc with a line left out).
set -u
doc=${DOC:-docs/architecture.md}
root=${ROOT:-.}
# The doc's part between the heading "## <title>" and the next "## " heading.
part() { awk -v t="## $1" 'index($0, t) == 1 { on = 1; next } /^## / { on = 0 } on' "$doc"; }
# Every `token` in a text, one a line.
ticked() { grep -oE '`[^`]+`' | tr -d '`'; }
# Source files below a folder, relative to it, less what the filter drops.
sources() { (cd "$root/$1" && find . -type f \( -name '*.c' -o -name '*.h' -o -name '*.py' -o -name '*.ts' -o -name '*.tsx' -o -name '*.css' \) | sed 's|^\./||' | sort); }
named() {
	local f=$1 n
	while IFS= read -r n; do
		n=${n#./}
		[ -z "$n" ] && continue
		if [ "$n" = "$f" ] || [[ "$f" == */"$n" ]] || [[ "$n" == */"$f" ]] || [ "$n" = "${f##*/}" ]; then return 0; fi
	done <<<"$2"
	return 1
}
missing=()
check_tree() {
	local dir=$1 title=$2 filter=$3 names f
	names=$(part "$title" | ticked)
	while IFS= read -r f; do
		[ -z "$f" ] && continue
			# Named by its path below the folder, by a tail of that path or a longer path ending in it, or by
		# its bare name; a header X.h also by its module's X.c (the doc's convention: "X.c with X.h").
		if named "$f" "$names" || { [[ "$f" == *.h ]] && [ -f "$root/$dir/${f%.h}.c" ] && named "${f%.h}.c" "$names"; }; then continue; fi
		missing+=("$dir/$f")
	done < <(sources "$dir" | grep -vE "$filter")
}
check_tree agent/src Agent '^$'
check_tree backend/app Backend '^(gen/|alembic/versions/)|(^|/)__init__\.py$'
check_tree frontend/src Console '(^|/)(tests?|__tests__)/|\.test\.tsx?$|^api/schema\.d\.ts$|(^|/)vite-env\.d\.ts$'
if [ ${#missing[@]} -eq 0 ]; then
	echo "ok - architecture doc: names every source file"
else
	echo "FAIL - architecture doc: names every source file: ${#missing[@]} not named:"
	printf '  %s\n' "${missing[@]}"
fi
# The other way: a `name.ext` (a source file's ending) the doc names is a file git tracks (the generated
# app/gen/ and api/schema.d.ts, and the placeholder X.c/X.h, aside).
tracked=$(cd "$root" && git ls-files 2>/dev/null || find . -type f | sed 's|^\./||')
gone=()
while IFS= read -r n; do
	n=${n#./}
	if ! grep -qE "(^|/)${n//./\\.}\$" <<<"$tracked"; then gone+=("$n"); fi
done < <(ticked <"$doc" | grep -E '^[A-Za-z0-9_./-]+\.(c|h|py|ts|tsx|css)$' | grep -vE '[*]|^[A-Z]\.[ch]$|(^|/)gen/|(^|/)schema\.d\.ts$' | sort -u)
if [ ${#gone[@]} -eq 0 ]; then
	echo "ok - architecture doc: every source file it names exists"
else
	echo "FAIL - architecture doc: every source file it names exists: ${#gone[@]} do not:"
	printf '  %s\n' "${gone[@]}"
fi
