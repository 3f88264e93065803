"""SyncBatchNormalization at any world size, with Keras 3 or (TF_USE_LEGACY_KERAS=1) tf_keras.

The reference is always computed locally, without communication: Keras' own
BatchNormalization in one process on the concatenation of every rank's batch. Shards differ in
size between ranks (rank r has r + 2 rows) so that a per-rank average of means would fail.
Inputs have a mean of 100 next to a spread of 0.5 to 2, so the outputs agree to about one
float32 rounding of 100 divided by the spread (atol 1e-4); the E[x^2] - E[x]^2 formula would
be off by ~1e-3.
"""

import os
import shutil
import tempfile
import warnings

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import USES_TF_KERAS, keras
from model_styles import seeded, sequential
from test_optimizer import _pretend_a_gpu, assert_identical_on_all_ranks

pytestmark = [pytest.mark.keras, pytest.mark.sizes]  # statistics over the global batch


def _shards(hvd, shape, rows=lambda r: r + 2, offset=100.0, seed=0):
    """(this rank's rows, all ranks' rows, slice of this rank's rows in the whole)."""
    counts = [rows(r) for r in range(hvd.size())]
    rng = np.random.RandomState(seed)
    # A large mean next to the spread: E[x^2] - E[x]^2 in float32 would lose the variance.
    whole = (offset + rng.normal(0, 1, (sum(counts),) + shape) *
             rng.uniform(0.5, 2, shape)).astype("float32")
    start = sum(counts[:hvd.rank()])
    mine = slice(start, start + counts[hvd.rank()])
    return whole[mine], whole, mine


def _pair(hvd, **kwargs):
    """A SyncBatchNormalization and a plain BatchNormalization with the same settings.

    tf_keras' fused kernel (its default for 4-D inputs) updates the moving variance with the
    unbiased batch variance, its unfused path (and its own synchronized=True) with the biased
    one, as Keras 3 does; the reference is the unfused path.
    """
    plain = dict(kwargs, fused=False) if USES_TF_KERAS else kwargs
    return hvd.SyncBatchNormalization(**kwargs), keras.layers.BatchNormalization(**plain)


@pytest.mark.parametrize("shape,axis", [((3,), -1), ((4, 5, 3), -1), ((3, 4, 5), 1)],
                         ids=["dense", "nhwc", "nchw"])
def test_training_call_normalizes_with_the_global_batch_statistics(hvd, shape, axis):
    mine, whole, rows = _shards(hvd, shape)
    sync, plain = _pair(hvd, axis=axis, momentum=0.9)
    out = sync(mine, training=True).numpy()
    expected = plain(whole, training=True).numpy()
    np.testing.assert_allclose(out, expected[rows], atol=1e-4, rtol=0)
    for name in ("moving_mean", "moving_variance"):
        np.testing.assert_allclose(getattr(sync, name).numpy(), getattr(plain, name).numpy(),
                                   rtol=1e-5, atol=0, err_msg=name)
    assert_identical_on_all_ranks(hvd, [sync.moving_mean.numpy(), sync.moving_variance.numpy()],
                                  f"sync_bn.stats.{len(shape)}.{axis}")


def test_inference_uses_the_moving_statistics_without_communicating(hvd):
    # Each rank infers on a different number of rows (rank 0 on none at all): a collective
    # here would stall or fail.
    mine = np.ones((hvd.rank(), 3), np.float32)
    sync, plain = _pair(hvd)
    np.testing.assert_array_equal(sync(mine, training=False).numpy(),
                                  plain(mine, training=False).numpy())


def test_masked_positions_are_left_out_of_the_statistics(hvd):
    mine, whole, rows = _shards(hvd, (4, 3), seed=1)
    mask = np.random.RandomState(2).uniform(size=whole.shape[:2]) > 0.3
    sync, plain = _pair(hvd)
    out = sync(mine, training=True, mask=mask[rows]).numpy()
    expected = plain(whole, training=True, mask=mask).numpy()
    np.testing.assert_allclose(out, expected[rows], atol=1e-4, rtol=0)
    np.testing.assert_allclose(sync.moving_variance.numpy(), plain.moving_variance.numpy(),
                               rtol=1e-5)


def test_a_rank_with_an_empty_batch_contributes_nothing(hvd):
    mine, whole, rows = _shards(hvd, (3,), rows=lambda r: 0 if r == 1 else 3, seed=3)
    sync, plain = _pair(hvd)
    out = sync(mine, training=True).numpy()
    assert out.shape == mine.shape
    plain(whole, training=True)
    np.testing.assert_allclose(sync.moving_mean.numpy(), plain.moving_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(sync.moving_variance.numpy(), plain.moving_variance.numpy(),
                               rtol=1e-5)


def test_a_layer_shared_by_two_inputs_in_one_step(hvd):
    a_mine, a_whole, rows = _shards(hvd, (3,), seed=4)
    b_mine, b_whole, _ = _shards(hvd, (3,), offset=-5.0, seed=5)
    sync = hvd.SyncBatchNormalization()
    plain = keras.layers.BatchNormalization()

    @tf.function
    def both(layer, a, b):
        return layer(a, training=True), layer(b, training=True)

    out_a, out_b = both(sync, tf.constant(a_mine), tf.constant(b_mine))
    exp_a, exp_b = plain(a_whole, training=True), plain(b_whole, training=True)
    np.testing.assert_allclose(out_a.numpy(), exp_a.numpy()[rows], atol=1e-4, rtol=0)
    np.testing.assert_allclose(out_b.numpy(), exp_b.numpy()[rows], atol=1e-4, rtol=0)


def _model(bn, seed=0, style="input"):
    # No bias before the normalization: its gradient is zero up to rounding, which Adam's
    # step would blow up to full size (in the reference as much as here).
    init = [seeded(10 * seed + i, 0.5, 1.5) for i in range(7)]
    return sequential(style, (3,), [
        keras.layers.Dense(4, use_bias=False, kernel_initializer=init[0]),
        bn(gamma_initializer=init[1], beta_initializer=init[2], moving_mean_initializer=init[3],
           moving_variance_initializer=init[4]),
        keras.layers.Activation("tanh"),
        keras.layers.Dense(1, kernel_initializer=init[5], bias_initializer=init[6])])


@pytest.mark.parametrize("kind,style", [("sgd", "input"), ("adam", "deferred")])
def test_fit_equals_one_process_with_the_global_batch(hvd, kind, style):
    """Gradients flow through the statistics' collective: N ranks with batch B train like one
    process with batch N*B, moving statistics included, bit-identical on every rank."""
    steps, batch, n, r = 3, 4, hvd.size(), hvd.rank()
    rng = np.random.RandomState(6)
    x = rng.normal(2.0, 1.0, (steps, n, batch, 3)).astype("float32")
    y = np.sin(x).sum(-1, keepdims=True).astype("float32")
    make = {"sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
            "adam": lambda: keras.optimizers.Adam(0.05)}[kind]

    model = _model(hvd.SyncBatchNormalization, style=style)
    model.compile(optimizer=hvd.DistributedOptimizer(make()), loss="mse")
    model.fit(x[:, r].reshape(-1, 3), y[:, r].reshape(-1, 1), batch_size=batch, shuffle=False,
              epochs=1, verbose=0)

    reference = _model(keras.layers.BatchNormalization)
    optimizer, loss_fn = make(), keras.losses.MeanSquaredError()
    for s in range(steps):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[s].reshape(-1, 1), reference(x[s].reshape(-1, 3), training=True))
        grads = tape.gradient(loss, reference.trainable_variables)
        optimizer.apply_gradients(zip(grads, reference.trainable_variables))
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert_identical_on_all_ranks(hvd, model.get_weights(), f"sync_bn.fit.{kind}")


def test_config_round_trip_and_saved_model_reload(hvd):
    layer = hvd.SyncBatchNormalization(momentum=0.8, epsilon=1e-4, synchronized=True)
    config = layer.get_config()
    assert "synchronized" not in config
    again = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(again) is hvd.SyncBatchNormalization
    assert again.get_config() == config

    model = _model(hvd.SyncBatchNormalization)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    rank_dir = tempfile.mkdtemp(prefix=f"khvd_syncbn_r{hvd.rank()}_")
    try:
        path = os.path.join(rank_dir, "model.keras")
        model.save(path)
        reloaded = hvd.load_model(path)
    finally:
        shutil.rmtree(rank_dir, ignore_errors=True)
    assert type(reloaded.layers[1]) is hvd.SyncBatchNormalization
    for got, want in zip(reloaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(USES_TF_KERAS, reason="tf_keras does not turn XLA on by itself")
@pytest.mark.parametrize("jit_compile", ["auto", True])
def test_a_model_with_the_layer_compiles_without_xla(hvd, monkeypatch, jit_compile):
    """supports_jit=False: Keras itself resolves XLA off, so plain fit (no kerashvd callback)
    never builds an XLA step (a step without XLA is what the fit tests above train)."""
    _pretend_a_gpu(monkeypatch)
    model = _model(hvd.SyncBatchNormalization, style="deferred")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse",
                      jit_compile=jit_compile)
    assert model.jit_compile is False
    assert any("Proceeding with `jit_compile=False`" in str(w.message) for w in caught) == (
        jit_compile is True)  # Keras' own notice when XLA was asked for


def test_axis_may_be_given_positionally(hvd):
    assert hvd.SyncBatchNormalization(1).get_config()["axis"] in (1, [1])


@pytest.mark.skipif(not USES_TF_KERAS, reason="fused kernels and ghost batches are tf_keras'")
def test_keras2_refuses_settings_that_cannot_be_synchronized(hvd):
    with pytest.raises(ValueError, match="fused=True"):
        hvd.SyncBatchNormalization(fused=True)
    with pytest.raises(ValueError, match="virtual_batch_size=2"):
        hvd.SyncBatchNormalization(virtual_batch_size=2)
