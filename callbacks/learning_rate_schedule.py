"""Learning rate as ``initial_lr * multiplier(epoch)``, per epoch or per batch (Horovod semantics)."""

import itertools
import numbers
import warnings

import numpy as np

from kerashvd.training.keras_compat import optimizer_built
from kerashvd.training.optimizer.chain import optimizer_chain

from ._callback import Callback
from .resume import batch_offset

__all__ = ["LearningRateScheduleCallback"]


class LearningRateScheduleCallback(Callback):
    """Sets the optimizer's learning rate to ``initial_lr * multiplier(epoch)``.

    Between ``start_epoch`` (inclusive) and ``end_epoch`` (exclusive) the learning rate is
    adjusted before batches: with ``staircase=True`` once per epoch, before its first batch,
    to ``initial_lr * multiplier(epoch)``; with ``staircase=False`` before every batch, to
    ``initial_lr * multiplier(epoch + batch / steps_per_epoch)`` (a fractional epoch). Outside
    that range the learning rate is left alone, so several of these callbacks can chain
    (e.g. a warmup, then ``multiplier=1.0`` from epoch 5, then ``0.1`` from epoch 30).

    Momentum correction (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): optimizers
    whose velocity includes the learning rate (SGD and RMSprop with momentum) would carry the
    old learning rate into the first step after a change. When the learning rate changes by
    ``r = new_lr / old_lr``, the step that follows uses momentum ``momentum * r``, as in
    Horovod. Keras 3 and tf_keras SGD/RMSprop hold ``momentum`` as a Python float that is
    compiled into the train function, so instead of changing it the callback scales their
    momentum buffers by ``r`` (the same update for plain momentum; for Nesterov, the
    look-ahead term keeps the unscaled coefficient). An optimizer whose ``momentum`` is a
    variable (tf_keras' legacy optimizers) gets it scaled for one step and restored after the
    batch, exactly as in Horovod. Optimizers without a
    ``momentum`` attribute (Adam, ...) are unaffected.

    The learning rate at the end of each epoch is written to ``logs["learning_rate"]``.

    Args:
        initial_lr: the base learning rate (a positive number), usually already scaled by
            ``hvd.size()`` for the global batch.
        multiplier: a number, or a function of the (fractional) epoch returning the factor.
            A constant forces ``staircase=True``.
        start_epoch: the first epoch the schedule applies to.
        end_epoch: the first epoch it no longer applies to; ``None`` for no end.
        staircase: adjust once per epoch (``True``) or before every batch (``False``).
        momentum_correction: apply momentum correction when the learning rate changes.
        steps_per_epoch: batches per epoch, needed for ``staircase=False``; ``None`` reads it
            from ``fit``'s parameters (known for arrays and datasets of known cardinality).

    Raises:
        ValueError: for bad arguments; at ``fit`` time when ``steps_per_epoch`` cannot be
            inferred. TypeError: at ``fit`` time when the optimizer's learning rate is a
            ``LearningRateSchedule`` (not settable).

    Example:

    >>> import kerashvd as hvd
    >>> lr = 0.01 * hvd.size()
    >>> callbacks = [
    ...     hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=5),
    ...     hvd.callbacks.LearningRateScheduleCallback(lr, multiplier=1.0, start_epoch=5, end_epoch=30),
    ...     hvd.callbacks.LearningRateScheduleCallback(lr, multiplier=0.1, start_epoch=30),
    ... ]
    >>> model.fit(x, y, epochs=40, callbacks=callbacks)  # doctest: +SKIP
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if isinstance(initial_lr, bool) or not isinstance(initial_lr, numbers.Real) or not initial_lr > 0:
            raise ValueError(f"initial_lr must be a positive number; received initial_lr={initial_lr!r}")
        if isinstance(start_epoch, bool) or not isinstance(start_epoch, int) or start_epoch < 0:
            raise ValueError(f"start_epoch must be an int >= 0; received start_epoch={start_epoch!r}")
        if end_epoch is not None and (isinstance(end_epoch, bool) or not isinstance(end_epoch, int)
                                      or end_epoch <= start_epoch):
            raise ValueError(f"end_epoch must be None or an int > start_epoch ({start_epoch}); "
                             f"received end_epoch={end_epoch!r}")
        if steps_per_epoch is not None and (isinstance(steps_per_epoch, bool)
                                            or not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0):
            raise ValueError(f"steps_per_epoch must be None or a positive int; "
                             f"received steps_per_epoch={steps_per_epoch!r}")
        if callable(multiplier):
            self.multiplier = multiplier
        elif isinstance(multiplier, numbers.Real) and not isinstance(multiplier, bool):
            constant = float(multiplier)
            self.multiplier = lambda epoch: constant
            staircase = True
        else:
            raise ValueError(f"multiplier must be a number or a function of the epoch; "
                             f"received multiplier={multiplier!r}")
        self.initial_lr = float(initial_lr)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = bool(staircase)
        self.momentum_correction = bool(momentum_correction)
        self.steps_per_epoch = steps_per_epoch
        self._current_epoch = None
        self._restore_momentum = None
        self._warned_no_buffers = False

    def on_train_begin(self, logs=None):
        if not self.staircase and self.steps_per_epoch is None:
            steps = (self.params or {}).get("steps")
            if not steps:
                raise ValueError(
                    f"{type(self).__name__} could not infer the number of batches per epoch from "
                    "fit (the dataset's cardinality is unknown). Pass steps_per_epoch= to the "
                    "callback, or steps_per_epoch= to fit().")
            # In fit_resumable's partial first epoch Keras counts only the batches left.
            self.steps_per_epoch = int(steps) + batch_offset(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        epoch = self._current_epoch
        if epoch is None or epoch < self.start_epoch or (self.end_epoch is not None
                                                         and epoch >= self.end_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust_learning_rate(epoch)
        else:
            batch += batch_offset(self.model)  # the epoch's batch, also after a mid-epoch resume
            self._adjust_learning_rate(epoch + float(batch) / self.steps_per_epoch)

    def on_train_batch_end(self, batch, logs=None):
        if self._restore_momentum is not None:
            variable, value = self._restore_momentum
            variable.assign(value)
            self._restore_momentum = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = get_learning_rate(self.model.optimizer)

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = get_learning_rate(optimizer)
        new_lr = self.initial_lr * float(self.multiplier(epoch))
        optimizer.learning_rate = new_lr
        new_lr = get_learning_rate(optimizer)  # as stored (float32)
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr:
            self._correct_momentum(optimizer, new_lr / old_lr)

    def _correct_momentum(self, optimizer, ratio):
        inner = _innermost(optimizer)
        momentum = getattr(inner, "momentum", None)
        if momentum is None or isinstance(momentum, bool):
            return
        if hasattr(momentum, "assign"):  # a variable: scale it for this step (Horovod)
            value = float(np.asarray(momentum))
            momentum.assign(value * ratio)
            self._restore_momentum = (momentum, value)
            return
        if float(momentum) == 0.0 or not optimizer_built(inner):
            return  # no velocity yet (Keras builds the optimizer when it first traces a step)
        buffers = getattr(inner, "momentums", None)
        if buffers is None:
            buffers = getattr(inner, "_momentums", None)
        if buffers is None:
            if not self._warned_no_buffers:
                warnings.warn(
                    f"{type(self).__name__}: {type(inner).__name__} has a constant momentum and "
                    "no momentum buffers this callback knows; momentum correction is skipped. "
                    "Pass momentum_correction=False to silence this warning.", stacklevel=2)
                self._warned_no_buffers = True
            return
        for buffer in buffers:
            buffer.assign(buffer * ratio)


def get_learning_rate(optimizer):
    """Returns the optimizer's current learning rate as a Python float."""
    return float(np.asarray(optimizer.learning_rate))


def _innermost(optimizer):
    """Follows wrappers (LossScaleOptimizer, kerashvd.DistributedOptimizer) to the real optimizer."""
    innermost = optimizer
    for inner in itertools.islice(optimizer_chain(optimizer), 1, None):
        if not hasattr(inner, "learning_rate"):  # any Keras' optimizer has one
            break
        innermost = inner
    return innermost
