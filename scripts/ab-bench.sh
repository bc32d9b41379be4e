#!/usr/bin/env bash
# A/B benchmark: this checkout against a git ref (a commit, tag or branch), the same C
# client (examples/c/test_api.c of this checkout) through each build's libscr, pair by
# pair: scr-bench-c --vs runs every measurement once per build, back to back, alternating
# which goes first, and reports this build's figure over the ref's per pair (medians of
# the pairs' ratios with their spread), for the checkpoint loop and, with --rebuild (on by
# default here), the rebuild after a node is lost.
#
#   scripts/ab-bench.sh REF [scr-bench-c options...]
#   scripts/ab-bench.sh 4b3f38f --mib 256 --schemes RS PARTNER
#
# Defaults added here unless given: --reps 5, --rebuild. The ref is
# exported with `git archive` into target/ab/<commit> and built there with its own
# Cargo.lock and target directory (kept for the next run: delete target/ab to rebuild);
# this checkout is built with `cargo build --release --workspace`. Run it on a quiet
# machine, without mpiexec (scr-bench-c launches its own jobs). See docs/benchmarks.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
ref="$1"
shift
if ! commit="$(git rev-parse --verify --quiet "$ref^{commit}")"; then
    echo "ab-bench: $ref names no commit of this repository (a shallow clone lacks older ones: git fetch --unshallow)" >&2
    exit 1
fi

other="$root/target/ab/$commit"
if [ ! -f "$other/.exported" ]; then
    rm -rf "$other"
    mkdir -p "$other"
    git archive "$commit" | tar -x -C "$other"
    touch "$other/.exported"
fi
echo "ab-bench: building $ref ($commit) in $other" >&2
(cd "$other" && CARGO_TARGET_DIR="$other/target" cargo build --release --workspace --quiet)
if [ ! -f "$other/target/release/libscr.so" ]; then
    echo "ab-bench: $ref built no libscr.so (a commit before the C API cannot be compared this way)" >&2
    exit 1
fi
echo "ab-bench: building this checkout" >&2
cargo build --release --workspace --quiet

set -a
# shellcheck source=../tests/openmpi-local.env
. "$root/tests/openmpi-local.env"
set +a
defaults=()
case " $* " in *" --reps "*) ;; *) defaults+=(--reps 5) ;; esac
case " $* " in *" --rebuild "*) ;; *) defaults+=(--rebuild) ;; esac
exec "$root/target/release/scr-bench-c" "${defaults[@]}" --vs "$other/target/release" "$@"
