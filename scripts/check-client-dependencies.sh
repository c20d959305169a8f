#!/usr/bin/env bash
# Builds a throw-away client of the root package's `Metronome`, `MetronomeTesting` and
# `MetronomeObservability` products, with only the default trait (`Engine`), and fails if
# the client resolves any package besides Metronome, or if its binary links Foundation. A
# client must get the toolchain and libevent, nothing else; this catches a dependency (or
# one that its trait no longer guards) or an `import Foundation` slipping back into the
# library.
#
# With --engineless the client turns the trait `Engine` off, and the check also fails if
# its binary links libevent: without the engine, GCD fires every timer.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
swift="${SWIFT:-swift}"
client="$(mktemp -d)"
trap 'rm -rf "$client"' EXIT
traits=""
if [ "${1:-}" = "--engineless" ]; then
	traits=", traits: []"
fi

mkdir -p "$client/Sources/Client"
cat > "$client/Package.swift" <<MANIFEST
// swift-tools-version:6.2
import PackageDescription
let package = Package(
    name: "Client",
    dependencies: [.package(name: "Metronome", path: "$root"$traits)],
    targets: [
        .executableTarget(name: "Client", dependencies: [
            .product(name: "Metronome", package: "Metronome"),
            .product(name: "MetronomeTesting", package: "Metronome"),
            .product(name: "MetronomeObservability", package: "Metronome"),
        ])
    ]
)
MANIFEST
cat > "$client/Sources/Client/main.swift" <<'SOURCE'
import Metronome
import MetronomeObservability
import MetronomeTesting

let timeline = ManualTimeline()
let timer = SafeDispatchTimer(backend: .custom(timeline))
_ = timer.schedule(interval: 1) {}
timeline.advance(by: .seconds(1))
let engineTimer = SafeDispatchTimer()
print(engineTimer.schedule(interval: 60) {}, engineTimer.cancel())
print(try await withTimeout(.seconds(60)) { 42 })
SOURCE

"$swift" build --package-path "$client" >/dev/null

# A package found by path is identified by its directory's name, lower-cased.
metronome="$(basename "$root" | tr '[:upper:]' '[:lower:]')"
packages="$("$swift" package --package-path "$client" show-dependencies --format flatlist)"
foreign="$(printf '%s\n' "$packages" | grep -vx "$metronome" | grep -v '^$' || true)"
if [ -n "$foreign" ]; then
	echo "check-client-dependencies: a client of Metronome resolves other packages:" >&2
	printf '%s\n' "$foreign" >&2
	exit 1
fi

binary="$("$swift" build --package-path "$client" --show-bin-path)/Client"
if readelf -d "$binary" | grep NEEDED | grep -i 'libFoundation'; then
	echo "check-client-dependencies: a client of Metronome links Foundation (above)" >&2
	exit 1
fi
if [ -n "$traits" ]; then
	if readelf -d "$binary" | grep NEEDED | grep -i 'libevent'; then
		echo "check-client-dependencies: a client without the engine links libevent (above)" >&2
		exit 1
	fi
	echo "check-client-dependencies: a client without the engine links no libevent"
fi
echo "check-client-dependencies: a client resolves only Metronome and links no Foundation"
