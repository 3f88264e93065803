"""Horovod's public exception classes, for scripts that catch them by name.

Neither needs TensorFlow, so ``kerashvd.HorovodInternalError`` costs nothing to import.
"""

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt"]


class HorovodInternalError(RuntimeError):
    """A collective failed on the engine's side: a peer died, aborted or shut down.

    Horovod raises it from its elastic driver, which catches the framework's error of a failed
    collective and re-raises it under this name. kerashvd's collectives fail inside TensorFlow
    ops, so a dead or aborting peer reaches Python as the TensorFlow error the op reported
    (``tf.errors.AbortedError``, see "When things go wrong" in docs/diagnostics.md), whose type
    TensorFlow chooses; this class is *not* its base (``except`` compares real base classes,
    and retyping the error would mean wrapping every op and every ``tf.function``). It is the
    type to raise, and to catch in code written for Horovod, for failures your own code
    detects and attributes to the job; wrap the TensorFlow error where you catch it:

    Example:

    >>> import kerashvd as hvd
    >>> try:
    ...     hvd.allreduce(tf.ones([2]))
    ... except tf.errors.AbortedError as err:
    ...     raise hvd.HorovodInternalError(str(err)) from err  # doctest: +SKIP
    >>> issubclass(hvd.HorovodInternalError, RuntimeError)
    True
    """


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod elastic's signal that hosts were added or removed while training ran.

    Raised by ``state.commit()`` (``check_host_updates()``) under ``kerashvdrun``'s elastic
    mode, on every rank at the same commit, when host discovery found hosts for another world;
    ``hvd.elastic.run`` handles it (see ``kerashvd.elastic``).

    Args:
        skip_sync: True when the hosts changed without any rank failing, so the state need not
            be synchronised (restored from the last commit) before training goes on.

    Example:

    >>> import kerashvd as hvd
    >>> err = hvd.HostsUpdatedInterrupt(skip_sync=True)
    >>> err.skip_sync
    True
    """

    def __init__(self, skip_sync):
        super().__init__(f"hosts were updated (skip_sync={skip_sync})")
        self.skip_sync = skip_sync
