"""kerashvd.callbacks: public API, broadcast, learning-rate schedules, metric averaging."""

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import keras, optimizer_built
from model_styles import dense, sequential

pytestmark = pytest.mark.keras
CALLBACKS_API = [
    "BestModelCheckpoint",
    "BroadcastGlobalVariablesCallback",
    "Checkpoint",
    "DistributedValidationCallback",
    "JoinCallback",
    "LearningRateScheduleCallback",
    "LearningRateWarmupCallback",
    "MetricAverageCallback",
    "ModelCheckpoint",
    "PREEMPTED_EXIT_CODE",
    "Preempted",
    "PreemptionCallback",
    "StragglerReportCallback",
    "agree_steps_per_epoch",
    "atomic_save",
    "batch_offset",
    "broadcast_model_state",
    "fit_resumable",
    "latest_checkpoint",
    "reduce_metric_states",
    "restore",
    "verbose",
]


def test_public_api_matches_checked_in_list(hvd):
    assert hvd.callbacks.__all__ == CALLBACKS_API
    for name in CALLBACKS_API:
        if isinstance(getattr(hvd.callbacks, name), int):
            continue  # PREEMPTED_EXIT_CODE
        doc = getattr(hvd.callbacks, name).__doc__ or ""
        assert "Example" in doc or name == "Checkpoint", name
    assert "callbacks" in hvd.__all__ and "data" in hvd.__all__
    assert hvd.data.__all__ == ["shard_arrays", "shard_dataset"]


def test_verbose_is_rank_zero_only(hvd):
    assert hvd.callbacks.verbose(1) == (1 if hvd.rank() == 0 else 0)
    assert hvd.callbacks.verbose(2, all_ranks=True) == 2
    assert hvd.callbacks.verbose("auto", root_rank=hvd.size() - 1) == (
        "auto" if hvd.rank() == hvd.size() - 1 else 0)
    with pytest.raises(ValueError, match="level must be"):
        hvd.callbacks.verbose(3)


def _model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(1)])


def _values(variables):
    return [np.array(v.numpy()) for v in variables]


def _assert_same_on_every_rank(hvd, arrays):
    gathered = hvd.allgather_object(arrays)
    for other in gathered[1:]:
        assert len(other) == len(gathered[0])
        for a, b in zip(gathered[0], other):
            np.testing.assert_array_equal(a, b)
    return gathered[0]


def test_broadcast_callback_equalizes_model_and_optimizer_state(hvd):
    model = _model(seed=100 + hvd.rank())
    optimizer = keras.optimizers.Adam(learning_rate=0.01 * (hvd.rank() + 1))
    model.compile(optimizer=optimizer, loss="mse")
    # Make the optimizer state differ between ranks: different step counts and moments.
    optimizer.build(model.trainable_variables)
    for _ in range(hvd.rank() + 1):
        grads = [tf.random.normal(v.shape, seed=hvd.rank()) for v in model.trainable_variables]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    root_state = hvd.broadcast_object(
        (_values(model.variables), _values(optimizer.variables)), root_rank=0)

    # Driven by hand as fit drives it (test_callbacks_fit.py runs it inside fit).
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0)
    callback.set_model(model)
    callback.on_train_begin()
    got = _assert_same_on_every_rank(hvd, _values(model.variables) + _values(optimizer.variables))
    for a, b in zip(got, root_state[0] + root_state[1]):
        np.testing.assert_array_equal(a, b)
    assert int(optimizer.iterations.numpy()) == 1  # rank 0's step count
    assert float(optimizer.learning_rate.numpy()) == pytest.approx(0.01)


def test_broadcast_callback_builds_an_unbuilt_optimizer(hvd):
    model = _model(seed=200 + hvd.rank())
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    assert not optimizer_built(model.optimizer)
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=hvd.size() - 1)
    callback.set_model(model)
    callback.on_train_begin()
    assert optimizer_built(model.optimizer)
    _assert_same_on_every_rank(hvd, _values(model.variables) + _values(model.optimizer.variables))
    with pytest.raises(ValueError, match="root_rank"):
        hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=-1)


def test_broadcast_callback_with_a_plain_optimizer_and_a_lazily_built_model(hvd):
    """No DistributedOptimizer to broadcast inside the first step: the broadcast follows the
    first batch (Horovod's rule), so every rank continues from rank 0's state after step 1.
    With the same data on every rank, that is rank 0 training alone."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)

    def train(model):
        model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
        model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        return model.get_weights() + [v.numpy() for v in model.optimizer.variables]

    got = train(sequential("deferred", (3,), [dense(4, 10 * hvd.rank(), activation="tanh"),
                                         dense(1, 10 * hvd.rank() + 5)]))
    want = train(sequential("input", (3,), [dense(4, 0, activation="tanh"), dense(1, 5)]))
    _assert_same_on_every_rank(hvd, got)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_broadcast_model_state_of_an_unbuilt_model_fails_on_every_rank(hvd):
    """Rank 0's model is built, the last rank's is not: every rank raises, naming it."""
    last = hvd.size() - 1
    model = sequential("deferred" if hvd.rank() == last else "input", (3,), [dense(2, 0)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    with pytest.raises(ValueError, match=rf"no weights yet on rank\(s\) \[{last}\].*keras\.Input"):
        hvd.callbacks.broadcast_model_state(model, name="test.unbuilt")
    assert not optimizer_built(model.optimizer)  # not built on an empty variable list


class _LearningRates(keras.callbacks.Callback):
    """Records (epoch, batch, lr) when each batch starts (after the schedule callbacks)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.seen.append((self.epoch, batch, float(self.model.optimizer.learning_rate.numpy())))


def _fit_tiny(callbacks, optimizer, epochs, samples=12, batch_size=4, seed=0):
    model = _model(seed)
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, 3)).astype(np.float32)
    y = rng.normal(size=(samples, 1)).astype(np.float32)
    return model, model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0,
                            shuffle=False, callbacks=callbacks)


def test_warmup_follows_the_horovod_formula_per_batch(hvd):
    initial_lr, warmup, steps = 0.4, 2, 3
    recorder = _LearningRates()
    warmup_cb = hvd.callbacks.LearningRateWarmupCallback(initial_lr, warmup_epochs=warmup)
    _, history = _fit_tiny([warmup_cb, recorder], keras.optimizers.SGD(0.05, momentum=0.9), epochs=3)
    n = hvd.size()
    assert warmup_cb.steps_per_epoch == steps  # inferred from fit's params
    assert len(recorder.seen) == 3 * steps
    for epoch, batch, lr in recorder.seen:
        e = min(epoch + (batch + 1) / steps, warmup)  # after warmup the lr stays put
        want = initial_lr / n * (e * (n - 1) / warmup + 1)
        assert lr == pytest.approx(want, rel=1e-6), (epoch, batch)
    assert recorder.seen[-1][2] == pytest.approx(initial_lr, rel=1e-6)
    assert history.history["learning_rate"][-1] == pytest.approx(initial_lr, rel=1e-6)


def _drive(callbacks, model, epochs, steps):
    """Runs the callbacks' hooks as fit would, without training; returns (epoch, batch, lr)."""
    seen = []
    for callback in callbacks:
        callback.set_model(model)
        callback.set_params({"epochs": epochs, "steps": steps, "verbose": 0})
        callback.on_train_begin()
    for epoch in range(epochs):
        for callback in callbacks:
            callback.on_epoch_begin(epoch)
        for batch in range(steps):
            for callback in callbacks:
                callback.on_train_batch_begin(batch)
            seen.append((epoch, batch, float(model.optimizer.learning_rate.numpy())))
            for callback in callbacks:
                callback.on_train_batch_end(batch)
        logs = {}
        for callback in callbacks:
            callback.on_epoch_end(epoch, logs)
        assert logs["learning_rate"] == seen[-1][2]
    return seen


def test_schedule_staircase_constant_and_callable(hvd):
    model = _model(seed=0)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    callbacks = [
        hvd.callbacks.LearningRateScheduleCallback(0.2, multiplier=lambda e: 0.5 ** e, end_epoch=2),
        hvd.callbacks.LearningRateScheduleCallback(0.2, multiplier=0.1, start_epoch=3),
    ]
    want = {0: 0.2, 1: 0.1, 2: 0.1, 3: 0.02}  # epoch 2: outside both ranges, left alone
    for epoch, batch, lr in _drive(callbacks, model, epochs=4, steps=2):
        assert lr == pytest.approx(want[epoch], rel=1e-6), (epoch, batch)


def test_schedule_non_staircase_fractional_epochs(hvd):
    model = _model(seed=0)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    callback = hvd.callbacks.LearningRateScheduleCallback(
        0.3, multiplier=lambda e: 1.0 / (1.0 + e), start_epoch=1, staircase=False)
    for epoch, batch, lr in _drive([callback], model, epochs=3, steps=4):
        want = 0.05 if epoch < 1 else 0.3 / (1.0 + epoch + batch / 4)
        assert lr == pytest.approx(want, rel=1e-6), (epoch, batch)


def test_schedule_non_staircase_needs_steps_and_validates(hvd):
    with pytest.raises(ValueError, match="initial_lr"):
        hvd.callbacks.LearningRateScheduleCallback(0.0, multiplier=1.0)
    with pytest.raises(ValueError, match="end_epoch"):
        hvd.callbacks.LearningRateScheduleCallback(0.1, multiplier=1.0, start_epoch=2, end_epoch=2)
    with pytest.raises(ValueError, match="warmup_epochs"):
        hvd.callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=0)
    callback = hvd.callbacks.LearningRateScheduleCallback(0.1, multiplier=lambda e: 1.0,
                                                          staircase=False)
    callback.set_params({"epochs": 1, "steps": None})
    with pytest.raises(ValueError, match="steps_per_epoch"):
        callback.on_train_begin()


def _linear_gradient_model():
    """w starts at 5; loss = mean(w * x) with x = 1, so every step's gradient is exactly 1."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer=keras.initializers.Constant(5.0))])
    return model


@pytest.mark.parametrize("correction", [True, False])
def test_momentum_correction_matches_goyal_update(hvd, correction):
    momentum, base_lr, steps, epochs = 0.9, 0.1, 2, 2
    model = _linear_gradient_model()
    model.compile(optimizer=keras.optimizers.SGD(base_lr, momentum=momentum),
                  loss=lambda y_true, y_pred: tf.reduce_mean(y_pred))
    schedule = hvd.callbacks.LearningRateScheduleCallback(
        base_lr, multiplier=lambda e: 1.0 + e, staircase=False, momentum_correction=correction)
    x = np.ones((steps, 1), np.float32)
    model.fit(x, x, batch_size=1, epochs=epochs, verbose=0, shuffle=False, callbacks=[schedule])

    w, m, lr_old = 5.0, 0.0, base_lr
    for epoch in range(epochs):
        for batch in range(steps):
            lr = base_lr * (1.0 + epoch + batch / steps)
            ratio = lr / lr_old if correction else 1.0
            m = momentum * ratio * m - lr * 1.0
            w += m
            lr_old = lr
    got = float(model.trainable_variables[0].numpy()[0, 0])
    assert got == pytest.approx(w, rel=1e-5)
    # Correction restores nothing afterwards: the optimizer's momentum is unchanged.
    assert model.optimizer.momentum == momentum


def test_metric_average_in_place_on_numeric_values(hvd):
    n, r = hvd.size(), hvd.rank()
    logs = {"loss": float(r + 1), "acc": np.float32(2 * r), "steps": 3, "tag": "x",
            "t": tf.constant(float(r))}
    hvd.callbacks.MetricAverageCallback().on_epoch_end(0, logs)
    assert logs["loss"] == pytest.approx((n + 1) / 2)
    assert logs["acc"] == pytest.approx(n - 1)
    assert logs["steps"] == 3 and logs["tag"] == "x"
    assert logs["t"] == pytest.approx((n - 1) / 2)
    assert hvd.allgather_object(logs) == [logs] * n


def test_metric_average_over_the_ranks_that_have_a_metric(hvd):
    """Ranks log different names: each is averaged over the ranks that logged it."""
    n, r = hvd.size(), hvd.rank()
    logs = {"loss": float(r)} if r % 2 == 0 else {"val_loss": float(r), "tag": "odd"}
    hvd.callbacks.MetricAverageCallback().on_epoch_end(5, logs)
    even, odd = list(range(0, n, 2)), list(range(1, n, 2))
    assert logs["loss"] == pytest.approx(np.mean(even))
    if odd:
        assert logs["val_loss"] == pytest.approx(np.mean(odd))
    assert sorted(k for k in logs if k != "tag") == (["loss", "val_loss"] if odd else ["loss"])
    assert ("tag" in logs) == (r % 2 == 1)
    empty = {}
    hvd.callbacks.MetricAverageCallback().on_epoch_end(6, empty)
    assert empty == {}


class _Logs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(dict(logs))


def test_metric_average_in_fit_gives_identical_logs(hvd):
    before, after = _Logs(), _Logs()
    model = _model(seed=7)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", metrics=["mae"])
    rng = np.random.default_rng(hvd.rank())  # different data on every rank
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0,
                        callbacks=[before, hvd.callbacks.MetricAverageCallback(), after])
    all_before = hvd.allgather_object(before.epochs)
    assert hvd.allgather_object(after.epochs) == [after.epochs] * hvd.size()
    assert hvd.allgather_object(history.history) == [history.history] * hvd.size()
    for epoch, logs in enumerate(after.epochs):
        assert sorted(logs) == ["loss", "mae"]
        for key, value in logs.items():
            want = np.mean([rank_logs[epoch][key] for rank_logs in all_before])
            assert value == pytest.approx(want, rel=1e-12)
