#!/usr/bin/env bash
# The SDK's promise, checked: the public API of scr-plugin against every earlier release
# of its series (listed with their commits in scr-plugin/RELEASES, and tagged
# scr-plugin-v<version>), with cargo-semver-checks. A break the
# version does not announce fails here, naming the item; see
# scr-plugin/src/manual/versions.rs for the rules and CHANGELOG.md for what changed.
#
# A new series (its x.y.0, the series having no earlier release) must come with its
# CHANGELOG section and a migration note in the manual; this script checks that they are
# there instead. It refuses to pass what it cannot check: no cargo-semver-checks (run
# scripts/setup.sh), or a release commit missing from a full clone. In a shallow clone,
# which holds no release to build, it says loudly which release it could not check.
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
# the earlier releases of this series, from scr-plugin/RELEASES (version commit)
baselines=$(awk -v s="${series}." -v v="$version" '$1 !~ /^#/ && index($1, s) == 1 && $1 != v { print $1 "=" $2 }' scr-plugin/RELEASES)
if [ -z "$baselines" ]; then
    if [ "${version##*.}" != 0 ]; then
        echo "scripts/semver.sh: scr-plugin/RELEASES lists no earlier release of series ${series} to check ${version} against" >&2
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
for release in $baselines; do
    old=${release%%=*}
    commit=${release#*=}
    if ! git cat-file -e "${commit}^{commit}" 2>/dev/null; then
        if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
            # a shallow clone holds no history to build the release from: said loudly,
            # not taken for a pass of the check (run it in a full clone)
            echo "scripts/semver.sh: WARNING: NOT CHECKED against ${old}: its commit ${commit} is not in this shallow clone (git fetch --unshallow)" >&2
            continue
        fi
        echo "scripts/semver.sh: scr-plugin ${old}'s commit ${commit} (scr-plugin/RELEASES) is not in this repository" >&2
        exit 1
    fi
    echo "scr-plugin ${version} against ${old} (commit ${commit:0:12}, tag scr-plugin-v${old})"
    cargo semver-checks check-release --package scr-plugin --baseline-rev "$commit"
done
