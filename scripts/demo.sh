#!/usr/bin/env bash
# The demo: build scr-rs, list the plugin libraries it loads, and show how the seed's
# three-level checkpoint configuration is interpreted. (The MPI checkpoint/restart demo
# replaces this once the runtime lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --quiet
scr=target/debug/scr
example=config/examples/three-level.toml
run() { printf '\n$ %s\n' "$*"; "$@"; }
run $scr plugins list
run $scr config check $example
for n in 1 4 8; do
    run $scr config explain -c $example --checkpoint $n
done
