"""The collectives on tensors, Python objects and variables, and their gradients.

``tensors`` (allreduce ... reducescatter, grouped_*, join, barrier), ``functions``
(broadcast_variables, broadcast_object, allgather_object), ``reduce_ops`` (Sum, Average,
...), ``compression``, ``gradients`` (each op's gradient, registered with TensorFlow),
``_sparse`` (allreduce of ``tf.IndexedSlices``). ``_ops`` is the TensorFlow op library with
those gradients registered; ``_names`` keys each collective the same way on every rank, and
``_local_errors`` turns a bad argument on one rank into an error on every rank. These build
on :mod:`kerashvd.runtime`; importing this package imports none of its modules.
"""
