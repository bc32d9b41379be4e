#!/usr/bin/env bash
# Install scr-rs into an install tree (see --help). Every file is written beside its
# destination and renamed over it, so a program running from an earlier install keeps its
# mapped libraries intact.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: scripts/install.sh --prefix DIR [--from DIR] [--require-capi]

Install scr-rs under DIR:
  bin/scr, bin/scr-conformance      the administration command and the plugin harness
  bin/scr_run, scr_srun, scr_halt, scr_index, scr_postrun, ...
                                    SCR's command names (links to scr, SCR's options)
  lib/libscr.so, lib/libscr.a       the C library (SCR 3.x API)
  lib/scr/plugins/                  the shipped plugins (found with no configuration)
  lib/libscrf.so, lib/libscrf.a     the same library under SCR's Fortran name (-lscrf -lscr)
  include/scr.h, include/scrf.h     C and Fortran headers
  include/scr.f90, include/scr.mod  the Fortran 90 module (USE scr), built with mpif90
  lib/pkgconfig/scr.pc              mpicc app.c $(pkg-config --cflags --libs scr)
  lib/cmake/scr/                    find_package(scr): targets scr::scr and scr::scrf
  share/man/man1/                   scr(1), one page per subcommand, scr-conformance(1)
  share/scr/examples/               the C, C++, Fortran and Python examples
  share/scr/python/                 the Python package (pip install DIR/share/scr/python)
  etc/scr/scr.toml                  the default system configuration (an existing,
                                    edited one is kept; the new one goes beside it as .new)

Options:
  --prefix DIR      where to install (created if missing)
  --from DIR        install the artifacts already built in DIR (e.g. target/debug)
                    instead of building: by default the script runs
                    `cargo build --release --workspace` with the install's plugin
                    directory and system configuration built in, and installs
                    from target/release
  --require-capi    fail when libscr.so, libscr.a, scr.h or scrf.h is missing
                    (without it they are skipped with a warning)
  -h, --help        this text
EOF
}

die() {
    echo "scripts/install.sh: error: $*" >&2
    exit 1
}
warn() {
    echo "scripts/install.sh: warning: $*" >&2
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=
from=
require_capi=0
while [ $# -gt 0 ]; do
    case $1 in
    --prefix)
        [ $# -ge 2 ] || die "--prefix needs a directory"
        prefix=$2
        shift 2
        ;;
    --prefix=*)
        prefix=${1#--prefix=}
        shift
        ;;
    --from)
        [ $# -ge 2 ] || die "--from needs a directory"
        from=$2
        shift 2
        ;;
    --from=*)
        from=${1#--from=}
        shift
        ;;
    --require-capi)
        require_capi=1
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        usage >&2
        die "unknown argument: $1"
        ;;
    esac
done
[ -n "$prefix" ] || {
    usage >&2
    die "--prefix DIR is required"
}
prefix=$(realpath -m -- "$prefix")

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
[ -n "$version" ] || die "no workspace version in $root/Cargo.toml"

if [ -z "$from" ]; then
    command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs), or pass --from DIR with already-built artifacts"
    echo "building: cargo build --release --workspace (plugins: $prefix/lib/scr/plugins, system config: $prefix/etc/scr/scr.toml)"
    # Built into the binaries and libscr: a program statically linked with libscr.a has no
    # file of ours to look beside, and the install's own configuration is the default.
    SCR_PLUGIN_INSTALL_DIR="$prefix/lib/scr/plugins" \
        SCR_SYSTEM_CONFIG_DEFAULT="$prefix/etc/scr/scr.toml" \
        cargo build --release --workspace --manifest-path "$root/Cargo.toml" ||
        die "cargo build --release --workspace failed (scripts/setup.sh installs what the build needs)"
    from=${CARGO_TARGET_DIR:-$root/target}/release
    build_hint="cargo build --release --workspace"
else
    [ -d "$from" ] || die "--from $from is not a directory (build first: cargo build --workspace)"
    from=$(cd "$from" && pwd)
    case $from in
    */release) build_hint="cargo build --release --workspace" ;;
    *) build_hint="cargo build --workspace" ;;
    esac
fi

installed=()
# put MODE SRC DEST: copy beside DEST, then rename over it
put() {
    local mode=$1 src=$2 dest=$3
    mkdir -p "$(dirname "$dest")"
    local tmp
    tmp=$(mktemp "$dest.XXXXXX")
    cp "$src" "$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$dest"
    installed+=("${dest#"$prefix"/}")
}
# put_tree SRC DEST: replace the directory DEST with a copy of SRC (no caches)
put_tree() {
    local src=$1 dest=$2
    mkdir -p "$(dirname "$dest")"
    local tmp
    tmp=$(mktemp -d "$dest.XXXXXX")
    cp -R "$src/." "$tmp"
    find "$tmp" \( -name __pycache__ -o -name '*.pyc' -o -name '*.o' \) -prune -exec rm -rf {} +
    chmod -R u=rwX,go=rX "$tmp"
    rm -rf "$dest"
    mv "$tmp" "$dest"
    installed+=("${dest#"$prefix"/}/ ($(find "$dest" -type f | wc -l) files)")
}

# What must be there: the commands and the shipped plugins (only these: never the test
# fixtures built beside them).
plugins=(libscr_single.so libscr_partner.so libscr_xor.so libscr_reed_solomon.so libscr_axl_transfer.so)
missing=()
for f in scr scr-conformance "${plugins[@]}"; do
    [ -f "$from/$f" ] || missing+=("$from/$f")
done
[ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]}; build them with: (cd $root && $build_hint)"

# The C library and headers: required with --require-capi.
capi=("$from/libscr.so" "$from/libscr.a" "$root/capi/include/scr.h" "$root/capi/include/scrf.h")
missing=()
for f in "${capi[@]}"; do
    [ -f "$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ $require_capi -eq 1 ]; then
        die "missing: ${missing[*]}; build the C library with: (cd $root && $build_hint)"
    fi
    warn "skipped (not built or not in this tree): ${missing[*]}"
fi

mkdir -p "$prefix" || die "cannot create the prefix $prefix"
put 755 "$from/scr" "$prefix/bin/scr"
put 755 "$from/scr-conformance" "$prefix/bin/scr-conformance"
# SCR's command names, for job scripts written for SCR: links to scr, which reads SCR's
# options when called by one of them (replaced atomically)
for name in scr_run scr_srun scr_mpirun scr_jsrun scr_halt scr_index scr_postrun \
    scr_prerun scr_list_down_nodes scr_should_exit; do
    ln -sfn scr "$prefix/bin/.$name.tmp"
    mv -fT "$prefix/bin/.$name.tmp" "$prefix/bin/$name"
    installed+=("bin/$name")
done
for f in libscr.so libscr.a; do
    [ -f "$from/$f" ] || continue
    if [ $f = libscr.so ]; then put 755 "$from/$f" "$prefix/lib/$f"; else put 644 "$from/$f" "$prefix/lib/$f"; fi
    # SCR's Fortran link line is `-lscrf -lscr`: libscr holds the Fortran interface too,
    # so libscrf is libscr under SCR's name (a link; replaced atomically)
    ln -sfn "$f" "$prefix/lib/.${f/libscr/libscrf}.tmp"
    mv -fT "$prefix/lib/.${f/libscr/libscrf}.tmp" "$prefix/lib/${f/libscr/libscrf}"
    installed+=("lib/${f/libscr/libscrf}")
done
for f in "${plugins[@]}"; do
    put 755 "$from/$f" "$prefix/lib/scr/plugins/$f"
done
for h in "$root"/capi/include/*.h; do
    [ -f "$h" ] || continue
    put 644 "$h" "$prefix/include/$(basename "$h")"
done
# The Fortran 90 module (`USE scr`): its source, and scr.mod compiled with the Fortran
# compiler found (a .mod belongs to the compiler that made it; the source lets a user
# rebuild it with theirs).
put 644 "$root/capi/include/scr.f90" "$prefix/include/scr.f90"
fc=$(command -v mpif90 || command -v gfortran || true)
if [ -n "$fc" ]; then
    modtmp=$(mktemp -d)
    if "$fc" -c -J "$modtmp" -I "$root/capi/include" -o "$modtmp/scr.o" "$root/capi/include/scr.f90" >"$modtmp/log" 2>&1; then
        put 644 "$modtmp/scr.mod" "$prefix/include/scr.mod"
    else
        warn "include/scr.mod not built ($fc failed): $(cat "$modtmp/log")"
    fi
    rm -rf "$modtmp"
else
    warn "include/scr.mod not built: no Fortran compiler (mpif90, gfortran) on PATH"
fi

sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$root/config/scr.pc.in" >"$prefix/.scr.pc.tmp"
put 644 "$prefix/.scr.pc.tmp" "$prefix/lib/pkgconfig/scr.pc"
rm -f "$prefix/.scr.pc.tmp"
# the CMake package: find_package(scr) gives scr::scr and scr::scrf
for f in scrConfig.cmake scrConfigVersion.cmake; do
    sed -e "s|@VERSION@|$version|g" "$root/config/cmake/$f.in" >"$prefix/.$f.tmp"
    put 644 "$prefix/.$f.tmp" "$prefix/lib/cmake/scr/$f"
    rm -f "$prefix/.$f.tmp"
done

man=$(mktemp -d)
trap 'rm -rf "$man"' EXIT
"$from/scr" --print-man "$man" || die "$from/scr --print-man failed"
"$from/scr-conformance" --print-man "$man" || die "$from/scr-conformance --print-man failed"
for page in "$man"/*.1; do
    put 644 "$page" "$prefix/share/man/man1/$(basename "$page")"
done

for lang in c cxx fortran python; do
    if [ -d "$root/examples/$lang" ]; then
        put_tree "$root/examples/$lang" "$prefix/share/scr/examples/$lang"
    fi
done
if [ -d "$root/python" ]; then
    put_tree "$root/python" "$prefix/share/scr/python"
    # what an in-place pip build left in the source tree is not installed
    rm -rf "$prefix/share/scr/python/build" "$prefix/share/scr/python/"*.egg-info
    # a copy of the package pip-installs from anywhere still finds this libscr
    printf '# Written by scripts/install.sh: the libscr this package was installed with.\nLIBSCR = "%s"\n' \
        "$prefix/lib/libscr.so" >"$prefix/share/scr/python/scr/_install.py"
fi

# The system configuration: a site may have edited the installed one; keep it.
conf=$prefix/etc/scr/scr.toml
if [ -f "$conf" ] && ! cmp -s "$root/config/scr.toml" "$conf"; then
    put 644 "$root/config/scr.toml" "$conf.new"
    warn "kept the existing $conf; the new default is $conf.new"
else
    put 644 "$root/config/scr.toml" "$conf"
fi

echo "installed into $prefix:"
printf '  %s\n' "${installed[@]}"
