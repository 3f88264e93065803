"""Gradual learning-rate warmup for large global batches (Goyal et al. 2017), per batch."""

import kerashvd as hvd

from .learning_rate_schedule import LearningRateScheduleCallback, get_learning_rate

__all__ = ["LearningRateWarmupCallback"]


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from ``initial_lr / size()`` to ``initial_lr`` over the first epochs.

    Training with ``size()`` ranks multiplies the global batch, and the learning rate is
    usually scaled up with it (``initial_lr = base_lr * size()``); starting at the full rate
    diverges easily. This callback adjusts the learning rate before every batch of the first
    ``warmup_epochs`` epochs, as Horovod's callback of the same name does::

        lr = initial_lr / size * (e * (size - 1) / warmup_epochs + 1)
        e  = epoch + (batch + 1) / steps_per_epoch

    so the first batch uses almost ``initial_lr / size`` and the last warmup batch exactly
    ``initial_lr``. With one rank the learning rate stays ``initial_lr``. Momentum correction
    is applied at every change (see :class:`LearningRateScheduleCallback`). The learning rate
    after warmup is left at ``initial_lr``; chain a :class:`LearningRateScheduleCallback` with
    ``start_epoch=warmup_epochs`` for later decay.

    Args:
        initial_lr: the learning rate at the end of warmup (a positive number).
        warmup_epochs: the number of epochs the warmup lasts.
        momentum_correction: apply momentum correction when the learning rate changes.
        steps_per_epoch: batches per epoch; ``None`` reads it from ``fit``'s parameters.
        verbose: when > 0, rank 0 prints a line when the warmup ends.

    Raises:
        ValueError: for bad arguments, or at ``fit`` time when ``steps_per_epoch`` cannot be
            inferred.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> lr = 0.01 * hvd.size()
    >>> opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9))
    >>> model.compile(optimizer=opt, loss="mse")  # doctest: +SKIP
    >>> model.fit(x, y, epochs=10, callbacks=[
    ...     hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    ...     hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=3, verbose=1),
    ... ])  # doctest: +SKIP
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        if isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, int) or warmup_epochs <= 0:
            raise ValueError(f"warmup_epochs must be a positive int; received warmup_epochs={warmup_epochs!r}")
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose
        super().__init__(initial_lr, self._warmup_multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)

    def _warmup_multiplier(self, epoch):
        # Shift by one batch so the epoch's last batch lands on a round number (Horovod).
        epoch += 1.0 / self.steps_per_epoch
        world = hvd.size()
        return 1.0 / world * (epoch * (world - 1) / self.warmup_epochs + 1)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose and hvd.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{get_learning_rate(self.model.optimizer):g}.")
