"""Mixed precision with DistributedOptimizer: every rank skips the same non-finite steps."""

import contextlib

import numpy as np
import tensorflow as tf
import pytest

from kerashvd.training.keras_compat import USES_TF_KERAS, keras
from test_optimizer import BATCH, assert_identical_on_all_ranks, make_data, make_model

pytestmark = pytest.mark.keras


def plain_iterations():
    """``iterations`` of a plain loss-scale optimizer (one process, no kerashvd) after a step
    with an inf gradient and after a finite one: Keras releases differ (tf_keras counts the
    skipped step, Keras 3.4+ does not, and before 3.4 its own counter never moves)."""
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    variable = (keras.Variable if hasattr(keras, "Variable") else tf.Variable)([1.0])
    counts = []
    for gradient in (np.inf, 1.0):
        optimizer.apply_gradients([(tf.constant([gradient]), variable)])
        counts.append(int(np.asarray(optimizer.iterations)))
    return counts


def loss_scale(optimizer):
    """The current loss scale (Keras 3: ``dynamic_scale``; tf_keras: ``loss_scale``)."""
    return float(getattr(optimizer, "loss_scale" if USES_TF_KERAS else "dynamic_scale").numpy())


@contextlib.contextmanager
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_inf_on_one_rank_makes_every_rank_skip_the_step(hvd):
    x, y, _, _ = make_data(hvd, steps=2)
    if hvd.rank() == 0:
        x[0, 0] = np.inf  # only rank 0's first batch: its gradients are not finite
    with mixed_float16():
        start = make_model().get_weights()
        model = make_model(style="deferred")  # built (in mixed precision) at the first step
        opt = hvd.DistributedOptimizer(keras.mixed_precision.LossScaleOptimizer(
            keras.optimizers.SGD(0.05), initial_scale=2.0 ** 10))
        model.compile(optimizer=opt, loss="mse")
        assert model.optimizer is opt  # compile() did not add a LossScaleOptimizer outside
        assert isinstance(opt, keras.mixed_precision.LossScaleOptimizer)

        model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, shuffle=False, verbose=0)
        after_inf = (int(np.asarray(opt.iterations)), loss_scale(opt), model.get_weights())
        model.fit(x[BATCH:], y[BATCH:], batch_size=BATCH, shuffle=False, verbose=0)
        after_finite = (int(np.asarray(opt.iterations)), loss_scale(opt))
    # (Asserted after both steps: a rank must not stop issuing collectives early.)
    # Step 1 was skipped on every rank: no update, the loss scale halved everywhere.
    after_inf_count, after_finite_count = plain_iterations()
    assert after_inf[:2] == (after_inf_count, 2.0 ** 9)
    for w, s in zip(after_inf[2], start):
        assert np.array_equal(w, s)
    # Step 2 was applied on every rank.
    assert after_finite == (after_finite_count, 2.0 ** 9)
    weights = model.get_weights()
    assert all(np.isfinite(w).all() for w in weights)
    assert any(not np.array_equal(w, s) for w, s in zip(weights, start))
    assert_identical_on_all_ranks(hvd, weights, "mixed_precision")


def test_loss_scaling_outside_the_allreduce_is_refused(hvd):
    x, y, _, _ = make_data(hvd, steps=1)
    with mixed_float16():
        model = make_model()
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
        # compile() wrapped it: LossScaleOptimizer(DistributedOptimizer(SGD)), the unsafe order.
        assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
        with pytest.raises(ValueError, match=r"DistributedOptimizer\((tf_)?keras\.\w+\."
                                             r"LossScaleOptimizer\(optimizer\)\)"):
            model.fit(x, y, batch_size=BATCH, verbose=0)
