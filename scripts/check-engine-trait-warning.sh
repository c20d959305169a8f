#!/usr/bin/env bash
# Builds a throw-away client of the root package with the trait `Engine` off (`traits: []`,
# as a client that names its traits without `.defaults` gets) and fails unless the build
# warns, naming the trait, that GCD serves every timer. A client has no other way to learn
# at build time that it lost the engine. Any other warning of the library's sources fails it
# too. Linux only: elsewhere the engine is off by default and the library says nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
swift="${SWIFT:-swift}"
client="$(mktemp -d)"
trap 'rm -rf "$client"' EXIT

mkdir -p "$client/Sources/Client"
cat > "$client/Package.swift" <<MANIFEST
// swift-tools-version:6.2
import PackageDescription
let package = Package(
    name: "Client",
    dependencies: [.package(name: "Metronome", path: "$root", traits: [])],
    targets: [.executableTarget(name: "Client", dependencies: [.product(name: "Metronome", package: "Metronome")])]
)
MANIFEST
cat > "$client/Sources/Client/main.swift" <<'SOURCE'
import Metronome

print(TimerEngine.shared)
SOURCE

output="$("$swift" build --package-path "$client" 2>&1)"
if ! printf '%s\n' "$output" | grep -q "warning: Metronome is built without its Engine trait"; then
	printf '%s\n' "$output" | tail -20 >&2
	echo "check-engine-trait-warning: a build without the Engine trait did not warn (output above)" >&2
	exit 1
fi
# The library treats warnings as errors only with the engine, so that this one stays a
# warning: here any other warning of its sources fails instead.
others="$(printf '%s\n' "$output" | grep -E "^$root/Sources/.*: warning: " | grep -v "/EngineTrait.swift:" | sort -u || true)"
if [ -n "$others" ]; then
	printf '%s\n' "$others" >&2
	echo "check-engine-trait-warning: the library built without the Engine trait warns of more (above)" >&2
	exit 1
fi
described="$("$("$swift" build --package-path "$client" --show-bin-path)/Client")"
case "$described" in
*"GCD serves"*) ;;
*)
	echo "check-engine-trait-warning: the shared engine describes itself as '$described', not as GCD" >&2
	exit 1
	;;
esac
echo "check-engine-trait-warning: a build without the Engine trait warns, and the engine says GCD serves"
