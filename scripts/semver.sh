#!/usr/bin/env bash
# The SDK's promise, checked: the public API of scr-plugin against every earlier release
# of its series (git tags scr-plugin-v<series>.*), with cargo-semver-checks. A break the
# version does not announce fails here, naming the item; see
# scr-plugin/src/manual/versions.rs for the rules and CHANGELOG.md for what changed.
#
# A new series (its x.y.0, the version's series having no earlier tag) must come with its
# CHANGELOG section and a migration note in the manual; this script checks that they are
# there instead. It refuses to pass what it cannot check: no cargo-semver-checks (run
# scripts/setup.sh), or no release tag of the series (a shallow clone: git fetch --tags).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo semver-checks --version >/dev/null 2>&1; then
    echo "scripts/semver.sh: cargo-semver-checks is not installed; run scripts/setup.sh" >&2
    exit 1
fi
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' scr-plugin/Cargo.toml | head -1)
if [ -z "$version" ]; then
    echo "scripts/semver.sh: scr-plugin/Cargo.toml names no version of its own" >&2
    exit 1
fi
series=${version%.*}
baselines=$(git tag --list "scr-plugin-v${series}.*" | grep -vx "scr-plugin-v${version}" || true)
if [ -z "$baselines" ]; then
    if [ "${version##*.}" != 0 ]; then
        echo "scripts/semver.sh: no earlier release of scr-plugin ${series} is tagged (scr-plugin-v${series}.*) to check ${version} against; a shallow clone? git fetch --tags" >&2
        exit 1
    fi
    # the first release of a series: announced, with a migration note
    grep -q "^## ${version}" scr-plugin/CHANGELOG.md || {
        echo "scripts/semver.sh: scr-plugin ${version} starts a series, but CHANGELOG.md has no \"## ${version}\" section" >&2
        exit 1
    }
    grep -q "${version}" scr-plugin/src/manual/versions.rs || {
        echo "scripts/semver.sh: scr-plugin ${version} starts a series, but the manual's versions page has no migration note for it" >&2
        exit 1
    }
    echo "scr-plugin ${version} starts series ${series}: announced in CHANGELOG.md and the manual"
    exit 0
fi
for tag in $baselines; do
    echo "scr-plugin ${version} against ${tag#scr-plugin-v} (${tag})"
    cargo semver-checks check-release --package scr-plugin --baseline-rev "$tag"
done
