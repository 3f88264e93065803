"""kerashvd's TensorFlow op library, loaded once (see :func:`kerashvd.runtime._loader.load_tf_ops`).

Imported by the modules that build ops. Use :mod:`kerashvd.collectives._ops` instead where the ops'
gradients must be registered too (it is this library plus ``gradients``).

Inside a graph, the outputs of the grouped ops (``kerashvd_grouped_*``) pass through one
``IdentityN``. Why: every kerashvd op is asynchronous, and when an asynchronous op finishes,
TensorFlow's executor hands each node that became ready to its inter-op thread pool as a task of
its own (``ExecutorState::ScheduleReady`` with no inline queue). A grouped allreduce of 100
gradients thus woke the pool 100 times, one small assignment each; with 2 ranks on 2 cores that
cost about 0.5 ms of a 2.5 ms step. After the ``IdentityN`` only that node becomes ready: it runs
as one task, and the nodes it readies run inline on the same thread, as they do without
collectives. ``IdentityN`` forwards its inputs (no copy) and has an identity gradient. Eager
calls return the op's outputs directly.
"""

import functools

import tensorflow as tf

from .. import _private_api
from . import tf_threads
from ._engine import core
from ._loader import load_tf_ops

if core.is_initialized():
    # Before TensorFlow creates its thread pools, which running an op does (see tf_threads).
    tf_threads.apply(core.local_size())


def _fanned_out(op):
    @functools.wraps(op)
    def run(*args, **kwargs):
        outputs = op(*args, **kwargs)
        if len(outputs) < 2 or tf.executing_eagerly():
            return outputs
        return tf.identity_n(outputs)
    return run


def _untagged(op):
    """``op`` with its ``thread`` input empty unless given (ops/tf/adapter.h; the collectives
    of ``kerashvd.collectives`` fill it in for the unnamed collectives of a traced function)."""
    @functools.wraps(op)
    def run(*args, thread=(), **kwargs):
        return op(*args, thread=list(thread), **kwargs)
    return run


class _Library:
    """The loaded op module, with its grouped ops wrapped by :func:`_fanned_out` and the ops
    of :data:`THREAD_TAGGED` by :func:`_untagged`."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if name in THREAD_TAGGED:
            value = _untagged(value)
        if name.startswith("kerashvd_grouped_"):
            value = _fanned_out(value)
        setattr(self, name, value)  # looked up once
        return value


# The ops with a ``thread`` input: every collective and the barrier.
THREAD_TAGGED = frozenset(
    "kerashvd_" + name for name in (
        "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
        "grouped_broadcast", "alltoall", "reducescatter", "grouped_reducescatter", "barrier"))
OPS = _Library(load_tf_ops())
# The collectives are stateful, so that TensorFlow never constant-folds nor prunes them, but
# tf.function must not run them one at a time (ops/tf/kernels.h).
COLLECTIVE_OPS = ("KerashvdAllreduce", "KerashvdGroupedAllreduce", "KerashvdAllgather",
                  "KerashvdGroupedAllgather", "KerashvdBroadcast", "KerashvdGroupedBroadcast",
                  "KerashvdAlltoall", "KerashvdReducescatter", "KerashvdGroupedReducescatter")
_private_api.register_async_collectives(COLLECTIVE_OPS)
