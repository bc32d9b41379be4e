#!/usr/bin/env bash
# Builds scr-kernels for aarch64 and runs its tests under qemu-user emulation, so the NEON
# kernels are compiled and checked against the scalar field table on an x86 machine.
# Installs what it needs (as root): the aarch64 cross linker and C library, qemu-user, and
# rustup's aarch64-unknown-linux-gnu standard library.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
missing=()
for pkg in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "test-neon: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
runner="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner"
export SCR_KERNELS_TEST_RUNNER="$runner"
cargo clippy -p scr-kernels --target "$target" --lib -- -D warnings
cargo test -p scr-kernels --target "$target" --tests
