"""Uneven data: ranks with different numbers of batches (JoinCallback, agree_steps_per_epoch).

Rank r gets a different number of training batches (and of validation samples). ``fit`` with
a DistributedOptimizer and JoinCallback must finish every epoch on every rank, validation
included, with bit-identical weights and optimizer state everywhere, and the weights must be
those of the documented semantics: at step s, the sum of the gradients of the ranks that still
have a batch s, divided by size().
"""

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import USES_TF_KERAS, keras
from model_styles import sequential

pytestmark = [pytest.mark.keras, pytest.mark.sizes]  # shards that 3 ranks do not divide evenly

LR, MOMENTUM, BATCH, EPOCHS = 0.05, 0.5, 4, 2


def _train_data(rank):
    """Rank r: 8 + 5r samples, so 2, 4, 5, 6 batches of 4 (last batches partial)."""
    rng = np.random.default_rng(100 + rank)
    n = 8 + 5 * rank
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    return x, y


def _batches(rank):
    x, y = _train_data(rank)
    return [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, len(x), BATCH)]


def _model(seed, style="input"):
    keras.utils.set_random_seed(seed)
    return sequential(style, (3,), [keras.layers.Dense(1)])


def _same_everywhere(hvd, arrays, what):
    gathered = hvd.allgather_object([np.asarray(a) for a in arrays], name=f"uneven.check.{what}")
    for rank, other in enumerate(gathered):
        assert len(other) == len(arrays), what
        for mine, theirs in zip(gathered[0], other):
            np.testing.assert_array_equal(mine, theirs,
                                          err_msg=f"{what}: rank {rank} differs from rank 0")


def _reference_weights(initial, size):
    """Plain-TF replay of what every rank must end with (SGD with momentum, as Keras does)."""
    model = _model(0)
    model.set_weights(initial)
    variables = model.trainable_variables
    velocity = [np.zeros(v.shape, np.float32) for v in variables]
    per_rank = [_batches(r) for r in range(size)]
    for _ in range(EPOCHS):
        for step in range(max(len(b) for b in per_rank)):
            total = [np.zeros(v.shape, np.float32) for v in variables]
            for batches in per_rank:
                if step < len(batches):  # this rank has not joined yet
                    x, y = batches[step]
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_mean(tf.square(model(x) - y))
                    for t, g in zip(total, tape.gradient(loss, variables)):
                        t += g.numpy()
            for v, m, t in zip(variables, velocity, total):
                m *= MOMENTUM
                m -= LR * (t / size)
                v.assign(v.numpy() + m)
    return [v.numpy() for v in variables]


def test_fit_with_uneven_batches_and_join_callback(hvd):
    n, r = hvd.size(), hvd.rank()
    model = _model(10 + r)  # different initial weights: BroadcastGlobalVariablesCallback fixes it
    initial = hvd.broadcast_object(model.get_weights(), root_rank=0, name="uneven.initial")
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=MOMENTUM)),
                  loss="mse", metrics=["mae"])
    x, y = _train_data(r)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    assert int(train.cardinality()) == len(_batches(r))
    rng = np.random.default_rng(7 + r)
    x_val = rng.normal(size=(3 + 2 * r, 3)).astype(np.float32)  # uneven validation shards too
    y_val = rng.normal(size=(3 + 2 * r, 1)).astype(np.float32)
    join = hvd.callbacks.JoinCallback()
    history = model.fit(train, epochs=EPOCHS, validation_data=(x_val, y_val), validation_batch_size=2,
                        callbacks=[join, hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.DistributedValidationCallback(),
                                   hvd.callbacks.MetricAverageCallback()],
                        verbose=0, shuffle=False)

    # Every epoch ran validation on every rank, and the logs agree (MetricAverageCallback).
    assert len(history.history["val_loss"]) == EPOCHS
    assert hvd.allgather_object(history.history, name="uneven.history") == [history.history] * n
    # The rank with the most batches joined last, and everyone ended with its state.
    assert join.last_joined_rank == n - 1
    _same_everywhere(hvd, model.get_weights(), "weights")
    _same_everywhere(hvd, [v.numpy() for v in model.optimizer.variables], "optimizer variables")
    assert int(np.asarray(model.optimizer.iterations)) == EPOCHS * len(_batches(n - 1))
    # The documented semantics: joined ranks contribute zeros, the average divides by size().
    for got, want in zip(model.get_weights(), _reference_weights(initial, n)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)

    # model.evaluate outside fit does not join (there is no epoch to finish).
    model.evaluate(x_val, y_val, verbose=0, callbacks=[join])
    hvd.barrier()


def test_join_callback_with_datasets_of_unknown_size(hvd):
    """Odd ranks' datasets have unknown cardinality: Keras learns where they end from OutOfRange."""
    r = hvd.rank()
    model = _model(20 + r, style="subclassed")  # built, and broadcast, in the first step
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    x, y = _train_data(r)
    train = tf.data.Dataset.from_tensor_slices((x, y))
    if r % 2:
        train = train.filter(lambda *_: True)
    history = model.fit(train.batch(BATCH), epochs=3, verbose=0, shuffle=False,
                        # epoch 1 joins at on_epoch_end, epoch 2 at on_test_begin
                        validation_data=(x[:5], y[:5]), validation_freq=2,
                        callbacks=[hvd.callbacks.JoinCallback(),
                                   hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()])
    assert len(history.history["val_loss"]) == 1
    _same_everywhere(hvd, model.get_weights(), "weights (unknown size)")
    _same_everywhere(hvd, [v.numpy() for v in model.optimizer.variables], "Adam state (unknown size)")


def _skip_unless_keras_fits_an_empty_dataset():
    """Early Keras 3 releases (3.3) fail inside fit on a dataset without batches, alone."""
    plain = keras.Sequential([keras.layers.Dense(1)])
    plain.compile(optimizer="sgd", loss="mse")
    empty = tf.data.Dataset.from_tensor_slices((np.zeros((0, 3), np.float32),
                                                np.zeros((0, 1), np.float32))).batch(2)
    try:
        plain.fit(empty, epochs=1, verbose=0)
    except TypeError as err:
        pytest.skip(f"this Keras' fit fails on an empty dataset by itself ({err})")


def test_join_callback_with_an_empty_shard(hvd):
    """The last rank has no batch at all: it joins at once, and ends with the others' weights.
    The model is a Sequential without keras.Input: Keras 3 still traces the (empty) step
    there, which builds it, so the broadcast inside the first step meets every rank."""
    if USES_TF_KERAS:
        pytest.skip("tf_keras' Model.fit refuses an empty dataset ('Expected input data to be "
                    "non-empty') before any callback runs; documented in JoinCallback")
    _skip_unless_keras_fits_an_empty_dataset()
    n, r = hvd.size(), hvd.rank()
    model = _model(40 + r, style="deferred")
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=MOMENTUM)),
                  loss="mse")
    x, y = _train_data(r)
    if r == n - 1:
        x, y = x[:0], y[:0]
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    join = hvd.callbacks.JoinCallback()
    model.fit(train, epochs=EPOCHS, verbose=0, shuffle=False,
              callbacks=[join, hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    _same_everywhere(hvd, model.get_weights(), "weights (empty shard)")
    _same_everywhere(hvd, [v.numpy() for v in model.optimizer.variables], "optimizer (empty shard)")
    if n > 1:
        assert join.last_joined_rank == n - 2  # the rank with the most batches among the others


def test_agree_steps_per_epoch_returns_the_minimum(hvd):
    n, r = hvd.size(), hvd.rank()
    assert hvd.callbacks.agree_steps_per_epoch(5 + 3 * r) == 5
    assert hvd.callbacks.agree_steps_per_epoch(np.int64(9 - r), name="agree.numpy") == 9 - (n - 1)
    assert hvd.callbacks.agree_steps_per_epoch(0 if r == n - 1 else 4, name="agree.zero") == 0
    assert hvd.callbacks.agree_steps_per_epoch(tf.constant(7 + r, tf.int64), name="agree.tensor") == 7
    for bad in (-1, -2, 1.5, True, "3", None):
        with pytest.raises(ValueError, match="int >= 0"):
            hvd.callbacks.agree_steps_per_epoch(bad)


def test_fit_with_agreed_steps_per_epoch(hvd):
    r = hvd.rank()
    model = _model(30 + r)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss="mse")
    x, y = _train_data(r)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    steps = hvd.callbacks.agree_steps_per_epoch(int(train.cardinality()), name="agree.fit")
    assert steps == 2  # rank 0's 8 samples
    model.fit(train.repeat(), steps_per_epoch=steps, epochs=EPOCHS, verbose=0, shuffle=False,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert int(np.asarray(model.optimizer.iterations)) == EPOCHS * steps
    _same_everywhere(hvd, model.get_weights(), "weights (agreed steps)")


class _LogsBeforeAveraging(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(dict(logs or {}))


def test_metric_average_with_an_empty_shard(hvd):
    """Rank 1 has no training batch: its epoch logs have no loss or mae. MetricAverageCallback
    must not fail on the different metric names; every rank ends with the same logs, each
    metric averaged over the ranks that logged it."""
    if USES_TF_KERAS:
        pytest.skip("tf_keras' Model.fit refuses an empty dataset; documented in JoinCallback")
    n, r = hvd.size(), hvd.rank()
    model = _model(50 + r)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), loss="mse",
                  metrics=["mae"])
    x, y = _train_data(r)
    if r == 1:
        x, y = x[:0], y[:0]
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    before = _LogsBeforeAveraging()
    history = model.fit(train, epochs=EPOCHS, verbose=0, shuffle=False,
                        callbacks=[hvd.callbacks.JoinCallback(),
                                   hvd.callbacks.BroadcastGlobalVariablesCallback(0), before,
                                   hvd.callbacks.MetricAverageCallback()])
    if n > 1:  # the empty rank logged no training metric of its own
        assert "loss" not in hvd.allgather_object(before.epochs, name="uneven.empty.b")[1][0]
    all_before = hvd.allgather_object(before.epochs, name="uneven.empty.before")
    assert hvd.allgather_object(history.history, name="uneven.empty.history") == \
        [history.history] * n
    assert sorted(history.history) == ["loss", "mae"]
    for key, values in history.history.items():
        for epoch, value in enumerate(values):
            have = [logs[epoch][key] for logs in all_before if key in logs[epoch]]
            assert len(have) == n - (n > 1)
            assert value == pytest.approx(np.mean(have), rel=1e-12)
