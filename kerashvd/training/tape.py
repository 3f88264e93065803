"""DistributedGradientTape: a ``tf.GradientTape`` whose ``gradient()`` averages over ranks."""

import tensorflow as tf

from ..collectives.compression import Compression
from .optimizer.reduction import GradientReducer, check_not_xla
from ..runtime.process_sets import global_process_set
from ..collectives.reduce_ops import Average


class DistributedGradientTape:
    """Wraps a ``tf.GradientTape`` so that ``gradient()`` returns gradients reduced over ranks.

    Built by composition: everything but ``gradient`` (``watch``, ``jacobian``,
    ``stop_recording``, ``with`` ...) goes to the wrapped tape. The reduction is the one
    :class:`kerashvd.DistributedOptimizer` uses: fused allreduces of buckets of gradients (or groups),
    ``tf.IndexedSlices`` allgathered unless ``sparse_as_dense``, None gradients kept.

    Args:
        tape: the ``tf.GradientTape`` that recorded the forward pass.
        device_dense: accepted for Horovod compatibility; unused.
        device_sparse: the same.
        compression: ``kerashvd.Compression.none`` (default), ``.fp16`` or ``.bf16``.
        sparse_as_dense: densify ``tf.IndexedSlices`` gradients before reducing them.
        op: ``kerashvd.Average`` (default) or ``kerashvd.Sum``.
        gradient_predivide_factor: with ``op=Average``, divide by this before the sum and
            by ``size() / factor`` after it.
        num_groups: cut the dense gradients into this many groups (1: one collective per
            dtype; default 0: buckets of ``bucket_cap_mb``).
        groups: an int (as ``num_groups``) or a list of lists of variables.
        name: prefix of the collectives' names (kerashvd extension; default
            ``"DistributedGradientTape"``). Tapes whose ``gradient()`` calls run at the same
            time need distinct names.
        scale_local_gradients: divide the gradients of sources registered with
            :meth:`register_local_source` by ``size()`` (default True, as in Horovod).
        process_set: reduce among these ranks only (a registered ``kerashvd.ProcessSet``;
            default all); outside it ``gradient()`` returns the local gradients.
        bucket_cap_mb: MiB per bucket of consecutive gradients, each one collective that
            starts once backprop has produced its gradients (inside a ``tf.function``; see
            ``kerashvd.DistributedOptimizer``). None: ``KERASHVD_BUCKET_CAP_MB``, else 1; 0:
            one collective per dtype.

    Raises:
        ValueError: for an invalid argument. ``gradient()`` raises ValueError inside an
            XLA-compiled function (kerashvd's collectives have no XLA kernel).

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> w = tf.Variable([1.0, 2.0])
    >>> with tf.GradientTape() as tape:
    ...     loss = tf.reduce_sum(w * float(hvd.rank() + 1))
    >>> tape = hvd.DistributedGradientTape(tape)
    >>> grad = tape.gradient(loss, [w])[0]  # every element: the mean of 1..size()
    >>> bool(grad[0] == (hvd.size() + 1) / 2)
    True
    """

    def __init__(self, tape, device_dense="", device_sparse="", compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                 groups=None, name=None, scale_local_gradients=True,
                 process_set=global_process_set, bucket_cap_mb=None):
        if not isinstance(tape, tf.GradientTape):
            raise TypeError("DistributedGradientTape wraps a tf.GradientTape; received "
                            f"{type(tape).__name__}")
        self._tape = tape
        self._reducer = GradientReducer(name or "DistributedGradientTape", compression,
                                        sparse_as_dense, op, gradient_predivide_factor,
                                        num_groups, groups, scale_local_gradients, process_set,
                                        bucket_cap_mb)

    def register_local_source(self, source):
        """Keeps ``source``'s gradient on this rank: ``gradient()`` returns it unreduced.

        Divided by ``size()`` when ``scale_local_gradients`` (default). Every rank must
        register the same sources. ``kerashvd.PartialDistributedGradientTape(tape,
        local_layers=[...])`` registers whole layers.
        """
        self._reducer.register_local(source)

    @tf.autograph.experimental.do_not_convert
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        """Computes the gradients as ``tf.GradientTape.gradient`` does, then reduces them.

        Returns:
            The reduced gradients, in the structure of ``sources``.
        """
        check_not_xla("kerashvd.DistributedGradientTape")
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        flat_sources = tf.nest.flatten(sources, expand_composites=False)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        reduced = self._reducer.reduce(flat_grads, flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced, expand_composites=False)

    @tf.autograph.experimental.do_not_convert
    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       unconnected_gradients=tf.UnconnectedGradients.NONE):
        """Computes :meth:`gradient` and splits it into local and global gradients (Horovod).

        With local layers or sources (model parallelism), the global gradients are the
        same on every rank after the reduction but the local ones are not, so a quantity over
        all gradients -- a gradient norm for clipping, say -- has to be computed from the two
        parts separately (e.g. the global part's norm as it is, the local part's combined over
        ranks). The gradients are those :meth:`gradient` returns: global ones reduced, local
        ones divided by ``size()`` when ``scale_local_gradients`` (the default).

        Args:
            target: as for :meth:`gradient`.
            sources: as for :meth:`gradient`, a flat list (or tuple) of variables.
            output_gradients: as for :meth:`gradient`.
            unconnected_gradients: as for :meth:`gradient`.

        Returns:
            A pair ``(local_gradients, global_gradients)`` of lists: the gradients of the
            sources registered as local (``local_layers``' weights and
            :meth:`register_local_source`), then those of all other sources, each in the
            order of ``sources``.

        Raises:
            TypeError: when ``sources`` is not a flat list or tuple.

        Example:

        >>> tape = hvd.PartialDistributedGradientTape(plain_tape, local_layers=[head])
        >>> local, shared = tape.get_local_and_global_gradients(loss, model.trainable_variables)
        >>> shared_norm = tf.linalg.global_norm(shared)  # the same on every rank
        """
        if not isinstance(sources, (list, tuple)) or any(
                isinstance(s, (list, tuple, dict)) for s in sources):
            raise TypeError("get_local_and_global_gradients needs a flat list of sources (e.g. "
                            f"model.trainable_variables); received {type(sources).__name__}: "
                            f"{sources!r:.200}")
        grads = self.gradient(target, list(sources), output_gradients=output_gradients,
                              unconnected_gradients=unconnected_gradients)
        local_ids = self._reducer._local_ids()
        local = [g for g, s in zip(grads, sources) if id(s) in local_ids]
        shared = [g for g, s in zip(grads, sources) if id(s) not in local_ids]
        return local, shared

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        return self._tape.__exit__(exc_type, exc_value, traceback)

    def __getattr__(self, name):
        return getattr(self._tape, name)
