#!/usr/bin/env bash
# Fails when the version a reader installs, the release the CHANGELOG names last and the
# version `metronome --version` prints are not one: the README's `from: "X"` install line,
# the CHANGELOG's first `## [X]` heading below `## [Unreleased]` (with its link at the
# end), and MetronomeVersion.current in the CLI. Cutting a release means changing all
# three, and this is where a forgotten one shows.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

cli="$(sed -nE 's/^[[:space:]]*static let current = "([^"]+)".*/\1/p' \
	"$root/Benchmarks/Sources/metronome/Shared/MetronomeVersion.swift")"
changelog="$(grep -m1 -oE '^## \[[0-9]+\.[0-9]+\.[0-9]+\]' "$root/CHANGELOG.md" | sed -E 's/^## \[(.*)\]$/\1/' || true)"
readme="$(grep -oE 'from: "[^"]+"' "$root/README.md" | sed -E 's/from: "(.*)"/\1/' | sort -u || true)"

failed=0
if [ -z "$cli" ] || [ -z "$changelog" ] || [ -z "$readme" ]; then
	echo "check-versions: a version was not found (CLI '$cli', CHANGELOG '$changelog', README '$readme')" >&2
	exit 1
fi
if [ "$(printf '%s\n' "$readme" | wc -l)" -ne 1 ]; then
	echo "check-versions: the README installs more than one version:" $readme >&2
	failed=1
fi
if [ "$readme" != "$changelog" ] || [ "$cli" != "$changelog" ]; then
	echo "check-versions: the README installs $readme, the CHANGELOG's latest release is $changelog," \
		"and metronome --version prints $cli" >&2
	failed=1
fi
if ! grep -qE "^\[$changelog\]: " "$root/CHANGELOG.md"; then
	echo "check-versions: the CHANGELOG has no link for [$changelog] at its end" >&2
	failed=1
fi
if [ "$failed" = 0 ]; then
	echo "check-versions: README, CHANGELOG and CLI agree on $changelog"
fi
exit "$failed"
