"""DistributedOptimizer at any world size, with Keras 3 or (TF_USE_LEGACY_KERAS=1) tf_keras.

The reference for every equivalence test is computed locally on each rank, without
communication: one process training the same model on the concatenation of all ranks'
batches with the plain optimizer. Helpers here are imported by the other optimizer tests.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import USES_TF_KERAS, keras
from model_styles import dense, sequential

pytestmark = pytest.mark.keras
STEPS, BATCH = 4, 2


# -- helpers shared with test_optimizer_precision, test_tape and test_saving ---------------
def make_model(inputs=3, hidden=4, seed=0, dtype=None, style="input"):
    """A tiny MLP of ``style`` (see model_styles) with seeded weights, the same on every rank."""
    return sequential(style, (inputs,), [dense(hidden, 10 * seed, activation="tanh", dtype=dtype),
                                         dense(1, 10 * seed + 2, dtype=dtype)])


def make_data(hvd, steps=STEPS, batch=BATCH, inputs=3, seed=1):
    """Returns (local_x, local_y, full_x, full_y).

    Step s of ``fit(local_x, batch_size=batch, shuffle=False)`` on rank r sees block (s, r) of
    the global data; ``full_x[s*n*batch:(s+1)*n*batch]`` is the union over ranks of step s.
    """
    n, r = hvd.size(), hvd.rank()
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, (steps, n, batch, inputs)).astype("float32")
    y = (np.sin(3 * x).sum(-1, keepdims=True) + 0.1).astype("float32")
    return (x[:, r].reshape(-1, inputs), y[:, r].reshape(-1, 1),
            x.reshape(-1, inputs), y.reshape(-1, 1))


def reference_train(model, optimizer, x, y, batch):
    """Trains eagerly, one optimizer step per ``batch`` rows, with a plain optimizer."""
    loss_fn = keras.losses.MeanSquaredError()
    for start in range(0, len(x), batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[start:start + batch], model(x[start:start + batch]))
        grads = tape.gradient(loss, model.trainable_variables)
        apply(optimizer, grads, model.trainable_variables)
    return model


def apply(optimizer, grads, variables):
    """One optimizer step: ``apply_gradients``, which Keras 3 and tf_keras both have."""
    optimizer.apply_gradients(zip(grads, variables))


def variable(value, name=None):
    """A variable as the selected Keras makes them (tf_keras has no ``keras.Variable``)."""
    make = getattr(keras, "Variable", tf.Variable)
    return make(value, dtype=str(value.dtype), name=name)


def assert_close(actual_weights, expected_weights, atol=1e-5):
    for a, e in zip(actual_weights, expected_weights):
        np.testing.assert_allclose(a, e, atol=atol, rtol=0)


def assert_identical_on_all_ranks(hvd, weights, name):
    """Every rank's weights are bit-identical (compared as bytes, gathered from all ranks)."""
    blob = b"".join(np.ascontiguousarray(w).tobytes() for w in weights)
    gathered = hvd.allgather_object(blob, name=name)
    assert all(g == gathered[0] for g in gathered), "weights differ between ranks"


def make_optimizer(kind, lr):
    return {"sgd": lambda: keras.optimizers.SGD(lr, momentum=0.9),
            "adam": lambda: keras.optimizers.Adam(lr)}[kind]()


# -- model.fit equivalence ------------------------------------------------------------------
def _count_grouped_allreduces(monkeypatch):
    """Counts grouped allreduces as they execute (not as they are traced)."""
    from kerashvd.collectives import tensors as collectives

    executed = tf.Variable(0, dtype=tf.int64, trainable=False)
    original = collectives.grouped_allreduce

    def counting(tensors, *args, **kwargs):
        out = original(tensors, *args, **kwargs)
        executed.assign_add(1)
        return out

    monkeypatch.setattr(collectives, "grouped_allreduce", counting)
    return executed


@pytest.mark.parametrize("kind,style", [("sgd", "input"), ("adam", "input"),
                                        ("adam", "deferred"), ("sgd", "subclassed")])
def test_fit_equals_one_process_on_the_concatenated_batch(hvd, monkeypatch, kind, style):
    """Ranks start from different weights; the broadcast callback gives rank 0's to all, also
    for lazily built models (inside the first step), so the first update is already exact."""
    x, y, full_x, full_y = make_data(hvd)
    executed = _count_grouped_allreduces(monkeypatch)
    model = make_model(seed=7 * hvd.rank(), style=style)
    model.compile(optimizer=hvd.DistributedOptimizer(make_optimizer(kind, 0.05)), loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

    expected = reference_train(make_model(), make_optimizer(kind, 0.05), full_x, full_y,
                               BATCH * hvd.size())
    assert int(np.asarray(model.optimizer.iterations)) == STEPS
    assert int(executed.numpy()) == STEPS  # one dtype: one fused collective per step
    assert_identical_on_all_ranks(hvd, model.get_weights(), f"fit_{kind}_{style}")
    assert_close(model.get_weights(), expected.get_weights())


def test_backward_passes_per_step_equals_a_k_times_larger_batch(hvd, monkeypatch):
    k = 2
    x, y, full_x, full_y = make_data(hvd)
    executed = _count_grouped_allreduces(monkeypatch)
    model = make_model(style="deferred")  # the accumulators are built at the first step
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.05), backward_passes_per_step=k,
                                   average_aggregated_gradients=True)
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)

    expected = reference_train(make_model(), keras.optimizers.Adam(0.05), full_x, full_y,
                               k * BATCH * hvd.size())
    assert int(executed.numpy()) == STEPS // k  # k-1 of k steps issue no collective
    assert int(np.asarray(opt.iterations)) == STEPS // k  # Adam's bias correction sees applied steps only
    assert_identical_on_all_ranks(hvd, model.get_weights(), "bpps_fit")
    assert_close(model.get_weights(), expected.get_weights())


def test_backward_passes_per_step_eagerly_sums_without_averaging(hvd, monkeypatch):
    # Without average_aggregated_gradients the update uses the sum of the k mean gradients,
    # which for SGD equals one step on the k times larger batch with k * lr.
    k = 3
    x, y, full_x, full_y = make_data(hvd, steps=2 * k)
    executed = _count_grouped_allreduces(monkeypatch)
    model = make_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), backward_passes_per_step=k,
                                   name="bpps_eager")
    loss_fn = keras.losses.MeanSquaredError()
    counts = []
    for step in range(2 * k):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[step * BATCH:(step + 1) * BATCH], model(x[step * BATCH:(step + 1) * BATCH]))
        apply(opt, tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        counts.append(int(executed.numpy()))
    assert counts == [(step + 1) // k for step in range(2 * k)]  # only every k-th step
    expected = reference_train(make_model(), keras.optimizers.SGD(0.05 * k), full_x, full_y,
                               k * BATCH * hvd.size())
    assert int(np.asarray(opt.iterations)) == 2
    assert_identical_on_all_ranks(hvd, model.get_weights(), "bpps_eager")
    assert_close(model.get_weights(), expected.get_weights())


# -- grouping, scaling, None gradients (eager apply: no tracing, fast) ----------------------
def _variables():
    rng = np.random.RandomState(5)
    return [variable(rng.randn(3, 4).astype("float32"), name="k1"),
            variable(rng.randn(4).astype("float32"), name="b1"),
            variable(rng.randn(4, 1).astype("float64"), name="k2"),
            variable(rng.randn(1).astype("float32"), name="b2"),
            variable(rng.randn(7).astype("float32"), name="c")]


def _rank_grads(rank, variables):
    rng = np.random.RandomState(100 + rank)
    return [tf.constant(rng.randn(*v.shape), dtype=v.dtype) for v in variables]


def _apply_once(hvd, **kwargs):
    variables = _variables()
    groups = kwargs.pop("groups", None)
    if callable(groups):
        kwargs["groups"] = groups(variables)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5), **kwargs)
    apply(opt, _rank_grads(hvd.rank(), variables), variables)
    return [v.numpy() for v in variables]


@pytest.mark.parametrize("grouping", [
    {"num_groups": 2},
    {"num_groups": 9},
    {"groups": 3},
    {"groups": lambda v: [[v[0], v[2]], [v[3], v[1]]]},  # mixed dtypes; v[4] alone
    {"bucket_cap_mb": 1e-5},  # buckets of 10 bytes: every gradient alone
    {"bucket_cap_mb": 60 / 2**20},  # buckets of both dtypes, of one or two gradients
])
def test_grouping_is_bit_identical_to_one_group(hvd, grouping):
    baseline = _apply_once(hvd, name="grp_base", bucket_cap_mb=0)
    grouped = _apply_once(hvd, name="grp", **grouping)
    for a, b in zip(baseline, grouped):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    mean = [np.mean([g.numpy() for g in grads], axis=0) for grads in
            zip(*[_rank_grads(r, _variables()) for r in range(hvd.size())])]
    for got, v, m in zip(grouped, _variables(), mean):
        np.testing.assert_allclose(got, v.numpy() - 0.5 * m, atol=1e-5)
    assert_identical_on_all_ranks(hvd, grouped, "grouping")


def test_predivide_factor_and_sum(hvd):
    n = hvd.size()
    start = [v.numpy() for v in _variables()]
    grads = [np.array([g.numpy() for g in gs]) for gs in
             zip(*[_rank_grads(r, _variables()) for r in range(n)])]
    averaged = _apply_once(hvd, name="pre", gradient_predivide_factor=4.0)
    summed = _apply_once(hvd, name="sum", op=hvd.Sum)
    for s, a, sm, g in zip(start, averaged, summed, grads):
        np.testing.assert_allclose(a, s - 0.5 * g.mean(0), atol=1e-5)
        np.testing.assert_allclose(sm, s - 0.5 * g.sum(0), atol=1e-5)


def test_none_gradients_pass_through(hvd):
    variables = _variables()
    before = [v.numpy() for v in variables]
    grads = _rank_grads(hvd.rank(), variables)
    grads[1] = grads[4] = None
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5), name="with_none",
                                   backward_passes_per_step=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply(opt, grads, variables)
    assert np.array_equal(variables[1].numpy(), before[1])
    assert np.array_equal(variables[4].numpy(), before[4])
    assert not np.array_equal(variables[0].numpy(), before[0])


def test_zero_element_gradients_need_no_collective(hvd):
    empty = variable(np.zeros((0, 3), "float32"))
    full = variable(np.ones(3, "float32"))
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), name="zero_size")
    apply(opt, [tf.zeros((0, 3)), tf.fill([3], float(hvd.rank()))], [empty, full])
    np.testing.assert_allclose(full.numpy(), 1.0 - (hvd.size() - 1) / 2)
    assert empty.shape == (0, 3)


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_compression_is_close_and_identical_on_all_ranks(hvd, compression):
    tolerance = {"fp16": 2e-3, "bf16": 2e-2}[compression]
    exact = _apply_once(hvd, name="uncompressed")
    compressed = _apply_once(hvd, name=compression,
                             compression=getattr(hvd.Compression, compression))
    for a, c in zip(exact, compressed):
        assert a.dtype == c.dtype
        np.testing.assert_allclose(c, a, atol=tolerance * max(1.0, np.abs(a).max()))
    assert_identical_on_all_ranks(hvd, compressed, "compressed")


# -- errors --------------------------------------------------------------------------------
def test_jit_compile_true_gives_an_actionable_error(hvd):
    """Plain fit: no kerashvd code runs before Keras builds the XLA step; the step says why."""
    x, y, _, _ = make_data(hvd)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse",
                  jit_compile=True)
    with pytest.raises(ValueError, match="jit_compile=False"):
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)


def _pretend_a_gpu(monkeypatch):
    """Keras resolves jit_compile="auto" from tf.config.list_physical_devices(): add a GPU."""
    real = tf.config.list_physical_devices

    def with_gpu(device_type=None):
        devices = real(device_type)
        if device_type in (None, "GPU"):
            devices = devices + [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]
        return devices

    monkeypatch.setattr(tf.config, "list_physical_devices", with_gpu)


def _xla_notices(caught):
    return [w for w in caught if "kerashvd: jit_compile is" in str(w.message)]


@pytest.mark.parametrize("loss_scaled", [False, True])
def test_auto_resolves_xla_off_and_a_plain_fit_trains(hvd, monkeypatch, loss_scaled):
    """jit_compile="auto" on a GPU machine: Keras would pick XLA; with DistributedOptimizer
    (also wrapping a LossScaleOptimizer) it resolves to False, and fit without any kerashvd
    callback trains as the reference does."""
    if USES_TF_KERAS:
        pytest.skip("tf_keras does not turn XLA on by itself")
    _pretend_a_gpu(monkeypatch)
    plain = make_model()
    plain.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    assert plain.jit_compile  # Keras' own resolution sees the GPU: XLA
    x, y, full_x, full_y = make_data(hvd)
    model = make_model(style="deferred")
    inner = keras.optimizers.SGD(0.05)
    if loss_scaled:
        inner = keras.optimizers.LossScaleOptimizer(inner, initial_scale=1.0,
                                                    dynamic_growth_steps=10**6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile(optimizer=hvd.DistributedOptimizer(inner), loss="mse")
    assert model.jit_compile is False
    assert len(_xla_notices(caught)) == (1 if hvd.rank() == 0 else 0)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    expected = reference_train(make_model(), keras.optimizers.SGD(0.05), full_x, full_y,
                               BATCH * hvd.size())
    assert_close(model.get_weights(), expected.get_weights())


def test_explicit_xla_is_turned_off_by_a_kerashvd_callback_before_fit_builds_its_step(hvd):
    x, y, full_x, full_y = make_data(hvd)
    model = make_model(style="deferred")
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse",
                  jit_compile=True)
    assert model.jit_compile
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    notices = [w for w in _xla_notices(caught) if "is now False" in str(w.message)]
    assert len(notices) == (1 if hvd.rank() == 0 else 0)
    assert model.jit_compile is False
    expected = reference_train(make_model(), keras.optimizers.SGD(0.05), full_x, full_y,
                               BATCH * hvd.size())
    assert_close(model.get_weights(), expected.get_weights())


def test_invalid_arguments_are_refused(hvd):
    sgd = keras.optimizers.SGD
    if not USES_TF_KERAS:  # tf_keras optimizers have no gradient_accumulation_steps
        with pytest.raises(ValueError, match="backward_passes_per_step=4"):
            hvd.DistributedOptimizer(sgd(0.1, gradient_accumulation_steps=4))
    with pytest.raises(ValueError, match="received backward_passes_per_step=0"):
        hvd.DistributedOptimizer(sgd(0.1), backward_passes_per_step=0)
    with pytest.raises(ValueError, match="op=kerashvd.Average or op=kerashvd.Sum"):
        hvd.DistributedOptimizer(sgd(0.1), op=hvd.Max)
    with pytest.raises(ValueError, match="gradient_predivide_factor applies to op=kerashvd.Average"):
        hvd.DistributedOptimizer(sgd(0.1), op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="either num_groups or groups"):
        hvd.DistributedOptimizer(sgd(0.1), num_groups=2, groups=3)
    v = variable(np.zeros(2, "float32"))
    with pytest.raises(ValueError, match="one group only"):
        hvd.DistributedOptimizer(sgd(0.1), groups=[[v], [v]])
    with pytest.raises(TypeError, match="keras.optimizers.Optimizer"):
        hvd.DistributedOptimizer("sgd")
    with pytest.raises(ValueError, match="already a DistributedOptimizer"):
        hvd.DistributedOptimizer(hvd.DistributedOptimizer(sgd(0.1)))


def test_delegates_learning_rate_and_iterations(hvd):
    inner = keras.optimizers.Adam(0.25)
    opt = hvd.DistributedOptimizer(inner)
    assert opt.name == "DistributedAdam"
    assert float(np.asarray(opt.learning_rate)) == 0.25
    opt.learning_rate = 0.5
    assert float(np.asarray(inner.learning_rate)) == 0.5
    assert opt.iterations is inner.iterations
    if not USES_TF_KERAS:  # Keras 3's loss-scaling hook (tf_keras scales in compute_gradients)
        assert opt.scale_loss(3.0) == 3.0
