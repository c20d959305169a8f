#!/usr/bin/env bash
# Fails when a file of the Swift library names a type declared in a layer above its own.
#
# The library's folders are layers, lowest first: each may use the ones below it and none
# above, so a reader (and a change) can stop at a layer's floor. The vocabulary (clocks,
# instants, schedules, ticks, errors) is spoken by all; the firing seam takes a schedule and
# an opaque receiver and knows none of its callers; the engine is one implementation of it;
# the timer is built on the seam; the patterns on the timer. A type is named when its name
# appears as a word outside comments; a file outside every layer fails too.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)/Sources/Metronome"
layers=(Vocabulary Firing Engine Timer Patterns)
# Crossings not yet removed, each `file:Type`; one that no longer occurs fails, so the list
# only shrinks. The seam still takes the timer's core as its receiver: the engine's C
# callbacks turn a context pointer back into that one class without a dynamic cast, which
# cost about a third of the Swift layer's firing rate when a protocol was tried.
crossings=(
	"Firing/TimerFiring.swift:TimerCore"
	"Firing/BackendArmings.swift:TimerCore"
	"Engine/TimerEngine+Firing.swift:TimerCore"
)

# The types a layer declares at the top level of its files.
declared() {
	cat "$src/$1"/*.swift |
		grep -oE '^(@[A-Za-z]+ +)*((public|package|internal|private|fileprivate|final|indirect|nonisolated) +)*(class|struct|enum|protocol|actor|typealias) +[A-Za-z_][A-Za-z0-9_]*' |
		awk '{ print $NF }' | sort -u || true
}

failed=0
seen=()
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
	above=()
	for ((high = low + 1; high < ${#layers[@]}; high++)); do
		while IFS= read -r type; do above+=("$type"); done < <(declared "${layers[high]}")
	done
	[ "${#above[@]}" -gt 0 ] || continue
	pattern="\\b($(IFS='|'; echo "${above[*]}"))\\b"
	for file in "$src/${layers[low]}"/*.swift; do
		# Comments are left out: a doc comment may point up to what uses a type.
		names="$(sed -E 's/"[^"]*"//g; s#^[[:space:]]*//.*$##; s#[[:space:]]+//[^"]*$##' "$file" | grep -oE "$pattern" | sort -u || true)"
		for name in $names; do
			crossing="${file#"$src"/}:$name"
			if [[ " ${crossings[*]} " == *" $crossing "* ]]; then
				seen+=("$crossing")
			else
				echo "check-layers: ${file#"$src"/} (${layers[low]}) names $name, of a layer above"
				failed=1
			fi
		done
	done
done
for crossing in "${crossings[@]}"; do
	if [[ " ${seen[*]:-} " != *" $crossing "* ]]; then
		echo "check-layers: $crossing no longer crosses: take it off the list"
		failed=1
	fi
done
exit "$failed"
