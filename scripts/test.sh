#!/usr/bin/env bash
# The full test suite: formatting, lints, docs, then every test of the workspace.
# Installs what a fresh Debian 12 machine lacks (run as root there).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust (rustup) first" >&2
    exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy 2>/dev/null || true

# a fresh build with every test takes about 5 GB under target/; a full disk shows up as
# many unrelated test failures, so say it first
free_kb=$(df -Pk "$(pwd)" | awk 'NR == 2 { print $4 }')
if [ -n "$free_kb" ] && [ "$free_kb" -lt $((8 * 1024 * 1024)) ]; then
    echo "warning: $((free_kb / 1024)) MiB free on $(pwd)'s file system; the build and tests need about 6 GiB (target/, /tmp)" >&2
fi

echo "== format"
cargo fmt --all -- --check
echo "== links (README.md, ARCHITECTURE.md, docs/)"
bash scripts/check-links.sh
echo "== build (plugins, fixtures, binaries, tests)"
cargo build --workspace --all-targets --locked
echo "== clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== docs"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
echo "== SDK semver (scr-plugin against its earlier releases)"
bash scripts/semver.sh
echo "== doc tests"
cargo test --workspace --doc --locked
echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --locked --no-fail-fast
else
    cargo test --workspace --locked --no-fail-fast
fi
bash scripts/test-templates.sh
echo "== plugin binaries of every scr-plugin release against this host"
bash scripts/test-old-plugins.sh
echo "== NEON kernels (aarch64 build under qemu-user)"
bash scripts/test-neon.sh
