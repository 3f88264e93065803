"""Walking a chain of wrapped optimizers (``LossScaleOptimizer``, ``DistributedOptimizer``).

Keras' ``LossScaleOptimizer`` and kerashvd's ``DistributedOptimizer`` hold the optimizer they
wrap as ``inner_optimizer``; code that looks for one link of the chain (a
DistributedOptimizer, a setting, the real learning rate) walks it here.
"""

__all__ = ["optimizer_chain", "ReducerSettings", "uses_distributed_optimizer"]


def optimizer_chain(optimizer):
    """Yields ``optimizer``, then each ``inner_optimizer`` below it, outermost first.

    Stops at an object without an inner optimizer, and at one seen before (a cycle).

    Example:

    >>> [type(o).__name__ for o in optimizer_chain(hvd.DistributedOptimizer(
    ...     keras.optimizers.SGD()))]  # doctest: +SKIP
    ['DistributedOptimizer', 'SGD']
    """
    seen = set()
    while optimizer is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        yield optimizer
        optimizer = getattr(optimizer, "inner_optimizer", None)


class ReducerSettings:
    """The reduction settings of a wrapper that holds a GradientReducer as ``self._reducer``,
    read back under Horovod's argument names (shared by both Keras versions' optimizers).

    Also what marks an optimizer as a DistributedOptimizer of either Keras
    (:func:`uses_distributed_optimizer`).
    """

    compression = property(lambda self: self._reducer.compression)
    sparse_as_dense = property(lambda self: self._reducer.sparse_as_dense)
    op = property(lambda self: self._reducer.op)
    gradient_predivide_factor = property(lambda self: self._reducer.gradient_predivide_factor)
    num_groups = property(lambda self: self._reducer.num_groups)
    groups = property(lambda self: self._reducer.groups)
    scale_local_gradients = property(lambda self: self._reducer.scale_local_gradients)
    process_set = property(lambda self: self._reducer.process_set)
    bucket_cap_mb = property(lambda self: self._reducer.bucket_cap_mb)

    def register_local_var(self, var):
        """Keeps ``var``'s gradient on this rank: it is applied without any collective.

        For layers each rank keeps to itself (model parallelism, per-rank heads). With
        ``scale_local_gradients`` (default) the local gradient is divided by ``size()``.
        Every rank must register the same variables, before the first step.
        ``kerashvd.PartialDistributedOptimizer(opt, local_layers=[...])`` registers whole
        layers.
        """
        self._reducer.register_local(var)


def uses_distributed_optimizer(optimizer):
    """Whether ``optimizer`` is, or wraps (e.g. a LossScaleOptimizer), a DistributedOptimizer."""
    return any(isinstance(link, ReducerSettings) for link in optimizer_chain(optimizer))
