"""SCR's Python interface over scr-rs's libscr (Scalable Checkpoint/Restart for MPI).

The functions and constants are those of SCR's own ``scr`` module, so a Python
application written for SCR runs unchanged; each function calls the C function of the
same name in libscr (``init`` calls ``SCR_Init``, ...). See ``scr.h`` for the C API.

MPI must be initialised first, by mpi4py::

    from mpi4py import MPI   # initialises MPI
    import scr

    scr.config("SCR_CACHE_SIZE=2")
    scr.init()
    name = scr.have_restart()
    ...
    scr.finalize()           # before MPI is finalized at exit

Every function is collective over ``MPI_COMM_WORLD`` except ``config`` (called before
``init``), ``route_file``, ``restart_writers``, ``restart_files`` and ``get_version``.

``restart_writers`` and ``restart_files`` are scr-rs extensions (SCR has none): a job
restarting on another number of ranks than wrote the checkpoint lists the old ranks'
files and routes those its new share of the work needs.

``run_resilient``, ``process_lost`` and ``recovered`` are scr-rs extensions too: online
recovery, where a job started with spare processes under MPI with ULFM replaces a lost
process inside the same ``mpiexec`` and runs the application's function again.

Failures: a call that fails raises :class:`scr.Error` (a ``RuntimeError``, which is
what SCR's module raises, so existing ``except RuntimeError`` handlers keep working)
naming the C call and why (libscr also prints the reason, with the rank, on stderr). Two calls
report the collective outcome as a value instead, as in SCR: ``complete_restart`` and
``complete_output`` return ``False`` when any process passed ``valid=False`` or the
dataset was not kept.

Finding libscr, in order (the first that exists is loaded):

1. the file named by the environment variable ``SCR_LIBRARY``, when it is set (nothing
   else is tried then);
2. ``PREFIX/lib/libscr.so`` when this package sits in an install tree at
   ``PREFIX/share/scr/python/scr``;
3. the library recorded when the package was pip-installed from an install tree
   (``scr/_install.py``, written by ``setup.py``);
4. ``libscr.so`` in each directory of ``LD_LIBRARY_PATH``, then the dynamic linker's
   cache (``ctypes.util.find_library("scr")``).

When none is found, ``import scr`` raises ``ImportError`` listing every place looked.
libscr is loaded with ``RTLD_GLOBAL`` and links the same ``libmpi`` as mpi4py, so it
sees the ``MPI_Init`` mpi4py made.
"""

import ctypes
import ctypes.util
import os

__all__ = [
    "Error",
    "FLAG_NONE",
    "FLAG_CHECKPOINT",
    "FLAG_OUTPUT",
    "SUCCESS",
    "FAILURE",
    "MAX_FILENAME",
    "library_path",
    "config",
    "init",
    "finalize",
    "route_file",
    "have_restart",
    "start_restart",
    "complete_restart",
    "restart_writers",
    "restart_files",
    "need_checkpoint",
    "start_checkpoint",
    "complete_checkpoint",
    "start_output",
    "complete_output",
    "should_exit",
    "current",
    "drop",
    "delete",
    "get_version",
    "Attempt",
    "run_resilient",
    "process_lost",
    "recovered",
]

# The values of scr.h.
FLAG_NONE = 0
"""No flags (``SCR_FLAG_NONE``)."""
FLAG_CHECKPOINT = 1
"""The job can restart from this dataset (``SCR_FLAG_CHECKPOINT``)."""
FLAG_OUTPUT = 2
"""The dataset must reach the prefix directory (``SCR_FLAG_OUTPUT``)."""
SUCCESS = 0
"""``SCR_SUCCESS``."""
FAILURE = 1
"""``SCR_FAILURE``."""
MAX_FILENAME = 1024
"""The longest name libscr returns, with its terminating NUL (``SCR_MAX_FILENAME``)."""


class Error(RuntimeError):
    """A libscr call failed.

    ``call`` is the C function that failed (e.g. ``"SCR_Start_output"``) and ``reason``
    why, as libscr said it (libscr also prints it on this process's stderr, with the
    rank).
    """

    def __init__(self, call, reason=None):
        self.call = call
        self.reason = reason
        if reason:
            message = "%s failed: %s" % (call, reason)
        else:
            message = "%s failed; libscr printed the reason on stderr" % call
        super().__init__(message)


def _package_install_tree_library():
    """``PREFIX/lib/libscr.so`` when this package is ``PREFIX/share/scr/python/scr``,
    else ``None``."""
    here = os.path.dirname(os.path.abspath(__file__))
    python_dir = os.path.dirname(here)
    scr_share = os.path.dirname(python_dir)
    share = os.path.dirname(scr_share)
    if (
        os.path.basename(python_dir) == "python"
        and os.path.basename(scr_share) == "scr"
        and os.path.basename(share) == "share"
    ):
        return os.path.join(os.path.dirname(share), "lib", "libscr.so")
    return None


def _recorded_library():
    """The libscr path ``setup.py`` recorded at pip-install time, else ``None``."""
    try:
        from . import _install  # written by setup.py when installed from an install tree
    except ImportError:
        return None
    return getattr(_install, "LIBSCR", None)


def _load():
    """Load libscr; return ``(CDLL, path)`` or raise ``ImportError`` naming every place
    looked and what to set."""
    looked = []

    def attempt(path, where):
        if not os.path.isfile(path):
            looked.append("%s (%s): no such file" % (path, where))
            return None
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            looked.append("%s (%s): cannot be loaded: %s" % (path, where, e))
            return None

    explicit = os.environ.get("SCR_LIBRARY")
    if explicit:
        lib = attempt(explicit, "SCR_LIBRARY")
        if lib is None:
            raise ImportError(
                "scr: cannot load libscr from SCR_LIBRARY: %s; set SCR_LIBRARY to the "
                "path of libscr.so (PREFIX/lib/libscr.so of an install, or "
                "target/debug/libscr.so of a build), or unset it to search" % looked[0]
            )
        return lib, explicit

    candidates = []
    tree = _package_install_tree_library()
    if tree is None:
        looked.append(
            "the install tree: this package (%s) is not in PREFIX/share/scr/python"
            % os.path.dirname(os.path.abspath(__file__))
        )
    else:
        candidates.append((tree, "the install tree this package is in"))
    recorded = _recorded_library()
    if recorded:
        candidates.append((recorded, "recorded when the package was installed"))
    else:
        looked.append("no libscr was recorded when this package was installed")
    ld_path = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    if not ld_path:
        looked.append("LD_LIBRARY_PATH: not set")
    for d in ld_path:
        candidates.append((os.path.join(d, "libscr.so"), "LD_LIBRARY_PATH"))

    for path, where in candidates:
        lib = attempt(path, where)
        if lib is not None:
            return lib, path

    found = ctypes.util.find_library("scr")
    if found:
        try:
            return ctypes.CDLL(found, mode=ctypes.RTLD_GLOBAL), found
        except OSError as e:
            looked.append("%s (the dynamic linker's cache): cannot be loaded: %s" % (found, e))
    else:
        looked.append("the dynamic linker's cache (ctypes.util.find_library('scr')): no libscr")

    raise ImportError(
        "scr: libscr.so was not found. Looked in:\n  - SCR_LIBRARY: not set\n  - "
        + "\n  - ".join(looked)
        + "\nSet SCR_LIBRARY to the path of libscr.so (PREFIX/lib/libscr.so of an install, "
        "or target/debug/libscr.so of a cargo build), or add its directory to "
        "LD_LIBRARY_PATH."
    )


_lib, library_path = _load()
"""``library_path``: the libscr this module loaded."""

_c_int = ctypes.c_int
_c_char_p = ctypes.c_char_p
_int_p = ctypes.POINTER(ctypes.c_int)


def _prototype(name, restype, argtypes):
    try:
        f = getattr(_lib, name)
    except AttributeError:
        raise ImportError(
            "scr: %s has no function %s: it is not scr-rs's libscr (or it is too old); "
            "set SCR_LIBRARY to scr-rs's libscr.so" % (library_path, name)
        ) from None
    f.restype = restype
    f.argtypes = argtypes
    return f


_SCR_Init = _prototype("SCR_Init", _c_int, [])
_SCR_Finalize = _prototype("SCR_Finalize", _c_int, [])
# c_void_p, not c_char_p: the returned string is malloc'ed and must be freed here
_SCR_Config = _prototype("SCR_Config", ctypes.c_void_p, [_c_char_p])
_SCR_Route_file = _prototype("SCR_Route_file", _c_int, [_c_char_p, _c_char_p])
_SCR_Have_restart = _prototype("SCR_Have_restart", _c_int, [_int_p, _c_char_p])
_SCR_Start_restart = _prototype("SCR_Start_restart", _c_int, [_c_char_p])
_SCR_Complete_restart = _prototype("SCR_Complete_restart", _c_int, [_c_int])
_SCR_Restart_writers = _prototype("SCR_Restart_writers", _c_int, [_int_p])
_SCR_Restart_num_files = _prototype("SCR_Restart_num_files", _c_int, [_c_int, _int_p])
_SCR_Restart_file = _prototype("SCR_Restart_file", _c_int, [_c_int, _c_int, _c_char_p])
_SCR_Need_checkpoint = _prototype("SCR_Need_checkpoint", _c_int, [_int_p])
_SCR_Start_checkpoint = _prototype("SCR_Start_checkpoint", _c_int, [])
_SCR_Complete_checkpoint = _prototype("SCR_Complete_checkpoint", _c_int, [_c_int])
_SCR_Start_output = _prototype("SCR_Start_output", _c_int, [_c_char_p, _c_int])
_SCR_Complete_output = _prototype("SCR_Complete_output", _c_int, [_c_int])
_SCR_Should_exit = _prototype("SCR_Should_exit", _c_int, [_int_p])
_SCR_Current = _prototype("SCR_Current", _c_int, [_c_char_p])
_SCR_Drop = _prototype("SCR_Drop", _c_int, [_c_char_p])
_SCR_Delete = _prototype("SCR_Delete", _c_int, [_c_char_p])
_SCR_Get_version = _prototype("SCR_Get_version", _c_char_p, [])


class _Attempt(ctypes.Structure):
    # scr.h's SCR_Attempt
    _fields_ = [
        ("number", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("size", ctypes.c_int),
        ("lost", ctypes.c_int),
        ("spares_left", ctypes.c_int),
        ("recovery_seconds", ctypes.c_double),
    ]


# MPI_Comm is a pointer in Open MPI, an int in MPICH: passed as the handle mpi4py holds
_BODY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Attempt), ctypes.c_void_p)
_SCR_Run_resilient = _prototype(
    "SCR_Run_resilient", _c_int, [ctypes.c_void_p, _c_int, _c_int, _BODY, ctypes.c_void_p]
)
_SCR_Process_lost = _prototype("SCR_Process_lost", _c_int, [])
_SCR_Recovered = _prototype("SCR_Recovered", _c_int, [])

# free() of the C library libscr allocates from (one libc per process)
_free = ctypes.CDLL(None).free
_free.restype = None
_free.argtypes = [ctypes.c_void_p]


def _check(call, rc):
    if rc != SUCCESS:
        raise Error(call, _reason())


def _all_valid(call, rc):
    """A completion's answer: ``True`` when every process was valid, ``False`` when
    some process said invalid; a call that failed (outside its phase, misused) raises
    :class:`Error` instead of passing for "invalid" (libscr gives a reason only then)."""
    if rc == SUCCESS:
        return True
    why = _reason()
    if why is not None:
        raise Error(call, why)
    return False


def _encode(name, what):
    """A str, bytes or path-like argument as the bytes libscr takes."""
    if name is None:
        raise TypeError("scr: the %s must be a str, bytes or path, not None" % what)
    return os.fsencode(name)


# SCR_Config returns NULL both for a set and for a failure: libscr's scr_rs_last_error()
# says which (and why), for every call.
_last_error = _prototype("scr_rs_last_error", _c_char_p, [])


def _reason():
    """Why the last libscr call failed, as libscr said it (also printed on stderr)."""
    why = _last_error()
    return why.decode("utf-8", "replace") if why else None


def config(conf):
    """Set, unset or query an SCR configuration value (``SCR_Config``).

    ``"KEY=VALUE"`` sets a value and ``"KEY="`` forgets one set here, before
    ``init()``; both return ``None``. ``"KEY"`` returns the value something set (this
    API, the environment or a configuration file) as a ``str``, or ``None`` when nothing
    set it (as SCR answers: a key left at its built-in default is ``None``).
    Descriptors work too: ``"CKPT=0 TYPE=XOR SET_SIZE=16"`` sets, ``"CKPT=0 TYPE"``
    queries one item.

    Raises :class:`Error` (call ``SCR_Config``, with libscr's reason) for an unknown
    key, a malformed string or a set after ``init()``.
    """
    value = _SCR_Config(_encode(conf, "configuration string"))
    failure = _reason()
    if value:
        try:
            text = ctypes.string_at(value).decode("utf-8", "replace")
        finally:
            _free(value)
    else:
        text = None
    if failure is not None:
        raise Error("SCR_Config", failure)
    return text


def init(params=None):
    """Initialise SCR (``SCR_Init``); collective, after mpi4py initialised MPI.

    ``params`` (as in SCR's module) are configuration settings made with ``config()``
    first: a ``str``, a ``list`` of them, or a ``dict`` of ``key: value`` (``None``
    unsets the key). Raises :class:`Error` when libscr cannot start (the reason is on
    stderr).
    """
    if params is not None:
        if isinstance(params, str):
            config(params)
        elif isinstance(params, (list, tuple)):
            for p in params:
                config(str(p))
        elif isinstance(params, dict):
            for k, v in params.items():
                config("%s=%s" % (k, "" if v is None else v))
        else:
            raise TypeError(
                "scr.init: params must be a str, list or dict, not %s" % type(params).__name__
            )
    _check("SCR_Init", _SCR_Init())


def finalize():
    """Shut SCR down (``SCR_Finalize``); collective, before MPI is finalized.

    Flushes the datasets that must reach the prefix. No SCR call may follow it.
    """
    _check("SCR_Finalize", _SCR_Finalize())


def route_file(name):
    """The path to open ``name`` at (``SCR_Route_file``); local to this process.

    Between ``start_output`` and ``complete_output`` the path to write (the file joins
    the dataset); between ``start_restart`` and ``complete_restart`` the path to read
    (a file may be named by its base name alone then); outside both, and before ``init``
    or after ``finalize``, ``name`` unchanged. ``name`` may be ``str``, ``bytes`` or a path; the
    result is a ``str``. Do not create the directories of the returned path: SCR does.
    """
    buf = ctypes.create_string_buffer(MAX_FILENAME)
    _check("SCR_Route_file", _SCR_Route_file(_encode(name, "file name"), buf))
    return os.fsdecode(buf.value)


def have_restart():
    """The name of the checkpoint to restart from, or ``None`` (``SCR_Have_restart``).

    Collective. The first call loads the checkpoint (from cache, rebuilding it, or from
    the prefix), so ``current(name)`` before it chooses which one.
    """
    flag = ctypes.c_int(0)
    buf = ctypes.create_string_buffer(MAX_FILENAME)
    _check("SCR_Have_restart", _SCR_Have_restart(ctypes.byref(flag), buf))
    return buf.value.decode("utf-8") if flag.value else None


def start_restart():
    """Begin reading the checkpoint; returns its name (``SCR_Start_restart``).

    Collective; only after ``have_restart()`` returned a name.
    """
    buf = ctypes.create_string_buffer(MAX_FILENAME)
    _check("SCR_Start_restart", _SCR_Start_restart(buf))
    return buf.value.decode("utf-8")


def restart_writers():
    """How many ranks wrote the checkpoint being read (``SCR_Restart_writers``).

    Local; between ``start_restart`` and ``complete_restart``. An scr-rs extension: it
    differs from the job's size when the job grew or shrank since the checkpoint.
    """
    n = ctypes.c_int(0)
    _check("SCR_Restart_writers", _SCR_Restart_writers(ctypes.byref(n)))
    return n.value


def restart_files(rank):
    """The files old rank ``rank`` wrote of the checkpoint being read, as paths to pass
    to ``route_file`` (``SCR_Restart_num_files`` and ``SCR_Restart_file``).

    Local; between ``start_restart`` and ``complete_restart``. An scr-rs extension: any
    old rank's files when the job has another number of ranks than wrote the checkpoint,
    this process's own otherwise (each reads back what it wrote).
    """
    count = ctypes.c_int(0)
    _check("SCR_Restart_num_files", _SCR_Restart_num_files(rank, ctypes.byref(count)))
    files = []
    for i in range(count.value):
        buf = ctypes.create_string_buffer(MAX_FILENAME)
        _check("SCR_Restart_file", _SCR_Restart_file(rank, i, buf))
        files.append(os.fsdecode(buf.value))
    return files


def complete_restart(valid=True):
    """Finish reading the checkpoint (``SCR_Complete_restart``); collective.

    ``valid``: whether this process read its files. Returns ``True`` when every process
    did, ``False`` otherwise; then ``have_restart()`` offers the next older checkpoint.
    Raises :class:`Error` when the call fails (no restart in progress, ...).
    """
    return _all_valid("SCR_Complete_restart", _SCR_Complete_restart(1 if valid else 0))


def need_checkpoint():
    """Whether to checkpoint now (``SCR_Need_checkpoint``); collective.

    The same answer on every process, from the configured interval, seconds and
    overhead rules and the halt conditions; with no rule configured, False (SCR 3's
    answer).
    """
    flag = ctypes.c_int(0)
    _check("SCR_Need_checkpoint", _SCR_Need_checkpoint(ctypes.byref(flag)))
    return bool(flag.value)


def start_checkpoint():
    """Begin a checkpoint named ``ckpt.<id>`` (``SCR_Start_checkpoint``, SCR 1.x/2.x).

    Collective; prefer ``start_output(name, FLAG_CHECKPOINT)``.
    """
    _check("SCR_Start_checkpoint", _SCR_Start_checkpoint())


def complete_checkpoint(valid=True):
    """Finish a checkpoint begun with ``start_checkpoint`` (``SCR_Complete_checkpoint``).

    Returns ``True`` when every process passed ``valid=True`` and it was kept, ``False``
    when some process said invalid; raises :class:`Error` when the call fails.
    """
    return _all_valid(
        "SCR_Complete_checkpoint", _SCR_Complete_checkpoint(1 if valid else 0)
    )


def start_output(name, flags):
    """Begin a dataset (``SCR_Start_output``); collective.

    ``name``: the dataset's name (``None``: named after its id). ``flags``:
    ``FLAG_CHECKPOINT`` (the job can restart from it) and/or ``FLAG_OUTPUT`` (it must
    reach the prefix), combined with ``|``.
    """
    encoded = None if name is None else _encode(name, "dataset name")
    _check("SCR_Start_output", _SCR_Start_output(encoded, int(flags)))


def complete_output(valid=True):
    """Finish the dataset (``SCR_Complete_output``); collective.

    ``valid``: whether this process wrote its files. Returns ``True`` when every process
    did and the dataset was kept, ``False`` when some process said invalid; raises
    :class:`Error` when the call fails (no dataset started, ...).
    """
    return _all_valid("SCR_Complete_output", _SCR_Complete_output(1 if valid else 0))


def should_exit():
    """Whether the run should stop now (``SCR_Should_exit``); collective.

    ``True`` near the end of the allocation or after ``scr halt``; call ``finalize()``
    and exit then.
    """
    flag = ctypes.c_int(0)
    _check("SCR_Should_exit", _SCR_Should_exit(ctypes.byref(flag)))
    return bool(flag.value)


def current(name):
    """Make checkpoint ``name`` the one to restart from (``SCR_Current``); collective.

    Called before ``have_restart()`` it chooses the checkpoint loaded; an application
    that reads its checkpoint without the restart calls tells SCR where it resumed.
    """
    _check("SCR_Current", _SCR_Current(_encode(name, "dataset name")))


def drop(name):
    """Forget dataset ``name`` (``SCR_Drop``): its entry leaves the prefix's index and it
    is no longer offered for a restart in this run; its files stay. Collective; a name nothing holds
    is no error."""
    _check("SCR_Drop", _SCR_Drop(_encode(name, "dataset name")))


def delete(name):
    """Delete dataset ``name``'s files in cache and in the prefix, and its index entry
    (``SCR_Delete``). Collective; a name nothing holds is no error."""
    _check("SCR_Delete", _SCR_Delete(_encode(name, "dataset name")))


def get_version():
    """libscr's version string (``SCR_Get_version``), e.g. ``"scr-rs 0.1.0 (SCR API
    v3.1.0)"``."""
    return _SCR_Get_version().decode("utf-8")


class Attempt:
    """One run of :func:`run_resilient`'s body: ``number`` (0 first, then one more after
    each recovery), ``rank`` and ``size`` on the application communicator, ``lost`` (ranks
    the last recovery lost), ``spares_left``, ``recovery_seconds``."""

    def __init__(self, c):
        self.number = c.number
        self.rank = c.rank
        self.size = c.size
        self.lost = c.lost
        self.spares_left = c.spares_left
        self.recovery_seconds = c.recovery_seconds


def run_resilient(body, spares=0, shrink=False):
    """Online recovery (an scr-rs extension: ``SCR_Run_resilient``): run ``body(comm,
    attempt)`` on the application ranks of ``MPI_COMM_WORLD``, keeping the last
    ``spares`` processes as spares.

    SCR is initialised on ``comm`` (an mpi4py ``Intracomm``: use it, not
    ``MPI.COMM_WORLD``, for the application's messages) before each run of ``body`` and
    finalized after one that returns; do not call :func:`init` or :func:`finalize`. Under
    MPI with ULFM (Open MPI 5, ``mpiexec --with-ft ulfm``), when a process is lost every
    SCR call raises :class:`Error`: let it propagate out of ``body``; a spare takes the
    lost rank (with ``shrink``, and no spare left, the job goes on with fewer ranks), the
    lost files are rebuilt from cache and ``body`` runs again, restarting through
    :func:`have_restart`. :func:`process_lost` tells a loop of the application's own MPI
    calls to stop. Returns alike on every process, spares included; raises
    :class:`Error` when the job cannot go on (the exception ``body`` raised, when it
    failed for a reason of its own). After a recovery (:func:`recovered`), end the
    process with ``os._exit`` rather than letting MPI finalize: Open MPI 5.0's
    ``MPI_Finalize`` may wait for the lost process.
    """
    from mpi4py import MPI

    raised = []

    def call(handle, attempt, _arg):
        comm = MPI.Intracomm()
        # (mpi4py 3 has no Comm.fromhandle: the handle goes into the object's slot)
        ctypes.c_void_p.from_address(MPI._addressof(comm)).value = handle
        try:
            body(comm, Attempt(attempt.contents))
            return SUCCESS
        except BaseException as e:  # noqa: B036 -- reported after the run, not lost
            raised.append(e)
            return FAILURE

    world = ctypes.c_void_p(MPI._handleof(MPI.COMM_WORLD))
    rc = _SCR_Run_resilient(world, int(spares), 1 if shrink else 0, _BODY(call), None)
    if rc != SUCCESS:
        own = [e for e in raised if not isinstance(e, Error)]
        if own and not process_lost():
            raise own[-1]
        raise Error("SCR_Run_resilient", _reason())


def process_lost():
    """Whether this process saw a process of the job lost since the last recovery
    (``SCR_Process_lost``, an scr-rs extension)."""
    return bool(_SCR_Process_lost())


def recovered():
    """Whether this process went through a recovery (``SCR_Recovered``, an scr-rs
    extension)."""
    return bool(_SCR_Recovered())
