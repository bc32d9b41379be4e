#!/usr/bin/env bash
# Build and check every plugin template the way a vendor uses it: copied out of this
# repository, built on its own against this checkout's scr-plugin, checked by rustfmt and
# clippy, unit-tested, then loaded by scr-conformance under mpiexec on 4 ranks.
#
# Templates ship no Cargo.lock: a template is a starting point whose dependencies are
# resolved when a vendor first builds it (and the vendor commits that lock). Here each
# copy is seeded with this workspace's Cargo.lock instead, so the templates are tested
# against exactly the dependency versions the workspace is tested with, and cargo needs
# no registry index to resolve them (it only adds the template's own package).
#
# Needs target/debug/scr-conformance (cargo build --workspace). Run from anywhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

conformance="$root/target/debug/scr-conformance"
if [ ! -x "$conformance" ]; then
    echo "test-templates: $conformance is missing; run cargo build --workspace first" >&2
    exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/scr-templates.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# one target directory for every template: scr-plugin and abi_stable are built once
export CARGO_TARGET_DIR="$work/target"

# OpenMPI as root on a small machine; harmless elsewhere (the one list of it)
set -a
# shellcheck source=../tests/openmpi-local.env
. "$root/tests/openmpi-local.env"
set +a

ranks=4
count=0
for template in "$root"/templates/*/; do
    [ -f "$template/Cargo.toml" ] || continue
    name="$(basename "$template")"
    echo "== template $name"
    copy="$work/$name"
    mkdir -p "$copy"
    # the sources only: never a target directory or a lock a developer left behind
    tar -C "$template" --exclude=./target --exclude=./Cargo.lock -cf - . | tar -C "$copy" -xf -
    # the path dependency as shipped (../../scr-plugin) points into this checkout
    sed -i "s|path = \"\.\./\.\./scr-plugin\"|path = \"$root/scr-plugin\"|" "$copy/Cargo.toml"
    if ! grep -q "path = \"$root/scr-plugin\"" "$copy/Cargo.toml"; then
        echo "test-templates: $name/Cargo.toml has no path dependency ../../scr-plugin to rewrite" >&2
        exit 1
    fi
    cp "$root/Cargo.lock" "$copy/Cargo.lock"
    package="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$copy/Cargo.toml" | head -n 1)"
    lib="lib${package//-/_}.so"
    # held to the workspace's standards: formatted, clippy-clean, tests passing
    (cd "$copy" && cargo fmt -- --check && cargo build && cargo clippy --all-targets -- -D warnings && cargo test)
    so="$CARGO_TARGET_DIR/debug/$lib"
    if [ ! -f "$so" ]; then
        echo "test-templates: $name built no $lib (lib name = package name with - as _)" >&2
        exit 1
    fi
    log="$work/$name.conformance.log"
    if ! mpiexec -n "$ranks" "$conformance" --plugin "$so" --dir "$work/$name.data" >"$log" 2>&1; then
        cat "$log" >&2
        echo "test-templates: $name failed scr-conformance" >&2
        exit 1
    fi
    cat "$log"
    if ! grep -q "^NOTE launched on $ranks rank(s)$" "$log"; then
        echo "test-templates: $name: scr-conformance did not run on $ranks ranks" >&2
        exit 1
    fi
    if ! grep -Eq "^[1-9][0-9]* passed, 0 failed$" "$log"; then
        echo "test-templates: $name: no passing summary line from scr-conformance" >&2
        exit 1
    fi
    count=$((count + 1))
done
if [ "$count" -eq 0 ]; then
    echo "test-templates: no template found in $root/templates" >&2
    exit 1
fi
echo "== $count template(s) built, tested and conformant"
