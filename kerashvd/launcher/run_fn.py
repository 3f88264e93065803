"""``kerashvd.run(fn, np, hosts=...)``: runs a Python function on N processes, on this
machine or on several hosts, and returns each rank's result, for notebooks and scripts.

How: ``fn`` and its arguments are pickled by value with cloudpickle; hydra's ``mpiexec``
starts ``_worker.py`` on every rank under the same supervisor as ``kerashvdrun`` (the
``hydra_local`` backend, or ``hydra_ssh`` with other hosts: ``backends/``); each worker
fetches the pickle from the caller's report server and sends its return value (or formatted
traceback) back through it (``reports.py``), so no shared file system is needed; the ranks' output is read from mpiexec's pipe here and printed
line by line to this process's ``sys.stdout``, so that a notebook cell shows it.
"""

import os
import pickle
import queue
import re
import signal
import sys

from . import keepalive
from .backends import Request, Supervision, select
from .command import WORKER
from .errors import RankError
from .exit_status import describe
from .hosts import check_slots, parse_hostfile, parse_hosts
from .job import run_job
from .reports import ReportServer
from .ssh import DEFAULT_CONNECT_TIMEOUT, SshSettings
from .watches import RanksLost

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


def _hosts(hosts, hostfile, np):
    """The host list of ``hosts`` or ``hostfile`` (None for this machine), checked."""
    if hosts is not None and hostfile is not None:
        raise ValueError("kerashvd.run takes hosts or hostfile, not both.")
    if hosts is not None and not isinstance(hosts, str):
        raise TypeError(f"kerashvd.run expects hosts as a string like 'node1:2,node2:2'; "
                        f"received {type(hosts).__name__}: {hosts!r}.")
    if hosts is None and hostfile is None:
        return None
    try:
        listed = parse_hosts(hosts, flag="hosts") if hosts is not None \
            else parse_hostfile(hostfile)
        check_slots(listed, np, flag="hosts" if hosts is not None else "hostfile",
                    np_name="np")
    except ValueError as err:
        raise ValueError(f"kerashvd.run: {err}") from None
    return listed


def _payload(fn, args, kwargs):
    import cloudpickle

    try:
        blob = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as err:
        raise TypeError(
            f"kerashvd.run could not pickle fn and its arguments with cloudpickle ({err}). "
            "Everything fn uses must be picklable: create objects such as models, sessions "
            "and open files inside fn instead of capturing them.") from err
    return pickle.dumps((list(sys.path), blob))


def _read_result(results, rank):
    data = results.get(rank)
    if data is None:
        return None
    try:
        return pickle.loads(data)
    except Exception as err:
        raise RankError(
            f"kerashvd.run: the result of rank {rank} could not be unpickled in the caller "
            f"({type(err).__name__}: {err}). Return values whose classes the caller can import, "
            "e.g. plain Python or NumPy values.", rank=rank) from err


def _collect(server, np, outcome, several_hosts):
    """Returns every rank's value, or raises RankError for the first rank that failed."""
    results = [_read_result(server.results, rank) for rank in range(np)]

    def where(rank):
        host = server.hosts.get(rank)
        return f" on {host}" if several_hosts and host else ""

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
            f"kerashvd.run: rank {blamed} (of {np}){where(blamed)} raised an exception; its "
            f"traceback:\n\n"
            f"{traceback_text}", rank=blamed, exit_code=1, remote_traceback=traceback_text)
    if isinstance(outcome.failure, RanksLost):
        raise RankError(f"kerashvd.run: {outcome.failure.describe()}, before returning a "
                        "result; the output is printed above.", rank=outcome.failure.rank,
                        exit_code=outcome.failure.exit_code)
    if outcome.failure is not None:
        failed = outcome.failure.rank
        raise RankError(
            f"kerashvd.run: rank {failed} (of {np}){where(failed)} "
            f"{describe(outcome.failure.returncode)} without returning a result "
            "(os._exit(), a crash or a signal ended it); its output is printed above.",
            rank=failed, exit_code=outcome.failure.exit_code)
    raise RankError(
        f"kerashvd.run: rank {blamed} (of {np}){where(blamed)} returned no result; mpiexec "
        f"{describe(outcome.returncode)}. See the output printed above.",
        rank=blamed, exit_code=outcome.returncode)


def run(fn, np=1, args=(), kwargs=None, env=None, verbose=True, hosts=None, hostfile=None,
        ssh_port=None, ssh_identity_file=None, ssh_config_file=None,
        ssh_connect_timeout=DEFAULT_CONNECT_TIMEOUT):
    """Runs ``fn(*args, **kwargs)`` on ``np`` processes and returns their results.

    ``fn`` runs in fresh processes started through ``mpiexec``: it calls
    :func:`kerashvd.init` itself, as a training script would. It may be a lambda or a function
    defined in ``__main__`` or a notebook cell: it is pickled by value with cloudpickle.
    The ranks' stdout and stderr are printed to this process's ``sys.stdout`` as they come.
    When a rank fails, the other ranks are stopped and the error is raised here. There are no
    restarts (``kerashvdrun --max-restarts`` has them; ``KERASHVD_RESTART_COUNT`` is not set
    here): to try again, catch :class:`RankError` and call ``run`` again.

    With ``hosts`` (or ``hostfile``), as Horovod's ``horovod.run``, the ranks run on those
    hosts, filled in order, and are started over ssh on those other than this machine (as
    ``kerashvdrun -H``): ssh must work without a password, and every host needs this Python,
    kerashvd and the working directory at the same paths; each remote host is checked first.
    Nothing else needs to be shared: the function and the results travel over the
    connection to this process.

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
        hosts: ``"node1:2,node2:2"`` (``:slots`` defaults to 1); ``None``: this machine.
        hostfile: a file of hosts instead (``node1 slots=2`` a line, as ``kerashvdrun``).
        ssh_port: ssh's port (``-p``) on the other hosts.
        ssh_identity_file: ssh's private key (``-i``) for the other hosts.
        ssh_config_file: ssh's client configuration (``-F``) for the other hosts.
        ssh_connect_timeout: seconds a host may take to accept the ssh connection.

    Returns:
        A list with each rank's return value, in rank order.

    Raises:
        RankError: a rank raised (the message holds its rank, its host when there are
            several, and its full traceback), or died without a result (rank and exit code).
        TypeError, ValueError: for bad arguments, or ``fn`` and its arguments cannot be pickled.
        LaunchError: no ``mpiexec`` was found, or a host cannot be reached over ssh or lacks
            what the ranks need (the message names each such host and the fix).
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
    listed = _hosts(hosts, hostfile, np)
    settings = SshSettings(ssh_port, ssh_identity_file, ssh_config_file, ssh_connect_timeout)
    try:
        settings.validate()
    except ValueError as err:
        raise ValueError(f"kerashvd.run: {err}.") from None
    backend = select(Request(np=np, hosts=listed, ssh=settings, scheduler=False))
    backend.find_program()
    payload = _payload(fn, args, kwargs)
    rank_env = {"PYTHONUNBUFFERED": "1"}
    rank_env.update(env or {})
    log = (lambda message: print(f"kerashvd.run: {message}", flush=True)) if verbose else None
    with backend.prepare(listed, log=log) as launch:
        events = queue.Queue()
        with ReportServer(events, local=launch.local, address=launch.address,
                          name_hosts=launch.names_hosts, payload=payload,
                          link_timeout=keepalive.link_timeout({**os.environ, **rank_env})
                          ) as server:
            argv = launch.command(
                np, [sys.executable, WORKER, server.address, server.token], env=rank_env,
                args=(), supervision=Supervision(server.address, server.token, verbose))
            outcome = run_job(argv, events, capture_output=True,
                              on_line=lambda line: print(line, flush=True), log=log)
        launch.finish(log, unreachable={e.host for e in outcome.lost if e.unreachable})
        if outcome.interrupted is not None:
            if outcome.interrupted != signal.SIGINT:
                signal.raise_signal(outcome.interrupted)  # as if it had come after the run
            raise KeyboardInterrupt(
                f"kerashvd.run was interrupted by {signal.Signals(outcome.interrupted).name}; "
                "all ranks were stopped.")
        return _collect(server, np, outcome, several_hosts=launch.names_hosts)
