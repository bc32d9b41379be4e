#!/usr/bin/env bash
# Vendors ship plugin binaries, not sources: the shipped XOR scheme and the sync and
# pthread transfer types, built from the source of every release of scr-plugin listed in
# scr-plugin/RELEASES (each release's own workspace, its own Cargo.lock), are loaded by
# this checkout's scr-conformance under mpiexec on 4 ranks. What CHANGELOG.md promises
# is checked, binary by binary: a release after which a later one up to this version
# says its binaries "must be rebuilt" is refused at load, and the refusal names what
# changed and says to rebuild against this version; every other release loads and passes
# every case. A binary that loads when the CHANGELOG says it cannot, or is refused when it
# says it loads, fails here, naming the release.
#
# Refuses to pass what it cannot check: a release commit missing from the clone (a
# shallow clone) fails, as scripts/semver.sh does.
#
# Needs target/debug/scr-conformance (cargo build --workspace). Run from anywhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

conformance="$root/target/debug/scr-conformance"
if [ ! -x "$conformance" ]; then
    echo "test-old-plugins: $conformance is missing; run cargo build --workspace first" >&2
    exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/scr-old-plugins.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# one target directory for every release: abi_stable and the like are built once
export CARGO_TARGET_DIR="$work/target"

set -a
# shellcheck source=../tests/openmpi-local.env
. "$root/tests/openmpi-local.env"
set +a

ranks=4
# run scr-conformance on one library ($1) with the rest as its options; require that it
# ran on $ranks ranks and passed every case
conform() {
    local label="$1" so="$2"
    shift 2
    local log="$work/$label.log"
    if ! mpiexec -n "$ranks" "$conformance" --plugin "$so" --dir "$work/$label.data" "$@" </dev/null >"$log" 2>&1; then
        cat "$log" >&2
        echo "test-old-plugins: $label failed scr-conformance in this host" >&2
        exit 1
    fi
    if ! grep -q "^NOTE launched on $ranks rank(s)$" "$log"; then
        cat "$log" >&2
        echo "test-old-plugins: $label: scr-conformance did not run on $ranks ranks" >&2
        exit 1
    fi
    local summary
    summary="$(grep -E "^[1-9][0-9]* passed, 0 failed$" "$log" || true)"
    if [ -z "$summary" ]; then
        cat "$log" >&2
        echo "test-old-plugins: $label: no passing summary line from scr-conformance" >&2
        exit 1
    fi
    echo "   $label: $summary"
}

# the releases whose section in CHANGELOG.md says an earlier binary must be rebuilt
current="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/scr-plugin/Cargo.toml" | head -1)"
breaks="$(awk '/^## [0-9]/ { v = $2 } /must be rebuilt/ { if (v != "") print v }' "$root/scr-plugin/CHANGELOG.md" | sort -u)"
# whether a binary built at release $1 must be rebuilt for this host: a break after it,
# up to this version
must_rebuild() {
    local b
    for b in $breaks; do
        if [ "$(printf '%s\n%s\n' "$1" "$b" | sort -V | head -1)" = "$1" ] && [ "$1" != "$b" ] &&
            [ "$(printf '%s\n%s\n' "$b" "$current" | sort -V | head -1)" = "$b" ]; then
            return 0
        fi
    done
    return 1
}

# the library is refused at load, the refusal naming the change and the rebuild
refused() {
    local label="$1" so="$2"
    shift 2
    local log="$work/$label.log"
    if mpiexec -n "$ranks" "$conformance" --plugin "$so" --dir "$work/$label.data" "$@" </dev/null >"$log" 2>&1; then
        cat "$log" >&2
        echo "test-old-plugins: $label loaded, but CHANGELOG.md says its binaries must be rebuilt for $current" >&2
        exit 1
    fi
    local why
    why="$(grep -m1 "^FAIL loads as an scr-rs plugin: incompatible plugin ABI: .*rebuild the plugin against scr-plugin $current" "$log" || true)"
    if [ -z "$why" ]; then
        cat "$log" >&2
        echo "test-old-plugins: $label: not refused at load with the reason and the rebuild advice" >&2
        exit 1
    fi
    echo "   $label: refused as CHANGELOG.md says: ${why#FAIL loads as an scr-rs plugin: }"
}

count=0
while read -r version commit; do
    case "$version" in '' | '#'*) continue ;; esac
    if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "test-old-plugins: release $version ($commit) is not in this clone (a shallow clone?); fetch the full history" >&2
        exit 1
    fi
    echo "== plugins built at scr-plugin $version ($commit)"
    src="$work/src-$version"
    mkdir -p "$src"
    git archive "$commit" | tar -x -C "$src"
    (cd "$src" && cargo build --locked --quiet -p scr-xor -p scr-axl-transfer </dev/null)
    for lib in libscr_xor.so libscr_axl_transfer.so; do
        if [ ! -f "$CARGO_TARGET_DIR/debug/$lib" ]; then
            echo "test-old-plugins: release $version built no $lib" >&2
            exit 1
        fi
        mkdir -p "$work/$version"
        cp "$CARGO_TARGET_DIR/debug/$lib" "$work/$version/$lib"
    done
    if must_rebuild "$version"; then
        refused "$version-xor" "$work/$version/libscr_xor.so" --scheme XOR
        refused "$version-transfers" "$work/$version/libscr_axl_transfer.so" \
            --transfer sync --transfer pthread
    else
        conform "$version-xor" "$work/$version/libscr_xor.so" --scheme XOR
        conform "$version-transfers" "$work/$version/libscr_axl_transfer.so" \
            --transfer sync --transfer pthread
    fi
    count=$((count + 1))
done <"$root/scr-plugin/RELEASES"
if [ "$count" -eq 0 ]; then
    echo "test-old-plugins: scr-plugin/RELEASES lists no release" >&2
    exit 1
fi
echo "== plugin binaries of $count release(s): each loads and passes, or is refused, as CHANGELOG.md says"
