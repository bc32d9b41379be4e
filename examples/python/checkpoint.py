#!/usr/bin/env python3
"""A Python application using scr-rs through SCR's Python interface (the `scr` module)
and mpi4py: the Python twin of examples/c/checkpoint.c.

A per-rank state evolves step by step; the state is checkpointed (several files per
rank) whenever scr.need_checkpoint() says so, an output dataset is written every few
steps, and a restarted run resumes from the newest checkpoint SCR offers, falling back
to an older one if a file does not read back.

Run:     SCR_CHECKPOINT_INTERVAL=5 mpiexec -n 4 python3 checkpoint.py --steps 30
         (with no checkpoint_interval, _seconds or _overhead set, need_checkpoint()
         answers False, as SCR 3's does, and nothing is checkpointed)
         (PYTHONPATH=PREFIX/share/scr/python, or the package pip-installed)
Options: --steps N        steps to run (default 20)
         --files F        checkpoint files per rank (default 2)
         --output-every K an output dataset every K steps (default 10, 0: none)
         --kill-at S      rank --kill-rank kills itself with SIGKILL after step S
         --kill-rank R    (default 1)
It prints "restarted from NAME at step S" or "starting fresh", then on rank 0
"final step N state crc32 XXXXXXXX": the CRC32 of every rank's final state, which an
uninterrupted run reaches too. The computation, the file formats and the CRC are the
C example's, so both examples reach the same final line.
"""

import argparse
import array
import os
import signal
import struct
import sys
import traceback
import zlib

from mpi4py import MPI  # initialises MPI, which SCR requires before scr.init()

import scr

CELLS = 256


def say(line, stream=None):
    """Print one line with one write: mpiexec merges the ranks' output, and print()'s
    separate writes of the text and the newline (unbuffered, e.g. PYTHONUNBUFFERED=1)
    could interleave with another rank's line."""
    stream = stream or sys.stdout
    stream.write(line + "\n")
    stream.flush()


def compute(cells, rank, step):
    """One step of a deterministic computation: every rank's cells depend on its rank."""
    for i in range(CELLS):
        cells[i] = 0.5 * cells[i] + 0.25 * cells[(i + 1) % CELLS] + 0.001 * (rank + 1) * float(step)


def part(f, files):
    """The slice of the state stored in checkpoint file f of `files`."""
    per = (CELLS + files - 1) // files
    start = min(f * per, CELLS)
    return start, min(start + per, CELLS)


def initial_state(rank):
    return array.array("d", (float(rank * CELLS + i) for i in range(CELLS)))


def read_checkpoint(rank, files, cells):
    """Read this rank's checkpoint into `cells`; (valid, step)."""
    valid, step = True, None
    for f in range(files):
        try:
            path = scr.route_file("ckpt/rank_%d.part%d" % (rank, f))
            with open(path, "rb") as fp:
                data = fp.read()
        except (scr.Error, OSError) as e:
            say("rank %d: checkpoint file %d: %s" % (rank, f, e), sys.stderr)
            valid = False
            continue
        start, end = part(f, files)
        head = struct.calcsize("l")
        if len(data) != head + 8 * (end - start):
            valid = False
            continue
        (s,) = struct.unpack_from("l", data)
        cells[start:end] = array.array("d", data[head:])
        if step is None:
            step = s
        elif s != step:
            valid = False
    return valid, step or 0


def write_checkpoint(rank, files, cells, step):
    """Write this rank's checkpoint; whether every file was written."""
    valid = True
    for f in range(files):
        try:
            path = scr.route_file("ckpt/rank_%d.part%d" % (rank, f))
            start, end = part(f, files)
            with open(path, "wb") as fp:
                fp.write(struct.pack("l", step))
                fp.write(cells[start:end].tobytes())
        except (scr.Error, OSError) as e:
            say("rank %d: checkpoint file %d: %s" % (rank, f, e), sys.stderr)
            valid = False
    return valid


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--output-every", type=int, default=10)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--kill-rank", type=int, default=1)
    args = parser.parse_args()
    files = max(args.files, 1)

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    # configuration before scr.init(): keep 2 checkpoints in cache; ask what is in force
    scr.config("SCR_CACHE_SIZE=2")
    scheme = scr.config("SCR_COPY_TYPE")
    scr.init()
    if rank == 0:
        say("ranks %d" % size)
        say("%s, scheme %s" % (scr.get_version(), scheme or "(none)"))

    cells = initial_state(rank)
    step = 0

    # restart: the newest checkpoint first, older ones if it does not read
    while True:
        name = scr.have_restart()
        if name is None:
            break
        scr.start_restart()
        valid, s = read_checkpoint(rank, files, cells)
        if scr.complete_restart(valid):
            step = s
            if rank == 0:
                say("restarted from %s at step %d" % (name, step))
            break
        if rank == 0:
            say("%s did not read back; trying an older checkpoint" % name)
        cells = initial_state(rank)
    if step == 0 and rank == 0:
        say("starting fresh")

    while step < args.steps:
        step += 1
        compute(cells, rank, step)

        if scr.need_checkpoint():
            ckpt = "ckpt.%d" % step
            scr.start_output(ckpt, scr.FLAG_CHECKPOINT)
            valid = write_checkpoint(rank, files, cells, step)
            if scr.complete_output(valid) and rank == 0:
                say("checkpoint %s" % ckpt)

        if args.output_every > 0 and step % args.output_every == 0:
            scr.start_output("output.%d" % step, scr.FLAG_OUTPUT)
            valid = False
            try:
                path = scr.route_file("results/step%d/rank_%d.txt" % (step, rank))
                with open(path, "w") as fp:
                    fp.write("rank %d step %d first %.6f last %.6f\n" % (rank, step, cells[0], cells[CELLS - 1]))
                valid = True
            except (scr.Error, OSError) as e:
                say("rank %d: output: %s" % (rank, e), sys.stderr)
            scr.complete_output(valid)

        if step == args.kill_at and rank == args.kill_rank:
            say("rank %d killed after step %d" % (rank, step))
            os.kill(os.getpid(), signal.SIGKILL)

        if scr.should_exit():
            if rank == 0:
                say("halted at step %d" % step)
            break

    # every rank's final state, in rank order, as one CRC32
    mine = zlib.crc32(cells.tobytes())
    crcs = comm.gather(mine, root=0)
    if rank == 0:
        crc = zlib.crc32(struct.pack("=%dI" % size, *crcs))
        say("final step %d state crc32 %08x" % (step, crc))

    scr.finalize()


if __name__ == "__main__":
    try:
        main()
    except Exception:
        # one rank's exception must end the job, not leave the others waiting in a
        # collective call
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
