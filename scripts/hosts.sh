#!/usr/bin/env bash
# A test bed of real hosts on one machine (run as root): each host is a long-lived process
# in its own namespaces, so that programs in it see their own host name (gethostname) and
# their own node-local directory, as on a cluster, and losing a host is killing every
# process in it and discarding its storage. MPI jobs span the hosts through the rsh agent
# this script writes (mpirun --mca plm_rsh_agent BED/agent); their TCP goes over loopback.
#
# Usage:
#   hosts.sh up N [--dir BED]     start host0..host{N-1} (BED defaults to /tmp/scr-hosts)
#   hosts.sh kill HOST [--dir BED]   lose a host: kill its processes, discard its storage
#   hosts.sh down [--dir BED]     kill every host and remove BED (idempotent; also after a
#                                 failed `up` or with hosts already dead)
#   hosts.sh --help
#
# What a host is: `unshare --uts --mount --pid --fork --kill-child --mount-proc
# --propagation private` running a small init (bash reaping orphans, as pid 1 would), with
# its host name set and BED/store/HOST bind-mounted over BED/local. A PID namespace of its
# own means that killing that init kills every process of the host, including the ones
# the agent started later (the kernel kills a PID namespace's members with its init);
# OpenMPI runs fine across PID namespaces here (its peers meet over TCP, and shared memory
# is used only between ranks of one host, which share a namespace).
#
# BED after `up`:
#   hosts            the host names, one per line
#   agent            the rsh agent: `agent HOST CMD...` runs `/bin/sh -c "CMD..."` in HOST
#                    (arguments joined with spaces, as rsh and ssh do) with the caller's
#                    stdin/stdout/stderr, and exits with its status; 255 and "HOST is down"
#                    or "no such host" on stderr when it cannot
#   local/           the node-local directory: the same path on every host, each host
#                    seeing its own store there; outside the hosts, an empty directory
#   store/HOST/      a host's node-local storage as seen from outside (for assertions)
#   tmp/HOST/        the host's temporary directory (TMPDIR of what the agent runs)
#   run/HOST.pid     the host's init (its pid outside), run/HOST.ns its UTS namespace (so
#                    a reused pid is never taken for the host), run/HOST.unshare the
#                    unshare process holding it, run/HOST.log what the host printed
#
# A job across the hosts (tests/src/lib.rs, Cluster::on_bed, does this):
#   mpirun --host host0:2,host1:2 -np 4 --mca plm_rsh_agent BED/agent \
#     --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
#     --mca mpi_yield_when_idle 1 -x SCR_CACHE_BASE -x ... PROGRAM
# (each host's daemon sees only its own slots, so without mpi_yield_when_idle the ranks of
# all hosts busy-poll the machine's few cores against each other).
#
# The agent starts commands like ssh does: a fresh environment (HOME, PATH, USER, LOGNAME,
# SHELL), not the caller's, so an MPI job must forward what its ranks need (mpirun -x VAR).
# It also sets TMPDIR to the host's own BED/tmp/HOST, as a node's /tmp is its own: the
# hosts share the machine's /tmp, and pids repeat across their PID namespaces, so daemons
# that name their session directories by pid (Open MPI 5's prted: /tmp/prted.<pid>) would
# otherwise share one.
# The working directory is the home directory, as with ssh (not the caller's: a command
# that relies on a relative path would work here and fail on a cluster).
#
# Nothing outside BED is touched: no global host name, no mount outside the hosts'
# namespaces, no /etc edits. When the kernel refuses a namespace or a mount, `up` says
# which (a line starting with "hosts.sh: refused:") and exits with status 3.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
    echo "hosts.sh: $*" >&2
    exit 1
}

cmd=${1:-}
[ -n "$cmd" ] || { usage >&2; exit 2; }
shift
case $cmd in
    -h | --help | help) usage; exit 0 ;;
esac

bed=/tmp/scr-hosts
args=()
while [ $# -gt 0 ]; do
    case $1 in
        --dir) [ $# -ge 2 ] || die "--dir needs a directory"; bed=$2; shift 2 ;;
        --dir=*) bed=${1#--dir=}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
[ -n "$bed" ] || die "--dir is empty"
# absolute, so that the agent and the hosts find it from any working directory
case $bed in /*) ;; *) bed=$PWD/$bed ;; esac
bed=${bed%/}

# The pid of HOST's init when it is alive and still the host (its UTS namespace is the
# one recorded at `up`: pids are reused), else nothing.
host_pid() {
    local h=$1 pid ns
    pid=$(cat "$bed/run/$h.pid" 2>/dev/null) || return 0
    ns=$(cat "$bed/run/$h.ns" 2>/dev/null) || return 0
    [ "$(readlink "/proc/$pid/ns/uts" 2>/dev/null)" = "$ns" ] || return 0
    # a zombie init is a dead host (its namespace's processes are gone with it)
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 0
    echo "$pid"
}

# True while PID exists and is not a zombie.
alive() {
    local state
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# Wait up to 10 s for PID to end.
wait_gone() {
    local pid=$1 i
    for ((i = 0; i < 1000; i++)); do
        alive "$pid" || return 0
        sleep 0.01
    done
    echo "hosts.sh: process $pid did not end within 10 s" >&2
    return 1
}

# Kill host H: its init (the kernel then kills every process of its PID namespace, and
# the init ends only after they have), and the unshare holding it. Storage is untouched.
stop_host() {
    local h=$1 pid upid
    pid=$(host_pid "$h")
    if [ -n "$pid" ]; then
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid"
    fi
    upid=$(cat "$bed/run/$h.unshare" 2>/dev/null || true)
    # only the unshare started for this bed (its command line names the bed's init)
    if [ -n "$upid" ] && tr '\0' ' ' <"/proc/$upid/cmdline" 2>/dev/null | grep -qF "$bed/run/init"; then
        kill -KILL "$upid" 2>/dev/null || true
        wait_gone "$upid"
    fi
    rm -f "$bed/run/$h.pid" "$bed/run/$h.ns" "$bed/run/$h.unshare"
}

# Which of the namespaces and mounts a host needs the kernel refuses, as a message.
probe_refusals() {
    local scratch=$1 what
    mkdir -p "$scratch/a" "$scratch/b"
    for what in "UTS namespace:--uts" "mount namespace:--mount" "PID namespace:--pid --fork" \
        "private /proc in a PID namespace:--pid --fork --mount-proc"; do
        # shellcheck disable=SC2086
        if ! out=$(unshare ${what#*:} true 2>&1); then
            echo "${what%%:*} (unshare ${what#*:}: $out)"
            return
        fi
    done
    if ! out=$(unshare --uts true 2>&1 && unshare --uts sh -c 'hostname bedprobe' 2>&1); then
        echo "setting the host name in a UTS namespace ($out)"
        return
    fi
    if ! out=$(unshare --mount --propagation private mount --bind "$scratch/a" "$scratch/b" 2>&1); then
        echo "a bind mount in a private mount namespace ($out)"
        return
    fi
}

up() {
    [ ${#args[@]} -eq 1 ] || die "usage: hosts.sh up N [--dir BED]"
    local n=${args[0]} i h pid
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive number, not '$n'"
    for tool in unshare nsenter hostname mount; do
        command -v "$tool" >/dev/null || die "$tool is missing (Debian: util-linux, hostname, mount; run scripts/setup.sh)"
    done
    [ ! -e "$bed/hosts" ] || die "$bed already holds a bed (hosts.sh down --dir $bed first)"
    mkdir -p "$bed/run" "$bed/store" "$bed/local"

    local refused
    refused=$(probe_refusals "$bed/run/probe")
    rm -rf "$bed/run/probe"
    if [ -n "$refused" ]; then
        echo "hosts.sh: refused: $refused" >&2
        exit 3
    fi

    write_init
    write_agent
    : >"$bed/hosts"
    for ((i = 0; i < n; i++)); do
        h=host$i
        mkdir -p "$bed/store/$h" "$bed/tmp/$h"
        # own session, stdio away from the caller's pipes (a caller reading this script's
        # output to its end would otherwise wait for the hosts)
        setsid unshare --uts --mount --pid --fork --kill-child --mount-proc --propagation private \
            bash "$bed/run/init" "$h" "$bed" </dev/null >"$bed/run/$h.log" 2>&1 &
        echo $! >"$bed/run/$h.unshare"
        echo "$h" >>"$bed/hosts"
    done
    # the hosts say they are ready once named and mounted; their init is the unshare's child
    for ((i = 0; i < n; i++)); do
        h=host$i
        local upid
        upid=$(cat "$bed/run/$h.unshare")
        for ((t = 0; t < 1000; t++)); do
            [ -e "$bed/run/$h.ready" ] && break
            alive "$upid" || break
            sleep 0.01
        done
        [ -e "$bed/run/$h.ready" ] || die "$h did not start: $(cat "$bed/run/$h.log" 2>/dev/null)"
        pid=$(cat "/proc/$upid/task/$upid/children")
        pid=${pid%% *}
        [ -n "$pid" ] || die "$h has no init process"
        readlink "/proc/$pid/ns/uts" >"$bed/run/$h.ns"
        echo "$pid" >"$bed/run/$h.pid"
        rm -f "$bed/run/$h.ready"
    done
}

# The init of every host: pid 1 of its PID namespace. It names the host, mounts its store
# over the node-local directory, says it is ready and then only reaps orphans (bash reaps
# any child on SIGCHLD while it waits), as an init must for the daemons MPI leaves behind.
write_init() {
    cat >"$bed/run/init" <<'EOF'
h=$1 bed=$2
hostname "$h" || { echo "$h: cannot set the host name" >&2; exit 1; }
mount --bind "$bed/store/$h" "$bed/local" || { echo "$h: cannot mount $bed/store/$h on $bed/local" >&2; exit 1; }
: >"$bed/run/$h.ready"
while :; do
    sleep 3600 &
    wait
done
EOF
}

write_agent() {
    cat >"$bed/agent" <<EOF
#!/usr/bin/env bash
# rsh agent of the test bed $bed (written by scripts/hosts.sh): agent HOST CMD...
set -euo pipefail
bed='$bed'
EOF
    cat >>"$bed/agent" <<'EOF'
if [ $# -lt 1 ]; then
    echo "usage: agent HOST CMD..." >&2
    exit 255
fi
h=$1
shift
if ! grep -qxF -- "$h" "$bed/hosts" 2>/dev/null; then
    echo "agent: no such host: $h (bed $bed)" >&2
    exit 255
fi
pid=$(cat "$bed/run/$h.pid" 2>/dev/null || true)
ns=$(cat "$bed/run/$h.ns" 2>/dev/null || true)
# a dead host's pid may since have been given to another process: check its namespace
if [ -z "$pid" ] || [ -z "$ns" ] || [ "$(readlink "/proc/$pid/ns/uts" 2>/dev/null)" != "$ns" ]; then
    echo "agent: $h is down" >&2
    exit 255
fi
# as ssh: the command starts in the home directory, whatever the caller's was
wd=${HOME:-/}
[ -d "$wd" ] || wd=/
# as ssh: a fresh environment, the command line joined with spaces and run by /bin/sh
exec nsenter -t "$pid" -u -m -p --wdns="$wd" -- \
    env -i HOME="${HOME:-/root}" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    USER="$(id -un)" LOGNAME="$(id -un)" SHELL=/bin/sh TMPDIR="$bed/tmp/$h" /bin/sh -c "$*"
EOF
    chmod +x "$bed/agent"
}

kill_host() {
    [ ${#args[@]} -eq 1 ] || die "usage: hosts.sh kill HOST [--dir BED]"
    local h=${args[0]}
    grep -qxF -- "$h" "$bed/hosts" 2>/dev/null || die "no such host: $h (bed $bed)"
    stop_host "$h"
    rm -rf "${bed:?}/store/$h"
}

down() {
    [ ${#args[@]} -eq 0 ] || die "usage: hosts.sh down [--dir BED]"
    [ -e "$bed" ] || return 0
    local f h
    # every host ever started, also those `up` did not get to list
    for f in "$bed"/run/*.unshare "$bed"/run/*.pid; do
        [ -e "$f" ] || continue
        h=$(basename "$f")
        stop_host "${h%.*}"
    done
    rm -rf "$bed"
}

case $cmd in
    up) up ;;
    kill) kill_host ;;
    down) down ;;
    *) usage >&2; exit 2 ;;
esac
