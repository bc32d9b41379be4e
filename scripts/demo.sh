#!/usr/bin/env bash
# The demo: a 4-rank MPI stencil on 2 simulated nodes checkpoints every 5 steps into
# node-local cache, protected by XOR across the nodes (the default scheme). One rank is
# killed (SIGKILL) after step 17 and node1 is lost with everything it cached. The job is
# started again: init rebuilds node1's files from XOR parity, the job resumes from the
# newest checkpoint and ends in exactly the state of an uninterrupted run. The job then
# goes on with 6 ranks on 3 nodes, restarting from the checkpoint 4 ranks wrote, and
# again ends in the uninterrupted run's state. Last, under Open MPI 5 with ULFM (installed
# by setup.sh into target/ulfm), a job with a spare process loses a rank and its node and
# goes on inside the same mpiexec, again to the uninterrupted run's state. Then the
# plugins and the configuration in force are shown.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo
cargo build --workspace --quiet
set -a; . tests/openmpi-local.env; set +a
repo=$PWD
heat="$PWD/target/debug/scr-heat"
scr="$PWD/target/debug/scr"
work=$(mktemp -d /tmp/scr-demo.XXXXXX)
mkdir -p "$work/prefix"
export SCR_CACHE_BASE="$work/cache" SCR_CNTL_BASE="$work/cntl" SCR_JOB_ID=demo
export SCR_NODE_NAMES=node0,node0,node1,node1
run() { printf '\n$ %s\n' "$*"; "$@"; }
cd "$work/prefix"

echo "== 1. run 30 steps, rank 1 is killed after step 17"
run mpiexec -n 4 "$heat" --steps 30 --kill-at 17 --kill-rank 1 2>&1 | grep -v '^\[' | grep -E 'starting|checkpoint|restarted|final|killed|Killed' || true
echo
echo "== what the node-local caches hold (checkpoint files and XOR parity)"
find "$work/cache" -type f | sed "s|$work/||" | sort

echo
echo "== 2. node1 is lost: its cache and control directories are gone"
rm -rf "$work/cache/node1" "$work/cntl/node1"

echo
echo "== 3. start the job again (SCR_DEBUG=1 shows what init does): node1's files are"
echo "==    rebuilt from XOR parity and the job resumes"
SCR_DEBUG=1 mpiexec -n 4 "$heat" --steps 30 2>&1 | grep -v '^\[' | tee "$work/second.log"
resumed=$(grep '^final' "$work/second.log")


echo
echo "== 4. the job goes on with 6 ranks on 3 nodes: it restarts from the checkpoint that"
echo "==    4 ranks wrote, each rank reading the old slices its share of the domain overlaps"
SCR_NODE_NAMES=node0,node0,node1,node1,node2,node2 mpiexec -n 6 "$heat" --steps 40 2>&1 \
    | grep -v '^\[' | grep -E 'ranks|starting|restarted|checkpoint|final|written by' | tee "$work/six.log"
grown=$(grep '^final' "$work/six.log" || true)

echo
echo "== 5. uninterrupted 4-rank runs in a fresh cache, for comparison"
rm -rf "$work/cache" "$work/cntl" "$work/prefix/.scr"
fresh=$(mpiexec -n 4 "$heat" --steps 30 --every 0 2>/dev/null | grep '^final')
fresh40=$(mpiexec -n 4 "$heat" --steps 40 --every 0 2>/dev/null | grep '^final')
echo "restarted run:            $resumed"
echo "uninterrupted run:        $fresh"
echo "6 ranks from 4's restart: $grown"
echo "uninterrupted run:        $fresh40"
if [ -z "$resumed" ] || [ "$resumed" != "$fresh" ]; then
    echo "DIFFERENT: the restarted run did not end in the uninterrupted run's state" >&2
    exit 1
fi
if [ -z "$grown" ] || [ "$grown" != "$fresh40" ]; then
    echo "DIFFERENT: the 6-rank run did not end in the uninterrupted run's state" >&2
    exit 1
fi
echo "identical: the restart lost nothing, on 4 ranks and on 6"

echo
echo "== 6. online recovery: 4 ranks and 1 spare under Open MPI 5 with ULFM; rank 1 is killed"
echo "==    after step 17 and node1 loses its storage; the spare (on node2) takes rank 1 inside"
echo "==    the same mpiexec, its files rebuilt from XOR parity, and the job goes on"
rm -rf "$work/cache" "$work/cntl" "$work/prefix/.scr"
SCR_NODE_NAMES=node0,node0,node1,node1,node2 PRTE_ALLOW_RUN_AS_ROOT=1 PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    LD_LIBRARY_PATH="$repo/target/ulfm/lib" "$repo/target/ulfm/bin/mpiexec" --with-ft ulfm \
    --oversubscribe --bind-to none -n 5 "$heat" --steps 30 --spares 1 --kill-at 17 --kill-rank 1 \
    --wipe-before-kill "$work/cache/node1,$work/cntl/node1" 2>&1 \
    | grep -v '^\[' | grep -E 'starting|checkpoint|lost|recovered|restarted|final' | tee "$work/online.log"
online=$(grep '^final' "$work/online.log" || true)
echo "online recovery:   $online"
echo "uninterrupted run: $fresh"
if [ -z "$online" ] || [ "$online" != "$fresh" ]; then
    echo "DIFFERENT: the recovered run did not end in the uninterrupted run's state" >&2
    exit 1
fi
echo "identical: the job lost a rank and its node and never left mpiexec"

echo
run "$scr" plugins list
run "$scr" config explain --checkpoint 5
rm -rf "$work"
