"""``hvd.elastic.run``: the decorator that carries training across worlds.

Horovod re-forms its Gloo rings inside the same processes: on a failure the survivors roll
back to their last commit, re-initialize and go on, and new workers join them. An MPI world
cannot change size, so under ``kerashvdrun``'s elastic mode (``kerashvd/launcher/
elastic_driver.py``) every world is a new set of processes, and the decorated function runs
once per process:

1. (first call in the process) every rank opens its member connection to the launcher (host
   announcements, and its lifeline); in every world but the first, rank 0 takes the commit
   the last world handed to the launcher and restores it, and every rank runs the state's
   reset callbacks (the world size changed);
2. ``state.sync()``: every rank takes rank 0's state; rank 0 tells the launcher which
   commit the world trains from;
3. the function runs. If it returns, the rank tells the launcher it is done and returns its
   value. If it raises an error other than those below, the rank tells the launcher the error
   (one line: its type and message) and raises it: the script failed by itself, and when every
   rank of a world does so the launcher ends the job instead of starting another world. If it raises ``HostsUpdatedInterrupt`` (a commit saw a host change: every rank
   raises it at the same commit), the rank saves its state as it is; if a collective failed
   because a peer died or aborted (``tf.errors.AbortedError``, or ``HorovodInternalError``
   raised by your code), or the world is being stopped (SIGTERM: from kerashvdrun, or as the
   parent-death signal when MPI's process manager ends a world that lost a host), the rank
   keeps its last commit. Either way it hands that commit to the launcher and ends with exit
   code 76; the launcher starts the next world.

Outside the elastic mode (plain ``mpiexec``, ``kerashvdrun`` without the elastic flags),
steps 1 and 3's hand-over are skipped: the function runs after a ``sync()``, and an error
ends the job as any error does (``--max-restarts`` restarts it from your checkpoint).
"""

import functools
import os
import signal
import sys
import threading

import tensorflow as tf

import kerashvd as hvd
from kerashvd.runtime.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from kerashvd.launcher.handover import RESET_EXIT_CODE

from . import launcher_link


def run(func):
    """Runs ``func(state, *args, **kwargs)`` so that training goes on across worlds.

    The first argument must be the :class:`~kerashvd.elastic.State` the function trains.
    Call it after ``hvd.init()``, on every rank, and do not run collectives between
    ``hvd.init()`` and the call that depend on the world's size being the same as before:
    the state is synchronized when the function starts.

    Args:
        func: the training function.

    Returns:
        The decorated function; it returns what ``func`` returns.

    Raises:
        SystemExit: with code 76 under ``kerashvdrun``'s elastic mode, once this rank has
            handed its commit over for the next world (the launcher expects that exit).

    Example (Horovod's elastic Keras example, import changed)::

        @hvd.elastic.run
        def train(state):
            state.model.fit(dataset, steps_per_epoch=500 // hvd.size(),
                            epochs=24 - state.epoch, callbacks=callbacks, verbose=1)

        train(state)
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        link = launcher_link.current()
        if link is None:
            state.sync()
            state._synced = True
            return func(state, *args, **kwargs)
        _begin(state, link)
        parent = os.getppid()
        guard = _SigtermGuard(parent)
        try:
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            state.save()  # the ranks agree on this point: take it as it is
            _leave(state, link, "the hosts changed")
        except (HorovodInternalError, tf.errors.AbortedError, _WorldStopped) as err:
            _leave(state, link, f"{type(err).__name__}: {err}")
        except BaseException as err:
            if not guard.seen and os.getppid() == parent:
                guard.restore()
                link.report(hvd.rank(), "failed", _one_line(err))
                raise
            # The world is being stopped, and this error came of it: the SIGTERM's
            # _WorldStopped may have been raised inside TensorFlow's C++ while it built the
            # failed collective's AbortedError (pybind11 then raises a RuntimeError "MISMATCH
            # of original and normalized active exception types"), or a print met the closed
            # pipe of a supervisor that hydra killed (BrokenPipeError).
            if os.getppid() != parent:
                _silence_output()
            _leave(state, link, f"the world was stopped ({type(err).__name__}: {err})")
        guard.restore()
        link.report(hvd.rank(), "done")
        return result

    return wrapper


def _one_line(err, limit=400):
    """``"TypeName: message"`` of ``err`` on one line, at most ``limit`` characters."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _WorldStopped(BaseException):
    """SIGTERM reached the rank while it trained: its world is being stopped. A
    ``BaseException``, as ``KeyboardInterrupt`` is, so that ``except Exception`` in the
    training code does not swallow it."""


def _silence_output():
    """Points this process's stdout and stderr at /dev/null.

    Under kerashvdrun a rank's output goes through pipes to its supervisor
    (``launcher/_supervisor.py``). When hydra ends a world that lost a host it SIGKILLs the
    supervisors, and in elastic mode the rank outlives its supervisor to hand its commit
    over: any later write (a Keras progress bar, a print, a traceback) would raise
    ``BrokenPipeError`` and end the rank before it could."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass  # None, closed, or its pipe already gone
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class _SigtermGuard:
    """Makes SIGTERM raise :class:`_WorldStopped` in the main thread, once (later ones are
    ignored: hydra forwards one and the parent-death signal follows), until :meth:`restore`.
    The handler stays until the rank leaves or training returns, so that no SIGTERM meets
    the default action between a failed collective and the hand-over. ``seen`` tells that
    one came: whatever error training then ends with is the world being stopped. A SIGTERM
    that comes when the process ``parent`` (the rank's supervisor) is gone is the
    parent-death signal: the output pipes are gone too, and are silenced first."""

    def __init__(self, parent):
        self.seen = False
        self._parent = parent
        self._installed = threading.current_thread() is threading.main_thread()
        if self._installed:
            self._previous = signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, signum, frame):
        if os.getppid() != self._parent:
            _silence_output()
        if not self.seen:
            self.seen = True
            raise _WorldStopped("the world is being stopped (SIGTERM)")

    def restore(self):
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)
            self._installed = False


def _begin(state, link):
    """Steps 1 and 2 of the module docstring."""
    rank = hvd.rank()
    first = not link.resumed
    if first:
        link.resumed = True
        link.join(rank)
        if link.world > 0:
            if rank == 0:
                commit = link.fetch(rank)
                if commit is not None:
                    state._take_over(commit[1])
            state.on_reset()
    state.sync()
    state._synced = True
    if first and rank == 0:
        link.report(rank, "synced", state._saved_commits)


def _leave(state, link, why):
    """Hands the last commit to the launcher and ends this rank for the next world."""
    if threading.current_thread() is threading.main_thread():
        # The world's process manager may go now (hydra ending a world that lost a host):
        # its parent-death SIGTERM must not cut the hand-over short. The member connection
        # bounds how long this can take.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    number, make_bytes = state._handover()
    try:
        link.hand_over(hvd.rank(), number, make_bytes)
    except (OSError, launcher_link.LinkError) as err:
        try:
            print(f"kerashvd: rank {hvd.rank()}: {why}, but its commit could not be handed to "
                  f"kerashvdrun: {err}", file=sys.stderr, flush=True)
        except OSError:
            pass  # no output left to tell (its supervisor is gone)
        raise SystemExit(1) from None
    raise SystemExit(RESET_EXIT_CODE)
