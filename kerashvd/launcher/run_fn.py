"""``kerashvd.run(fn, np)``: runs a Python function on N local processes and returns each
rank's result, for notebooks and scripts.

How: ``fn`` and its arguments are pickled by value with cloudpickle into a temporary
directory; ``mpiexec`` starts ``_worker.py`` on every rank under the same supervisor as
``kerashvdrun``; ranks write their return value (or formatted traceback) back into the
directory; the ranks' output is read from mpiexec's pipe here and printed line by line to
this process's ``sys.stdout``, so that a notebook cell shows it.
"""

import os
import pickle
import queue
import re
import shutil
import signal
import sys
import tempfile

from . import command as _command
from .errors import RankError
from .exit_status import describe
from .job import run_job
from .mpiexec import find_mpiexec
from .reports import ReportServer

_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check(fn, np, args, kwargs, env):
    if not callable(fn):
        raise TypeError(
            f"kerashvd.run expects a callable fn (a function or lambda); received "
            f"{type(fn).__name__}: {fn!r}.")
    if isinstance(np, bool) or not isinstance(np, int) or np < 1:
        raise ValueError(f"kerashvd.run expects np, the number of processes, to be an int >= 1; "
                         f"received np={np!r}.")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"kerashvd.run expects args to be a tuple of positional arguments for "
                        f"fn; received {type(args).__name__}: {args!r}. Wrap a single "
                        "argument as args=(value,).")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kerashvd.run expects kwargs to be a dict or None; received "
                        f"{type(kwargs).__name__}: {kwargs!r}.")
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not _VARIABLE.match(name) or not isinstance(value, str):
            raise ValueError(
                "kerashvd.run expects env to map variable names (letters, digits, '_') to "
                f"string values; received {name!r}: {value!r}. Convert values with str().")


def _write_payload(directory, fn, args, kwargs):
    import cloudpickle

    try:
        blob = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as err:
        raise TypeError(
            f"kerashvd.run could not pickle fn and its arguments with cloudpickle ({err}). "
            "Everything fn uses must be picklable: create objects such as models, sessions "
            "and open files inside fn instead of capturing them.") from err
    with open(os.path.join(directory, "payload.pkl"), "wb") as f:
        pickle.dump((list(sys.path), blob), f)


def _read_result(directory, rank):
    path = os.path.join(directory, f"result.{rank}.pkl")
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception as err:
        raise RankError(
            f"kerashvd.run: the result of rank {rank} could not be unpickled in the caller "
            f"({type(err).__name__}: {err}). Return values whose classes the caller can import, "
            "e.g. plain Python or NumPy values.", rank=rank) from err


def _collect(directory, np, outcome):
    """Returns every rank's value, or raises RankError for the first rank that failed."""
    results = [_read_result(directory, rank) for rank in range(np)]
    blamed = outcome.failure.rank if outcome.failure is not None else None
    if blamed is None:
        failed = [r for r in range(np) if results[r] is None or results[r][0] != "ok"]
        if not failed:  # every rank returned, even if mpiexec complained afterwards
            return [result[1] for result in results]
        errors = [r for r in failed if results[r] is not None]
        blamed = errors[0] if errors else failed[0]
    if 0 <= blamed < np and results[blamed] is not None and results[blamed][0] == "error":
        traceback_text = results[blamed][1]
        raise RankError(
            f"kerashvd.run: rank {blamed} (of {np}) raised an exception; its traceback:\n\n"
            f"{traceback_text}", rank=blamed, exit_code=1, remote_traceback=traceback_text)
    if outcome.failure is not None:
        raise RankError(
            f"kerashvd.run: rank {outcome.failure.rank} (of {np}) "
            f"{describe(outcome.failure.returncode)} without returning a result "
            "(os._exit(), a crash or a signal ended it); its output is printed above.", rank=outcome.failure.rank, exit_code=outcome.failure.exit_code)
    raise RankError(
        f"kerashvd.run: rank {blamed} (of {np}) returned no result; mpiexec "
        f"{describe(outcome.returncode)}. See the output printed above.",
        rank=blamed, exit_code=outcome.returncode)


def run(fn, np=1, args=(), kwargs=None, env=None, verbose=True):
    """Runs ``fn(*args, **kwargs)`` on ``np`` local processes and returns their results.

    ``fn`` runs in fresh processes started through ``mpiexec``: it calls
    :func:`kerashvd.init` itself, as a training script would. It may be a lambda or a function
    defined in ``__main__`` or a notebook cell: it is pickled by value with cloudpickle.
    The ranks' stdout and stderr are printed to this process's ``sys.stdout`` as they come.
    When a rank fails, the other ranks are stopped and the error is raised here. There are no
    restarts (``kerashvdrun --max-restarts`` has them; ``KERASHVD_RESTART_COUNT`` is not set
    here): to try again, catch :class:`RankError` and call ``run`` again.

    Args:
        fn: the function every rank calls.
        np: number of processes (ranks), >= 1.
        args: positional arguments for ``fn`` (a tuple).
        kwargs: keyword arguments for ``fn`` (a dict), or ``None``.
        env: extra environment variables for the ranks, ``{name: str_value}``; they also see
            this process's environment.
        verbose: start each output line with its rank, like ``[1] ``, and print the
            launcher's messages (which rank failed). With ``False`` the ranks' output is still
            printed, without the prefix.

    Returns:
        A list with each rank's return value, in rank order.

    Raises:
        RankError: a rank raised (the message holds its rank and full traceback), or died
            without a result (the message holds its rank and exit code).
        TypeError, ValueError: for bad arguments, or ``fn`` and its arguments cannot be pickled.
        LaunchError: no ``mpiexec`` was found.
        KeyboardInterrupt: the caller was interrupted; every rank has been stopped.

    Example:

    >>> import kerashvd as hvd
    >>> def fn(scale):
    ...     hvd.init()
    ...     return hvd.rank() * scale
    >>> hvd.run(fn, np=2, args=(10,), verbose=False)
    [0, 10]
    """
    _check(fn, np, args, kwargs, env)
    mpiexec = find_mpiexec()
    directory = tempfile.mkdtemp(prefix="kerashvd-run-")
    try:
        _write_payload(directory, fn, args, kwargs)
        rank_env = {"PYTHONUNBUFFERED": "1"}
        rank_env.update(env or {})
        events = queue.Queue()
        with ReportServer(events, local=True) as server:
            argv = _command.mpiexec_command(
                mpiexec, np, [sys.executable, _command.WORKER, directory], env=rank_env,
                report_address=server.address, token=server.token, prefix_output=verbose)
            outcome = run_job(
                argv, events, capture_output=True,
                on_line=lambda line: print(line, flush=True),
                log=(lambda message: print(f"kerashvd.run: {message}", flush=True))
                if verbose else None)
        if outcome.interrupted is not None:
            if outcome.interrupted != signal.SIGINT:
                signal.raise_signal(outcome.interrupted)  # as if it had come after the run
            raise KeyboardInterrupt(
                f"kerashvd.run was interrupted by {signal.Signals(outcome.interrupted).name}; "
                "all ranks were stopped.")
        return _collect(directory, np, outcome)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
