"""Local gradient aggregation: ``backward_passes_per_step`` for the distributed optimizers.

Every call adds this rank's gradients to local accumulators and counts; every k-th call (the
counter is local but advances identically on every rank, since every rank calls the optimizer
once per batch) the accumulated sums (divided by k when ``average_aggregated_gradients``) are
reduced across ranks and applied, and the accumulators are reset. The reduce and the apply sit
in the true branch of a ``tf.cond``, so the other k-1 calls issue no collective at all.

The accumulators are transient, like Horovod's: they are not optimizer variables, are not
saved, and start at zero after a reload.
"""

import tensorflow as tf


class LocalAggregator:
    """Accumulates gradients locally and runs ``apply_fn`` on every k-th call.

    Args:
        backward_passes_per_step: k, an int >= 1.
        average_aggregated_gradients: divide the sum of the k gradients by k.
    """

    def __init__(self, backward_passes_per_step, average_aggregated_gradients):
        self.k = backward_passes_per_step
        self.average = bool(average_aggregated_gradients)
        self._accumulators = None
        self._counter = None

    @property
    def built(self):
        return self._accumulators is not None

    def build(self, variables):
        """Creates a zero accumulator per variable and the call counter (once)."""
        if self.built:
            return
        with tf.init_scope():
            self._counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name="hvd_aggregation_counter")
            self._accumulators = [
                tf.Variable(tf.zeros(v.shape, tf.as_dtype(v.dtype)), trainable=False,
                            name="hvd_aggregated_gradient")
                for v in variables]

    @tf.autograph.experimental.do_not_convert
    def __call__(self, grads, apply_fn):
        """Adds ``grads`` (None ones are skipped) and calls ``apply_fn(sums)`` every k-th call.

        ``sums`` has None where ``grads`` has None. Returns nothing.
        """
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            self._accumulators[i].assign_add(tf.cast(tf.convert_to_tensor(grads[i]),
                                                     self._accumulators[i].dtype))
        count = self._counter.assign_add(1)

        def communicate():
            sums = [None] * len(grads)
            for i in present:
                value = self._accumulators[i].read_value()
                if self.average:
                    value = value / tf.cast(self.k, value.dtype)
                sums[i] = value
            apply_fn(sums)
            for i in present:
                self._accumulators[i].assign(tf.zeros_like(self._accumulators[i]))

        tf.cond(tf.equal(count % self.k, 0), communicate, lambda: None)
