#!/usr/bin/env bash
# Fails when a file of the Swift library names a type declared in a layer above its own.
#
# The library's folders are layers, lowest first: each may use the ones below it and none
# above, so a reader (and a change) can stop at a layer's floor. The vocabulary (clocks,
# instants, schedules, ticks, errors) is spoken by all; a timer's core (its state machine,
# state, lock, and the receiver a seam fires) knows none of what fires it; the firing seam
# takes a schedule and a core and knows none of its callers; the engine is one
# implementation of it; the timer is built on the seam; the patterns on the timer. A type is
# named when its name appears as a word outside comments and strings. Nested types count as
# top-level ones do, except a name that the file's own layer, or one below it, declares too:
# that name is its own. A file outside every layer fails too.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)/Sources/Metronome"
layers=(Vocabulary Core Firing Engine Timer Patterns)

# The types a layer declares, at any depth of nesting. A nested typealias declares no type
# (it names one for a protocol, as a clock's `Duration` does), so only a top-level one counts.
declared() {
	cat "$src/$1"/*.swift |
		grep -oE '^([[:space:]]*(@[A-Za-z]+(\([^)]*\))? +)*((public|package|internal|private|fileprivate|final|indirect|nonisolated|open) +)*(class|struct|enum|protocol|actor)|(@[A-Za-z]+ +)*((public|package|internal|private|fileprivate) +)*typealias) +[A-Za-z_][A-Za-z0-9_]*' |
		awk '{ print $NF }' | sort -u || true
}

failed=0
while IFS= read -r file; do
	folder="${file#"$src"/}"
	folder="${folder%%/*}"
	found=0
	for layer in "${layers[@]}"; do [ "$layer" = "$folder" ] && found=1; done
	if [ "$found" = 0 ]; then
		echo "check-layers: ${file#"$src"/} is in no layer (${layers[*]})"
		failed=1
	fi
done < <(find "$src" -name '*.swift')

for ((low = 0; low < ${#layers[@]}; low++)); do
	own=()
	for ((below = 0; below <= low; below++)); do
		while IFS= read -r type; do own+=("$type"); done < <(declared "${layers[below]}")
	done
	above=()
	for ((high = low + 1; high < ${#layers[@]}; high++)); do
		while IFS= read -r type; do
			[[ " ${own[*]:-} " == *" $type "* ]] || above+=("$type")
		done < <(declared "${layers[high]}")
	done
	[ "${#above[@]}" -gt 0 ] || continue
	pattern="\\b($(IFS='|'; echo "${above[*]}"))\\b"
	for file in "$src/${layers[low]}"/*.swift; do
		# Comments are left out: a doc comment may point up to what uses a type.
		names="$(sed -E 's/"[^"]*"//g; s#^[[:space:]]*//.*$##; s#[[:space:]]+//[^"]*$##' "$file" | grep -oE "$pattern" | sort -u || true)"
		for name in $names; do
			echo "check-layers: ${file#"$src"/} (${layers[low]}) names $name, of a layer above"
			failed=1
		done
	done
done
exit "$failed"
