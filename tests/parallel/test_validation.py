"""Exact distributed validation: uneven shards give the single-process metrics."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import USES_TF_KERAS, keras
from model_styles import sequential

pytestmark = [pytest.mark.keras, pytest.mark.sizes]  # exact metrics over uneven shards
NUM_SAMPLES = 23  # does not divide by 2, 3 or 4
RTOL = 1e-6


def _data():
    rng = np.random.default_rng(42)
    x = rng.normal(size=(NUM_SAMPLES, 4)).astype(np.float32)
    y = (rng.random((NUM_SAMPLES, 1)) < 0.4).astype(np.float32)
    return x, y


def _uneven_shard(hvd, *arrays):
    """Rank r gets a contiguous slice of size ~ (r + 1): shards differ a lot in size."""
    weights = np.arange(1, hvd.size() + 1, dtype=np.float64)
    bounds = np.round(np.concatenate([[0], np.cumsum(weights)]) / weights.sum() * NUM_SAMPLES)
    start, stop = int(bounds[hvd.rank()]), int(bounds[hvd.rank() + 1])
    assert stop > start
    return tuple(a[start:stop] for a in arrays)


def _model(hvd, run_eagerly=False, style="input"):
    keras.utils.set_random_seed(3)  # a lazily built model draws the same weights on every rank
    model = sequential(style, (4,), [keras.layers.Dense(3, activation="tanh"),
                                     keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy",
                  metrics=["accuracy", keras.metrics.AUC(name="auc"),
                           keras.metrics.Precision(name="precision")],
                  run_eagerly=run_eagerly)
    if style == "input":
        hvd.callbacks.broadcast_model_state(model, name="test_validation.model")
    return model


def _add_state(metric, name, aggregation="sum"):
    """A scalar metric state variable combined over replicas by ``aggregation``."""
    if USES_TF_KERAS:  # tf_keras: add_weight with a tf.VariableAggregation
        return metric.add_weight(name=name, shape=(), initializer="zeros",
                                 aggregation=getattr(tf.VariableAggregation, aggregation.upper()))
    return metric.add_variable((), "zeros", name=name, aggregation=aggregation)


def _assert_close(got, want):
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=RTOL, abs=1e-7), key


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_evaluate_on_uneven_shards_equals_single_process(hvd, run_eagerly):
    x, y = _data()
    model = _model(hvd, run_eagerly)
    # One process, the whole set (no collectives: every rank computes it locally).
    want = model.evaluate(x, y, batch_size=5, verbose=0, return_dict=True)
    test_function = model.test_function
    xs, ys = _uneven_shard(hvd, x, y)
    exact = hvd.callbacks.DistributedValidationCallback()
    got = model.evaluate(xs, ys, batch_size=3, verbose=0, return_dict=True, callbacks=[exact])
    _assert_close(got, want)
    # The wrappers are gone after evaluate.
    assert "get_metrics_result" not in model.__dict__ and model.test_function is test_function
    assert hvd.allgather_object(got) == [got] * hvd.size()
    if run_eagerly:
        return
    # The list form, and a second evaluation with the same callback.
    got_list = model.evaluate(xs, ys, batch_size=4, verbose=0, callbacks=[exact])
    assert got_list == pytest.approx(
        model.evaluate(x, y, batch_size=7, verbose=0), rel=RTOL, abs=1e-7)


def test_evaluate_unknown_size_with_an_empty_shard_on_one_rank(hvd):
    """Datasets of unknown size work; a rank with no batch still joins the reduction."""
    x, y = _data()
    model = _model(hvd)
    want = model.evaluate(x, y, batch_size=NUM_SAMPLES, verbose=0, return_dict=True)
    last = hvd.size() - 1
    if hvd.rank() == last and hvd.size() > 1:
        xs, ys = x[:0], y[:0]
    else:  # the other ranks split the whole set, unevenly (strided, then batches of 4)
        others = max(hvd.size() - 1, 1)
        xs, ys = x[hvd.rank()::others], y[hvd.rank()::others]
    # filter() hides the size: Keras then runs until the iterator fails mid-batch.
    dataset = tf.data.Dataset.from_tensor_slices((xs, ys)).filter(lambda a, b: True).batch(4)
    assert dataset.cardinality() == tf.data.UNKNOWN_CARDINALITY
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras warns that the empty input "ran out of data"
        got = model.evaluate(dataset, verbose=0, return_dict=True,
                             callbacks=[hvd.callbacks.DistributedValidationCallback()])
    if hvd.rank() == last and hvd.size() > 1:
        assert got == {}  # Keras returns no logs for an empty loop
    else:
        _assert_close(got, want)


class _Weights(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.per_epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.per_epoch.append(self.model.get_weights())


def test_fit_val_metrics_on_uneven_shards_equal_single_process(hvd):
    x, y = _data()
    model = _model(hvd, style="deferred")  # metrics and weights built inside fit
    weights = _Weights()
    xs, ys = _uneven_shard(hvd, x, y)
    # Training data and order are the same on every rank, so the weights stay equal.
    history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                        validation_data=(xs, ys), validation_batch_size=3,
                        callbacks=[hvd.callbacks.DistributedValidationCallback(),
                                   hvd.callbacks.MetricAverageCallback(), weights])
    gathered = hvd.allgather_object(weights.per_epoch[-1])
    for other in gathered[1:]:
        for a, b in zip(gathered[0], other):
            np.testing.assert_array_equal(a, b)
    for epoch, epoch_weights in enumerate(weights.per_epoch):
        model.set_weights(epoch_weights)
        want = model.evaluate(x, y, batch_size=NUM_SAMPLES, verbose=0, return_dict=True)
        got = {key[len("val_"):]: values[epoch] for key, values in history.history.items()
               if key.startswith("val_")}
        _assert_close(got, want)


def test_reduce_metric_states_by_aggregation(hvd):
    n, r = hvd.size(), hvd.rank()

    class Custom(keras.metrics.Metric):
        def __init__(self):
            super().__init__(name="custom")
            self.total = _add_state(self, "total")  # aggregation="sum"
            self.scale = _add_state(self, "scale", "mean")
            self.first = _add_state(self, "first", "only_first_replica")

        def update_state(self, value):
            self.total.assign_add(value)
            self.scale.assign(value)
            self.first.assign(value)

        def result(self):
            return self.total * self.scale + self.first

    mean, custom = keras.metrics.Mean(), Custom()
    mean.update_state([float(r)] * (r + 1))  # rank r contributes r + 1 copies of r
    custom.update_state(float(r + 1))
    hvd.callbacks.reduce_metric_states([mean, custom, mean], name="test_reduce_metric_states")
    values = [float(v) for v in range(n) for _ in range(v + 1)]
    assert float(mean.result()) == pytest.approx(np.mean(values), rel=RTOL)
    assert float(custom.total.numpy()) == pytest.approx(n * (n + 1) / 2)
    assert float(custom.scale.numpy()) == pytest.approx((n + 1) / 2)
    assert float(custom.first.numpy()) == 1.0


def test_reduce_metric_states_rejects_unknown_aggregation(hvd):
    class Odd(keras.metrics.Metric):
        def __init__(self):
            super().__init__(name="odd")
            self.state = _add_state(self, "state", "none")

        def update_state(self, value):
            self.state.assign(value)

        def result(self):
            return self.state

    try:
        odd = Odd()
    except ValueError as err:  # Keras before 3.4 has no aggregation="none" variables
        pytest.skip(f"this Keras refuses the variable itself: {err}")
    with pytest.raises(ValueError, match="aggregation is 'none'"):
        hvd.callbacks.reduce_metric_states([odd])
