"""Online recovery from Python: the application's work is a function that
``scr.run_resilient`` runs on the application ranks; a lost process is replaced by a
spare inside the same ``mpiexec`` (Open MPI 5 with ULFM: ``mpiexec --with-ft ulfm``) and
the function runs again, restarting from the newest checkpoint, rebuilt from cache.

    mpiexec --with-ft ulfm -n 5 python3 resilient.py SPARES STEPS [KILL_STEP KILL_RANK]

Each rank owns a vector that every step mixes with the sum over all ranks (an allreduce
on the application communicator); a checkpoint every 5 steps. KILL_RANK is killed with
SIGKILL after KILL_STEP in the first run. Rank 0 prints ``final <steps> <crc32>`` (the
same as an uninterrupted run's) and ``recoveries <n>``.
"""

import os
import signal
import struct
import sys
import zlib

from mpi4py import MPI  # initialises MPI, which SCR requires

import scr

CELLS = 1024


def restart(rank):
    """The newest checkpoint every rank reads: (step, vector); a fresh start otherwise."""
    while True:
        name = scr.have_restart()
        if name is None:
            return 0, [float(rank * CELLS + i) for i in range(CELLS)]
        scr.start_restart()
        loaded = None
        try:
            with open(scr.route_file("%s/rank_%d.ckpt" % (name, rank)), "rb") as f:
                data = f.read()
            step = struct.unpack_from("<q", data)[0]
            loaded = (step, list(struct.unpack_from("<%dd" % CELLS, data, 8)))
        except (OSError, struct.error):
            pass
        if scr.complete_restart(loaded is not None):
            if rank == 0:
                print("restarted from %s at step %d" % (name, loaded[0]), flush=True)
            return loaded


def body(comm, attempt, steps, kill_step, kill_rank):
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0 and attempt.number > 0:
        print("recovered (attempt %d): %d rank(s) lost, %d rank(s) now" % (attempt.number, attempt.lost, size), flush=True)
    step, v = restart(rank)
    while step < steps:
        total = comm.allreduce(sum(v), op=MPI.SUM)
        v = [0.5 * x + 1e-6 * total + i for i, x in enumerate(v)]
        step += 1
        if attempt.number == 0 and step == kill_step and rank == kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        if step % 5 == 0:
            name = "ckpt.%d" % step
            scr.start_output(name, scr.FLAG_CHECKPOINT)
            ok = True
            try:
                with open(scr.route_file("%s/rank_%d.ckpt" % (name, rank)), "wb") as f:
                    f.write(struct.pack("<q", step) + struct.pack("<%dd" % CELLS, *v))
            except OSError:
                ok = False
            scr.complete_output(ok)
    everything = comm.gather(struct.pack("<%dd" % CELLS, *v), root=0)
    if rank == 0:
        print("final %d %08x" % (step, zlib.crc32(b"".join(everything))), flush=True)
        print("recoveries %d" % attempt.number, flush=True)


def main():
    args = [int(a) for a in sys.argv[1:]]
    spares, steps = args[0], args[1]
    kill_step, kill_rank = (args[2], args[3]) if len(args) > 3 else (-1, -1)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("ranks %d" % MPI.COMM_WORLD.Get_size(), flush=True)
    scr.run_resilient(lambda comm, attempt: body(comm, attempt, steps, kill_step, kill_rank), spares=spares)
    if scr.recovered():
        # Open MPI 5.0's MPI_Finalize may wait for the lost process: end without it
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
