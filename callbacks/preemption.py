"""Stopping every rank at the same batch on a walltime or preemption signal, with a checkpoint.

SLURM warns a job before ending it: ``#SBATCH --signal=USR1@120`` sends SIGUSR1 to every task
120 s before the time limit, and preemption or ``scancel`` sends SIGTERM (then SIGKILL after
the cluster's ``KillWait``, often 30 s). The signal reaches the ranks at different moments,
between different batches, so no rank may act on its own: after every ``check_every``-th
batch each rank contributes the signal it saw (0 for none) to an allreduce (max), and when
the result is not 0 every rank stops after that same batch. Rank 0 saves the model there
through the given :class:`ModelCheckpoint` (``Checkpoint.step`` records the position), the
ranks wait for the save to be complete, and every rank raises :class:`Preempted`, a
``SystemExit`` with exit code 75 (``EX_TEMPFAIL``: try again later). Validation and the other
epoch-end work of the cut epoch do not run. The batch script can then requeue the job
(``scontrol requeue``), and the next run resumes at that batch with :func:`fit_resumable`.

The handlers are installed when training starts and the previous ones restored when it ends.
Each check is one allreduce of two integers (about a millisecond on CPU). By default the ranks
check about four times a second, whatever the step time: each check also carries rank 0's
count of the batches until the next one, from the step time it measured, so every rank
checks after the same batches, and a stop comes at most about 0.25 s (or one batch) after
the signal reached the last rank.
"""

import signal
import sys
import time

import numpy as np

import kerashvd as hvd

from ._callback import Callback
from .resume import batch_offset

__all__ = ["Preempted", "PreemptionCallback", "PREEMPTED_EXIT_CODE"]

PREEMPTED_EXIT_CODE = 75  # sysexits.h EX_TEMPFAIL
"""The exit code of a rank that :class:`PreemptionCallback` stopped after saving (75, the
``EX_TEMPFAIL`` of ``sysexits.h``): the SLURM templates requeue a job that ends with it."""


class Preempted(SystemExit):
    """Raised on every rank by :class:`PreemptionCallback` after the checkpoint is saved.

    A ``SystemExit``: uncaught, the process ends with :attr:`code` (75) and no traceback.

    Attributes:
        code: the exit code.
        signal_name: the signal that stopped training, e.g. ``"SIGUSR1"``.
        epoch: the epoch (0-based) in which training stopped.
        step: the batches of that epoch trained.
        path: the checkpoint written (on rank 0; ``None`` on the others).

    Example (a notebook that wants to go on after the stop instead of exiting)::

        try:
            hvd.callbacks.fit_resumable(model, dataset_fn, ...)
        except hvd.callbacks.Preempted as stop:
            print(stop)  # training stopped on SIGTERM after batch 120 of epoch 3; ...
    """

    def __init__(self, code, signal_name, epoch, step, path):
        super().__init__(code)
        self.signal_name, self.epoch, self.step, self.path = signal_name, epoch, step, path

    def __str__(self):
        return (f"training stopped on {self.signal_name} after batch {self.step} of epoch "
                f"{self.epoch + 1}; checkpoint saved; exit code {self.code}")


class PreemptionCallback(Callback):
    """On SIGUSR1/SIGTERM, stops every rank after the same batch and saves a checkpoint.

    Args:
        checkpoint: the :class:`ModelCheckpoint` that saves the model (its directory holds
            the record the next run resumes from).
        signals: the signals to catch, as names or numbers. Default SIGUSR1 (``#SBATCH
            --signal=USR1@120``) and SIGTERM (preemption, ``scancel``).
        check_every: ranks compare notes every this many batches. Default ``None``: about
            every 0.25 s, as rank 0 measures it (see the module doc). Either way, with the
            optimizer's ``backward_passes_per_step`` k > 1, whose locally accumulated
            gradients are not saved, only batches that apply an update (a multiple of k in
            the epoch) are checked, so the resumed run loses nothing.
        exit_code: the code of the :class:`Preempted` exit.

    Every rank must use the callback (the check is a collective). Put it after the callbacks
    whose per-batch work should include the last batch (e.g. learning-rate schedules).

    Example (a recipe; the batch script requeues on exit code 75)::

        ckpt = hvd.callbacks.ModelCheckpoint("ckpt/model-{epoch:03d}.keras", max_to_keep=3)
        callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), ckpt,
                     hvd.callbacks.PreemptionCallback(ckpt)]
    """

    def __init__(self, checkpoint, signals=("SIGUSR1", "SIGTERM"), check_every=None,
                 exit_code=PREEMPTED_EXIT_CODE):
        super().__init__()
        if not hasattr(checkpoint, "save_position"):
            raise TypeError("checkpoint must be a kerashvd.callbacks.ModelCheckpoint; received "
                            f"{type(checkpoint).__name__}")
        if check_every is not None and (isinstance(check_every, bool)
                                        or not isinstance(check_every, int) or check_every < 1):
            raise ValueError(f"check_every must be None or an int >= 1; received {check_every!r}")
        self.checkpoint = checkpoint
        self.signals = [_signal_number(s) for s in signals]
        self.check_every = check_every
        self.exit_code = int(exit_code)
        self._received = 0
        self._previous = {}
        self._epoch = 0
        self._wait = 1  # checkable batches until the next check
        self._since = None  # (time, checkable batches) at the last check, on rank 0

    def _handle(self, signum, frame):
        self._received = signum  # acted on after the batch, together with the other ranks

    def on_train_begin(self, logs=None):
        self._received = 0
        passes = getattr(getattr(self.model, "optimizer", None), "backward_passes_per_step", 1)
        self._every = int(passes or 1)
        self._wait, self._since, self._checkable = 1, None, 0
        try:
            for number in self.signals:
                self._previous[number] = signal.signal(number, self._handle)
        except ValueError as err:  # not the main thread
            self._restore()
            raise RuntimeError(f"PreemptionCallback must run fit in the main thread ({err})") from err

    def on_train_end(self, logs=None):
        self._restore()

    def _restore(self):
        for number, previous in self._previous.items():
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        step = batch + 1 + batch_offset(self.model)
        if step % self._every:
            return
        self._checkable += 1
        self._wait -= 1
        if self._wait > 0:
            return
        agreed, self._wait = (int(v) for v in np.asarray(hvd.allreduce(
            np.array([self._received, self._proposal()], np.int64), op=hvd.Max,
            name="callbacks.preemption")))
        if not agreed:
            return
        name = signal.Signals(agreed).name
        path = self.checkpoint.save_position(self._epoch, step, logs)
        hvd.barrier()  # no rank exits (and has srun end the job) before rank 0's file is whole
        self._restore()
        if hvd.rank() == 0:
            print(f"\nkerashvd: {name} received: every rank stopped after batch {step} of epoch "
                  f"{self._epoch + 1}; saved {path}. Exiting with code {self.exit_code} "
                  "(resume by running the same command again).", file=sys.stderr, flush=True)
        raise Preempted(self.exit_code, name, self._epoch, step, path)


    def _proposal(self):
        """Checkable batches until the next check: ``check_every``, or on rank 0 about
        ``_INTERVAL`` seconds' worth from the time since the last check (0 elsewhere)."""
        if self.check_every:
            return self.check_every
        if hvd.rank() != 0:
            return 0
        now = time.perf_counter()
        since, self._since = self._since, (now, self._checkable)
        if since is None or self._checkable <= since[1]:
            return 1
        per_batch = (now - since[0]) / (self._checkable - since[1])
        return max(1, min(_MAX_WAIT, int(_INTERVAL / max(per_batch, 1e-6))))


_INTERVAL = 0.25  # seconds between checks by default
_MAX_WAIT = 10_000


def _signal_number(value):
    if isinstance(value, str):
        name = value.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        try:
            return int(getattr(signal, name))
        except AttributeError:
            raise ValueError(f"unknown signal {value!r}") from None
    return int(value)
