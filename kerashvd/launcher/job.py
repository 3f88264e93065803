"""Runs one ``mpiexec`` job to its end: output, failure reports, signals, and stopping it.

The loop, in the launcher's calling thread, every 0.1 s at most:
1. print the lines read from mpiexec's pipe (when output is captured, as in a notebook);
2. on the first :class:`~kerashvd.launcher.reports.FailureReport`, or the first rank lost
   (its supervisor's watch ended without a goodbye: ``watches.py``), remember it and start
   stopping the job; later reports are consequences and are ignored (the ranks of the host of
   the first loss lost within a second of it are named with it);
3. on SIGINT/SIGTERM to the launcher, start stopping the job (a second one skips ahead);
4. end when mpiexec has exited and its output is drained, then remove the MPICH
   shared-memory segments on this host that killed ranks left behind (``shm_segments.py``).

Stopping escalates, each step only if mpiexec is still running when the previous one's grace
time is over: SIGTERM to mpiexec (hydra forwards it to every rank's supervisor, which passes
it on), then SIGINT twice (hydra's "force abort": it SIGKILLs the ranks), then SIGKILL of
mpiexec itself (its proxies then kill the ranks; supervisors' children die with them).
mpiexec runs in its own session so that a terminal's Ctrl-C reaches only the launcher, which
stops the job in this order instead of leaving hydra and the ranks to race.

If the launcher itself dies (SIGKILL, an out-of-memory kill, a notebook kernel that dies),
nothing above runs. Two things stop the job then: mpiexec (or srun) is started with a
parent-death signal, SIGTERM, which it forwards to every rank as in the first step above; and
every rank's supervisor holds a connection to the launcher that the operating system closes
when it dies, on which the supervisor stops its rank (SIGTERM, then SIGKILL; see
``_supervisor.py``), also on other hosts.
"""

import contextlib
import dataclasses
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from . import shm_segments
from .keepalive import MARGIN
from .reports import FailureReport
from .watches import LossGatherer, RankLost

_STEPS = (
    ((signal.SIGTERM,), 5.0),
    ((signal.SIGINT, signal.SIGINT), 3.0),
    ((signal.SIGKILL,), None),
)
# After a rank fails, the others get this long to report the failure themselves (kerashvd
# names the dead rank within milliseconds) and exit, before they are signalled.
_FAILURE_GRACE = 3.0
_TICK = 0.1
_DRAIN_AFTER_EXIT = 2.0  # orphaned grandchildren could hold the pipe open forever


@dataclasses.dataclass
class JobOutcome:
    """How a job ended.

    Attributes:
        returncode: mpiexec's own return code.
        failure: the first rank that reported a failure (a
            :class:`~kerashvd.launcher.reports.FailureReport`), or the ranks lost first (a
            :class:`~kerashvd.launcher.watches.RanksLost`), or ``None``.
        interrupted: the signal (SIGINT/SIGTERM) that made the launcher stop the job, or None.
        lost: every :class:`~kerashvd.launcher.watches.RankLost` of the job.
    """

    returncode: int
    failure: object = None
    interrupted: int | None = None
    lost: list = dataclasses.field(default_factory=list)

    @property
    def exit_code(self):
        """The launcher's exit code: 128 + signal when interrupted, else the first failed
        rank's code, else mpiexec's."""
        if self.interrupted is not None:
            return 128 + self.interrupted
        if self.failure is not None:
            return self.failure.exit_code
        return self.returncode


class _Line(str):
    """One line of captured output (an event on the queue)."""


_EOF = object()


class SignalCatcher:
    """Records SIGINT/SIGTERM while installed (only possible in the main thread).

    :func:`run_job` installs one for the job; the restart loop (``restarts.py``) holds one
    across attempts and the waits between them and passes it in, so that a signal is never
    missed between two attempts.

    Attributes:
        received: the first signal received, or ``None``.
        force: a second signal was received (skip ahead to stopping the job by force).
    """

    def __init__(self):
        self.received = None
        self.force = False
        self._previous = {}

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signum
        else:
            self.force = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


class _Stopper:
    """Steps through :data:`_STEPS` until mpiexec is gone."""

    def __init__(self, proc, log):
        self._proc = proc
        self._log = log
        self._step = -1
        self._deadline = None
        self._steps = _STEPS

    @property
    def started(self):
        return self._step >= 0

    @property
    def waiting(self):
        """Not started, or in the grace time before the first signal."""
        return self._step < 0 or self._step == 0 and not self._steps[0][0]

    def hurry(self):
        """Starts stopping now, skipping what is left of a grace time."""
        if not self.started:
            self.start()
        elif self.waiting:
            self._advance()

    def start(self, grace=0.0):
        """Begins stopping; with `grace`, first waits that long without signalling."""
        if not self.started:
            self._steps = (((), grace),) + _STEPS if grace else _STEPS
            self._advance()

    def poll(self, force=False):
        if not self.started or self._proc.poll() is not None or self._step + 1 >= len(self._steps):
            return
        if force or time.monotonic() >= self._deadline:
            sent = self._steps[self._step][0]
            if sent:
                self._log(f"ranks still running after {signal.Signals(sent[0]).name}; "
                          "forcing them to stop.")
            self._advance()

    def _advance(self):
        self._step += 1
        signals, grace = self._steps[self._step]
        for i, signum in enumerate(signals):
            if i:
                time.sleep(0.2)  # hydra counts two separate Ctrl-Cs
            try:
                self._proc.send_signal(signum)
            except ProcessLookupError:
                return
        self._deadline = None if grace is None else time.monotonic() + grace


def _read_lines(stream, events):
    for raw in iter(stream.readline, b""):
        events.put(_Line(raw.decode("utf-8", "replace").rstrip("\r\n")))
    events.put(_EOF)


# Runs first in the launcher's child: asks for SIGTERM when the launcher (the thread that
# started it, which waits for it) dies, then becomes the launcher command (the signal survives
# exec). A tiny Python rather than subprocess's preexec_fn, which is unsafe with threads.
_EXEC_WITH_PARENT_DEATH_SIGNAL = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('kerashvd: the launcher ended before the job started')\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n")


def with_parent_death_signal(argv):
    """``argv`` run so that it gets SIGTERM when this process dies (Linux; else ``argv``)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _EXEC_WITH_PARENT_DEATH_SIGNAL,
            str(os.getpid()), *argv]


def _environment():
    # A launcher started inside another MPI job must not hand its PMI_* to the new mpiexec.
    return {k: v for k, v in os.environ.items() if not k.startswith("PMI_")}


def run_job(argv, events, *, capture_output=False, on_line=None, log=None, signals=None,
            failure_grace=_FAILURE_GRACE, is_failure=None, on_tick=None):
    """Runs ``argv`` (an mpiexec command) until it ends; stops it on a failure or a signal.

    Args:
        argv: the command, from a launcher backend (``backends/``).
        events: the queue given to the job's
            :class:`~kerashvd.launcher.reports.ReportServer`.
        capture_output: read mpiexec's stdout and stderr (merged) and pass each line to
            ``on_line``; otherwise they are inherited from this process.
        on_line: called with each captured line (without its newline).
        log: called with the launcher's own messages (a failure, a signal); ``None``: silent.
        signals: an installed :class:`SignalCatcher` to read instead of installing one; a
            signal it received before the job started stops the job at once.
        failure_grace: seconds the other ranks get to end by themselves after a failure
            before they are signalled.
        is_failure: called with every :class:`~kerashvd.launcher.reports.FailureReport` and
            :class:`~kerashvd.launcher.watches.RankLost`; one for which it returns False is
            not a failure (kerashvdrun's elastic mode: a rank that ended for a reset).
            Default: every report and every loss is one.
        on_tick: called every 0.1 s at most while the job runs, until it is being stopped
            by signals; a message it returns is logged and stops the job at once (without
            what is left of a failure's grace time).

    Returns:
        A :class:`JobOutcome`.

    Example:

    >>> import queue
    >>> run_job(["true"], queue.Queue()).exit_code
    0
    """
    log = log or (lambda message: None)
    segments_before = shm_segments.segments()
    pipe = subprocess.PIPE if capture_output else None
    proc = subprocess.Popen(
        with_parent_death_signal(argv), env=_environment(), start_new_session=True,
        stdin=subprocess.DEVNULL if capture_output else None,
        stdout=pipe, stderr=subprocess.STDOUT if capture_output else None)
    if capture_output:
        threading.Thread(target=_read_lines, args=(proc.stdout, events), daemon=True).start()
    outcome = JobOutcome(returncode=0)
    stopper = _Stopper(proc, log)
    state = {"eof": not capture_output}
    losses = LossGatherer()

    def handle(event):
        if isinstance(event, _Line):
            if on_line is not None:
                on_line(str(event))
        elif isinstance(event, FailureReport):
            if is_failure is not None and not is_failure(event):
                return
            if outcome.failure is None and outcome.interrupted is None:
                outcome.failure = event
                log(f"{event.describe()}; stopping the other ranks.")
                stopper.start(grace=failure_grace)
        elif isinstance(event, RankLost):
            outcome.lost.append(event)
            if is_failure is not None and not is_failure(event):
                return
            if outcome.failure is None and outcome.interrupted is None:
                outcome.failure = losses.add(event, time.monotonic())
                # Announced once gathered (below). The ranks left behind by a host that
                # stopped answering notice it by themselves up to MARGIN s later.
                stopper.start(grace=failure_grace + (MARGIN if event.unreachable else 0.0))
            elif outcome.failure is losses.group:
                outcome.failure = losses.add(event, time.monotonic())
        elif event is _EOF:
            state["eof"] = True

    exited_at = None
    with contextlib.nullcontext(signals) if signals is not None else SignalCatcher() as signals:
        while True:
            if signals.received is not None and outcome.interrupted is None:
                outcome.interrupted = signals.received
                log(f"received {signal.Signals(signals.received).name}; stopping all ranks "
                    "(send it again to force).")
                stopper.start()
            if losses.due(time.monotonic()):
                losses.announced = True
                log(f"{losses.group.describe()}; stopping the other ranks.")
            reason = on_tick() if on_tick is not None and stopper.waiting else None
            if reason:
                log(reason)
                stopper.hurry()
            stopper.poll(force=signals.force)
            try:
                handle(events.get(timeout=_TICK))
            except queue.Empty:
                pass
            if proc.poll() is not None:
                exited_at = exited_at or time.monotonic()
                drained = state["eof"] or time.monotonic() - exited_at > _DRAIN_AFTER_EXIT
                # A loss still gathering waits for the rest of its window (at most GATHER s):
                # mpiexec may end, on a host lost, before the lost host's own watches do.
                if drained and (losses.group is None or losses.announced):
                    break
    while True:  # reports (and lines) that arrived before mpiexec ended
        try:
            handle(events.get_nowait())
        except queue.Empty:
            break
    if losses.group is not None and not losses.announced:
        losses.announced = True
        log(f"{losses.group.describe()}.")
    outcome.returncode = proc.wait()
    # The supervisors clean up as their ranks end, but hydra may SIGKILL a supervisor first.
    shm_segments.remove_dead_after_job(segments_before)
    return outcome
