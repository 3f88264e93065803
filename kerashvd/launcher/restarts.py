"""Restarting a failed job: ``kerashvdrun --max-restarts N``, with torchrun's semantics.

An *attempt* is one whole job: every rank, started by one ``mpiexec`` (or ``srun``) through
:func:`~kerashvd.launcher.job.run_job`. The loop:

1. start attempt ``k`` (0 first) with ``KERASHVD_RESTART_COUNT=k`` in every rank's
   environment, so a script can tell a restart (torchrun's ``TORCHELASTIC_RESTART_COUNT``);
2. it succeeds (exit code 0): the launcher ends with 0;
3. it fails (a rank exited non-zero or was killed, or ``mpiexec``/``srun`` failed): ``run_job``
   has already stopped every rank; if restarts are left, wait ``delay`` seconds and go to 1
   with ``k + 1``; otherwise end with the last failure's exit code and a message listing
   every attempt's failure.

Never restarted: a job interrupted by the user (SIGINT/SIGTERM to the launcher, during an
attempt or during the wait), which ends as it does without restarts (128 + N).

Nothing carries over from one attempt to the next except what the ranks wrote to disk: a
script resumes from its own last checkpoint (the recipes' ``--checkpoint-dir``).

The delay (default :data:`DEFAULT_DELAY`): torchrun restarts as soon as its monitor, polling
every ``--monitor-interval`` seconds (5 s until PyTorch 2.2, 0.1 s since), sees a worker fail.
kerashvdrun sees a failure within 0.1 s and has already waited for every rank to end, so the
wait is a deliberate pause instead: a few seconds let what the dead ranks held go (GPU memory,
which the driver frees after the process is gone; ports; a SLURM step being cleaned up; a
checkpoint written over NFS becoming visible on every node) and keep a failure that repeats at
start from spinning, at a cost that is small beside a training script's start-up.
"""

import dataclasses
import signal
import time

from . import exit_status
from .job import SignalCatcher

VARIABLE = "KERASHVD_RESTART_COUNT"
DEFAULT_DELAY = 3.0


@dataclasses.dataclass
class Attempt:
    """One attempt and how it ended (a :class:`~kerashvd.launcher.job.JobOutcome`)."""

    number: int  # 0 for the first
    outcome: object

    def describe(self, launcher):
        """The failure in words: "rank 1 exited with code 7", or the launcher's own status."""
        if self.outcome.failure is not None:
            return self.outcome.failure.describe()
        return f"{launcher} {exit_status.describe(self.outcome.returncode)} (no rank reported " \
               "a failure)"


def _sleep(seconds, signals):
    """Sleeps up to ``seconds``; returns early when ``signals`` has received a signal."""
    deadline = time.monotonic() + seconds
    while signals.received is None and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def run_with_restarts(run_attempt, max_restarts=0, delay=DEFAULT_DELAY, log=None,
                      launcher="mpiexec"):
    """Runs ``run_attempt(restart_count)`` until it succeeds, is interrupted, or has failed
    ``max_restarts + 1`` times.

    Args:
        run_attempt: called as ``run_attempt(number, signals)`` with the attempt's number
            (0, 1, ...), which the caller puts in every rank's environment as
            ``KERASHVD_RESTART_COUNT``, and the installed
            :class:`~kerashvd.launcher.job.SignalCatcher` to pass to ``run_job``; returns a
            :class:`~kerashvd.launcher.job.JobOutcome` after every rank has ended.
        max_restarts: how many times a failed job is started again, >= 0 (0: never).
        delay: seconds to wait between a failed attempt and the next, >= 0.
        log: called with the launcher's messages; ``None``: silent.
        launcher: the name of what starts the ranks (``"mpiexec"`` or ``"srun"``), for
            messages about a failure no rank reported.

    Returns:
        ``(outcome, attempts)``: the last attempt's outcome, whose ``exit_code`` is the
        launcher's (its exit code is 128 + N when a signal N to this process stopped it,
        during an attempt or the wait), and the list of :class:`Attempt` made.

    Example:

    >>> from kerashvd.launcher.job import JobOutcome
    >>> outcome, attempts = run_with_restarts(lambda k, signals: JobOutcome(returncode=0))
    >>> outcome.exit_code, len(attempts)
    (0, 1)
    """
    log = log or (lambda message: None)
    attempts = []
    total = max_restarts + 1
    with SignalCatcher() as signals:
        while True:
            number = len(attempts)
            if number:
                log(f"starting attempt {number + 1} of {total} ({VARIABLE}={number}).")
            outcome = run_attempt(number, signals)
            attempts.append(Attempt(number, outcome))
            if outcome.exit_code == 0:
                if number:
                    log(f"attempt {number + 1} of {total} succeeded after {_restarts(number)}.")
                return outcome, attempts
            if outcome.interrupted is not None:
                if max_restarts:
                    log(f"not restarting: stopped by "
                        f"{signal.Signals(outcome.interrupted).name} during attempt "
                        f"{number + 1} of {total}.")
                return outcome, attempts
            if number >= max_restarts:
                if max_restarts:
                    log(_final_message(attempts, max_restarts, launcher, outcome.exit_code))
                return outcome, attempts
            log(f"attempt {number + 1} of {total} failed ({attempts[-1].describe(launcher)}); "
                f"every rank has stopped. Restarting all ranks in {delay:g} s "
                f"(restart {number + 1} of {max_restarts}).")
            _sleep(delay, signals)
            if signals.received is not None:
                outcome.interrupted = signals.received
                log(f"received {signal.Signals(signals.received).name} while waiting to "
                    "restart; not restarting.")
                return outcome, attempts


def _restarts(count):
    return f"{count} restart{'s' if count != 1 else ''}"


def _final_message(attempts, max_restarts, launcher, exit_code):
    lines = [f"the job failed {len(attempts)} times, on every attempt allowed "
             f"(--max-restarts {max_restarts}); giving up and exiting with the last failure's "
             f"code, {exit_code}:"]
    lines += [f"  attempt {a.number + 1}: {a.describe(launcher)}" for a in attempts]
    lines.append("Look for the first error in each attempt's output above; a script resumes "
                 f"from its own checkpoint on a restart ({VARIABLE} > 0).")
    return "\n".join(lines)
