#!/usr/bin/env bash
# Install what building and testing scr-rs needs on Debian 12 (run as root): a C
# toolchain, OpenMPI (the tests run MPI jobs; rsmpi's bindings need its headers) and
# libclang for rsmpi's bindgen. Each package is checked with `dpkg -s`: a file glob such
# as libclang* also matches libclang-cpp, which bindgen cannot load. Does nothing when
# everything is already installed.
set -euo pipefail
need=()
for pkg in gcc libc6-dev openmpi-bin libopenmpi-dev libclang-dev; do
    dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "scripts/setup.sh: missing Debian packages: ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
        exit 1
    fi
    echo "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
