"""Batch normalization with the statistics of the global batch: all ranks' samples together.

How the statistics are combined (exact for shards of any size, masks included):
1. Each rank computes, per channel, its sample count ``n_r``, its mean ``m_r`` and the sum of
   squared deviations from that mean ``M2_r``, in two passes as ``tf.nn.moments`` does.
2. One allgather gives every rank the ``(n_r, m_r, M2_r)`` of all ranks, in rank order.
3. Every rank combines them the same way (Chan et al.'s parallel variance):
   ``N = sum n_r``, ``mean = sum n_r m_r / N``,
   ``variance = (sum M2_r + sum n_r (m_r - mean)^2) / N``.
   The same data in the same order gives bit-identical statistics on every rank.

This avoids the ``E[x^2] - E[x]^2`` formula, which loses most digits when the mean is large
next to the spread (raw pixel values, activations with an offset), and it weights each rank by
its number of samples. Horovod's ``SyncBatchNormalization`` averages per-rank means with equal
weights, which is wrong when the ranks' batches differ in size (the last batch of an epoch).

The gradient flows through the allgather, summed over the ranks (``scale_gradient`` undoes
the allgather gradient's Horovod-style average), so each rank's backward pass accounts for the
effect of its samples on every rank's normalized outputs, as one process with the global batch
would.
"""

import weakref

import tensorflow as tf

from .. import _private_api
from ..collectives import tensors as collectives
from ..collectives.gradients import scale_gradient
from .keras_compat import USES_TF_KERAS, keras
from ..runtime.world import size

__all__ = ["SyncBatchNormalization"]

# Graph -> {layer name: calls traced in it}: a layer applied twice in one step (a shared
# layer) needs two collective names; a retrace (another graph) starts again at the first name,
# so ranks that retrace a different number of times still agree.
_traced_calls = weakref.WeakKeyDictionary()


def _collective_name(layer_name):
    base = f"SyncBatchNormalization.{layer_name}"
    if tf.executing_eagerly():
        return base  # eager calls complete one after the other
    calls = _traced_calls.setdefault(tf.compat.v1.get_default_graph(), {})
    n = calls.get(layer_name, 0)
    calls[layer_name] = n + 1
    return base if n == 0 else f"{base}.call{n}"


def global_moments(inputs, axes, keepdims=False, mask=None, name="moments"):
    """Mean and (biased) variance over ``axes`` of all ranks' ``inputs`` taken together.

    Args:
        inputs: this rank's tensor; its first dimension (the batch) may differ between ranks.
        axes: the axes reduced over (the batch axis among them); the other axes are channels.
        keepdims: keep the reduced axes as size-1 dimensions.
        mask: optional weights of the shape of ``inputs`` without its last axis (Keras' mask:
            0 or 1 per position), broadcast over the last axis.
        name: the collective's key; the same on every rank.

    Returns:
        ``(mean, variance)``, in ``inputs``' dtype, computed in float32 (float64 for float64
        inputs). With no samples on any rank both are zero.
    """
    rank_ = inputs.shape.rank
    axes = sorted({a % rank_ for a in axes})
    dtype = tf.float64 if inputs.dtype == tf.float64 else tf.float32
    x = tf.cast(inputs, dtype)
    total = tf.reduce_sum(x if mask is None else x * _weights(mask, x), axes, keepdims=True)
    if mask is None:
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), dtype) * tf.ones_like(total)
    else:
        count = tf.reduce_sum(_weights(mask, x) * tf.ones_like(x), axes, keepdims=True)
    mean = tf.math.divide_no_nan(total, count)
    # d(M2)/d(mean) is zero at the mean, so its gradient need not flow through it.
    squares = tf.square(x - tf.stop_gradient(mean))
    m2 = tf.reduce_sum(squares if mask is None else squares * _weights(mask, x), axes,
                       keepdims=True)
    stats = tf.stack([tf.reshape(count, [-1]), tf.reshape(mean, [-1]), tf.reshape(m2, [-1])])
    gathered = stats[None] if size() == 1 else scale_gradient(
        collectives.allgather(stats[None], name=name), size())
    counts, means, m2s = gathered[:, 0], gathered[:, 1], gathered[:, 2]
    n = tf.reduce_sum(counts, 0)
    g_mean = tf.math.divide_no_nan(tf.reduce_sum(counts * means, 0), n)
    g_m2 = tf.reduce_sum(m2s, 0) + tf.reduce_sum(counts * tf.square(means - g_mean), 0)
    g_var = tf.math.divide_no_nan(g_m2, n)
    shape = tf.shape(total)
    g_mean, g_var = tf.reshape(g_mean, shape), tf.reshape(g_var, shape)
    if not keepdims:
        g_mean, g_var = tf.squeeze(g_mean, axes), tf.squeeze(g_var, axes)
    return tf.cast(g_mean, inputs.dtype), tf.cast(g_var, inputs.dtype)


def _weights(mask, x):
    return tf.expand_dims(tf.cast(mask, x.dtype), -1)


_DOC = """Batch normalization over the global batch: the samples of all ranks together.

    A drop-in for ``keras.layers.BatchNormalization`` (same arguments) whose training-time
    mean and variance are those of the union of every rank's batch, as if one process
    normalized the whole global batch: use it when the per-rank batch is too small for good
    statistics (detection, segmentation, large models). Inference uses the moving statistics
    and communicates nothing; every rank updates them identically.

    Each training call costs one small allgather per layer (three floats per channel per
    rank) in the forward pass and two collectives in the backward pass. Ranks may have
    batches of different sizes, even empty ones, and Keras masks are honoured: the result
    is exact, weighted by sample count (Horovod's version weights ranks equally).

    Differences from ``keras.layers.BatchNormalization``: ``synchronized`` is accepted and
    ignored (this layer always is); with Keras 2 (tf_keras) ``fused=True`` and
    ``virtual_batch_size`` are refused, since a fused kernel computes its statistics
    itself and ghost batches are per-rank by definition. The moving variance is updated
    with the biased batch variance, as Keras 3 and tf_keras' unfused path do (tf_keras'
    fused kernel, its default for 4-D inputs, uses the unbiased one).

    XLA: with Keras 3 the layer has ``supports_jit = False``, so Keras compiles a model
    holding it without XLA (``jit_compile="auto"`` resolves to False; ``jit_compile=True``
    is turned off with Keras' notice "Proceeding with jit_compile=False").

    Requires ``kerashvd.init()`` before the first training call; registered as a Keras
    serializable (``kerashvd>SyncBatchNormalization``), so saved models load again.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> layer = hvd.SyncBatchNormalization()
    >>> y = layer(tf.random.normal([8, 4]), training=True)  # global-batch statistics
    """


def _drop_synchronized(kwargs):
    kwargs.pop("synchronized", None)
    return kwargs


# The layer overrides the private method of Keras' BatchNormalization that computes the
# batch statistics; this raises PrivateApiError naming it where it is gone.
_private_api.batch_norm_statistics_method(keras, USES_TF_KERAS)

if USES_TF_KERAS:

    @keras.saving.register_keras_serializable(package="kerashvd", name="SyncBatchNormalization")
    class SyncBatchNormalization(keras.layers.BatchNormalization):
        __doc__ = _DOC

        def __init__(self, *args, **kwargs):
            if kwargs.get("fused"):
                raise ValueError("SyncBatchNormalization computes its own statistics, which a "
                                 "fused kernel cannot use; leave fused unset (or False). "
                                 "Received: fused=True")
            if kwargs.get("virtual_batch_size") is not None:
                raise ValueError("SyncBatchNormalization normalizes over the global batch; "
                                 "virtual (ghost) batches are per rank and cannot be combined "
                                 "with it. Use keras.layers.BatchNormalization for them. "
                                 f"Received: virtual_batch_size={kwargs['virtual_batch_size']}")
            kwargs["fused"] = False
            super().__init__(*args, **_drop_synchronized(kwargs))

        def _calculate_mean_and_var(self, inputs, reduction_axes, keep_dims, mask=None):
            return global_moments(inputs, reduction_axes, keep_dims, mask,
                                  _collective_name(self.name))

        def get_config(self):
            """Keras' config of the layer, without ``synchronized`` (this layer always is)."""
            return _drop_synchronized(super().get_config())

else:

    @keras.saving.register_keras_serializable(package="kerashvd", name="SyncBatchNormalization")
    class SyncBatchNormalization(keras.layers.BatchNormalization):
        __doc__ = _DOC

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **_drop_synchronized(kwargs))
            # Keras' knob: a model holding this layer resolves jit_compile="auto" to False
            # and turns jit_compile=True off with a notice (the allgather has no XLA kernel).
            self.supports_jit = False

        def _moments(self, inputs, mask):
            axes = _private_api.batch_norm_reduction_axes(self)
            return global_moments(inputs, axes, False, mask, _collective_name(self.name))

        def get_config(self):
            """Keras' config of the layer, without ``synchronized`` (this layer always is)."""
            return _drop_synchronized(super().get_config())
