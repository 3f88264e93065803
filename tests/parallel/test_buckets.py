"""Gradient buckets (kerashvd/training/optimizer/buckets.py), with Keras 3 or tf_keras.

What the optimizer and the tape issue is recorded at trace time (the grouped allreduces,
with their keys and input tensors): the buckets' keys, members, order and caps; that no
bucket's collective depends on another bucket's gradients, so that the TF executor can start
each as soon as its own gradients exist; and that every bucketing trains to the same bits as
one collective, with each feature that changes the reduction's path.
"""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import keras
from kerashvd.training.optimizer.buckets import plan_buckets
from model_styles import dense, sequential
from test_optimizer import assert_identical_on_all_ranks, make_data

pytestmark = pytest.mark.keras
# A chain of Dense layers whose variables all have different shapes, so that a recorded
# input names its position: kernels 6x40, 40x24, 24x10, 10x3 and their biases.
WIDTHS = (40, 24, 10, 3)
SHAPES = [s for i, w in enumerate(WIDTHS) for s in (((6,) + WIDTHS)[i:i + 1] + (w,), (w,))]
# A cap of 2048 bytes cuts them (float32) into [3 .. 7], [2] (3840 bytes: over the cap, alone)
# and [0, 1], in that order.
CAP_MB = 2048 / 2**20
EXPECTED = [[3, 4, 5, 6, 7], [2], [0, 1]]


def _chain(style="input", dtype=None):
    return sequential(style, (6,), [dense(w, 10 * i, activation="tanh" if i < 3 else None,
                                          dtype=dtype) for i, w in enumerate(WIDTHS)])


def _data(hvd, steps=3, batch=4):
    rng = np.random.RandomState(7 + hvd.rank())
    x = rng.uniform(-1, 1, (steps * batch, 6)).astype("float32")
    return x, np.sin(x[:, :3]).astype("float32")


@contextlib.contextmanager
def recording(monkeypatch, gradients=None):
    """Records each grouped allreduce as it is traced (or run eagerly): (key, inputs); and
    in ``gradients``, each list of gradients the reducer was given."""
    from kerashvd.collectives import tensors as collectives
    from kerashvd.training.optimizer.reduction import GradientReducer

    calls = []
    original, reduce = collectives.grouped_allreduce, GradientReducer.reduce

    def record(tensors, *args, **kwargs):
        calls.append((kwargs["name"], list(tensors)))
        return original(tensors, *args, **kwargs)

    def record_gradients(self, grads, variables=None):
        if gradients is not None:
            gradients.append(list(grads))
        return reduce(self, grads, variables)

    monkeypatch.setattr(collectives, "grouped_allreduce", record)
    monkeypatch.setattr(GradientReducer, "reduce", record_gradients)
    yield calls


def _ancestors(tensors):
    """Names of every tensor the ``tensors`` depend on (data and control inputs)."""
    seen, stack = set(), [t.op for t in tensors]
    names = set()
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        names.update(t.name for t in op.inputs)
        stack.extend(t.op for t in op.inputs)
        for control in op.control_inputs:  # waits for all its outputs
            names.update(t.name for t in control.outputs)
            stack.append(control)
    return names


# -- the plan ------------------------------------------------------------------------------
def test_plan_walks_backwards_per_dtype_within_the_cap():
    assert plan_buckets([0, 1, 2, 3], [4] * 4, ["float32"] * 4, 8) == [[2, 3], [0, 1]]
    assert plan_buckets([0, 1, 2, 3], [4] * 4, ["float32"] * 4, 0) == [[0, 1, 2, 3]]
    assert plan_buckets([0, 1, 2], [4, 100, 4], ["float32"] * 3, 8) == [[2], [1], [0]]
    # One open bucket per dtype; a bucket is complete when its first position is filled.
    dtypes = ["float32", "float64", "float32", "float64", "float32"]
    assert plan_buckets([0, 1, 2, 3, 4], [4] * 5, dtypes, 8) == [[2, 4], [1, 3], [0]]
    # Positions need not be consecutive (None, sparse and local gradients are left out); a
    # size that is not known gets a bucket of its own.
    assert plan_buckets([1, 4, 6], [4, float("inf"), 4], ["float32"] * 3, 8) == [[6], [4], [1]]


@pytest.mark.parametrize("style", ["input", "subclassed"])  # built at once, and lazily
def test_fit_issues_the_buckets_in_backprop_order_each_independent(hvd, monkeypatch, style):
    x, y = _data(hvd)
    model = _chain(style)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), bucket_cap_mb=CAP_MB,
                                   name=f"chain_{style}")
    model.compile(optimizer=opt, loss="mse")
    gradients = []
    with recording(monkeypatch, gradients) as calls:
        model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    # Keras 3 traces a lazily built model's step twice (see apply_hooks.py); the last trace
    # is the one that runs.
    calls = calls[-len(EXPECTED):]
    assert [key for key, _ in calls] == [f"chain_{style}.bucket{n}.float32"
                                         for n in range(len(EXPECTED))]
    members = [[SHAPES.index(tuple(t.shape)) for t in inputs] for _, inputs in calls]
    assert members == EXPECTED, members
    for bucket in members:
        assert len(bucket) == 1 or 4 * sum(int(np.prod(SHAPES[i])) for i in bucket) <= 2048
    grads = gradients[-1]  # as backprop produced them, in the step that runs
    for n, (_, inputs) in enumerate(calls):
        depends_on = _ancestors(inputs)
        for m, positions in enumerate(members):
            if m != n:
                assert not {grads[i].name for i in positions} & depends_on, (
                    f"bucket {n}'s collective waits for bucket {m}'s gradients")


# -- the same bits as one collective ---------------------------------------------------------
def _fit(hvd, cap, name, optimizer=None, model=None, data=None, **kwargs):
    x, y = data or _data(hvd)
    model = model or _chain()
    opt = hvd.DistributedOptimizer(optimizer or keras.optimizers.SGD(0.05, momentum=0.9),
                                   bucket_cap_mb=cap, name=name, **kwargs)
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


def _assert_same_bits(hvd, bucketed, single, name):
    for a, b in zip(bucketed, single):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert_identical_on_all_ranks(hvd, bucketed, name)


@pytest.mark.parametrize("case", [
    {"style": "deferred"},
    {"style": "subclassed", "backward_passes_per_step": 2},
    {"compression": "fp16", "gradient_predivide_factor": 2.0},
])
def test_buckets_train_to_the_bits_of_one_collective(hvd, monkeypatch, case):
    case = dict(case)
    style = case.pop("style", "input")
    if "compression" in case:
        case["compression"] = getattr(hvd.Compression, case["compression"])
    runs = {}
    for cap in (CAP_MB, 0):
        with recording(monkeypatch) as calls:
            runs[cap] = _fit(hvd, cap, f"same_{style}_{cap}", model=_chain(style), **case)
        monkeypatch.undo()
        keys = {key for key, _ in calls}
        assert len(keys) == (len(EXPECTED) if cap else 1), keys
    _assert_same_bits(hvd, runs[CAP_MB], runs[0], f"same_{style}")


def test_mixed_precision_buckets_the_scaled_gradients(hvd):
    from test_optimizer_precision import mixed_float16

    runs = {}
    for cap in (CAP_MB, 0):
        with mixed_float16():
            inner = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05))
            runs[cap] = _fit(hvd, cap, f"mixed_{cap}", optimizer=inner, model=_chain())
    _assert_same_bits(hvd, runs[CAP_MB], runs[0], "mixed")


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients_beside_buckets(hvd, sparse_as_dense):
    rng = np.random.RandomState(3 + hvd.rank())
    ids = rng.randint(0, 12, (12, 2)).astype("int32")
    target = rng.uniform(-1, 1, (12, 3)).astype("float32")

    def model():
        return keras.Sequential([keras.Input((2,), dtype="int32"),
                                 keras.layers.Embedding(12, 5, embeddings_initializer="ones"),
                                 keras.layers.Flatten(), dense(8, 1), dense(3, 3)])

    runs = {cap: _fit(hvd, cap, f"sparse_{sparse_as_dense}_{cap}", model=model(),
                      data=(ids, target), sparse_as_dense=sparse_as_dense)
            for cap in (1e-4, 0)}
    _assert_same_bits(hvd, runs[1e-4], runs[0], "sparse")


def test_tape_in_a_function_buckets_like_the_optimizer(hvd, monkeypatch):
    x, y = _data(hvd)
    results = {}
    for cap in (CAP_MB, 0):
        model = _chain()
        opt = keras.optimizers.SGD(0.05)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb) - yb))
            tape = hvd.DistributedGradientTape(tape, bucket_cap_mb=cap, name=f"tape_{cap}")
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        with recording(monkeypatch) as calls:
            for start in range(0, len(x), 4):
                step(x[start:start + 4], y[start:start + 4])
        monkeypatch.undo()
        assert len({key for key, _ in calls}) == (len(EXPECTED) if cap else 1)
        results[cap] = model.get_weights()
    _assert_same_bits(hvd, results[CAP_MB], results[0], "tape")


def test_process_set_members_bucket_among_themselves(hvd):
    if hvd.size() < 2:
        pytest.skip("a proper process set needs two ranks")
    ps = hvd.add_process_set(list(range(hvd.size() - 1)))  # every rank but the last
    try:
        runs = {cap: _fit(hvd, cap, f"set_{cap}", process_set=ps) for cap in (CAP_MB, 0)}
    finally:
        hvd.remove_process_set(ps)
    for a, b in zip(runs[CAP_MB], runs[0]):
        assert a.tobytes() == b.tobytes()
    blob = b"".join(w.tobytes() for w in runs[CAP_MB])
    gathered = hvd.allgather_object(blob, name="set_buckets")
    assert len({gathered[r] for r in ps.ranks}) == 1  # the last rank trains on its own


def test_cap_from_the_variable_and_bad_caps(hvd, monkeypatch):
    monkeypatch.setenv("KERASHVD_BUCKET_CAP_MB", "0.5")
    assert hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))._reducer.bucket_cap_bytes == 1 << 19
    keyword = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), bucket_cap_mb=2)
    assert keyword._reducer.bucket_cap_bytes == 2 << 20 and keyword.bucket_cap_mb == 2
    monkeypatch.setenv("KERASHVD_BUCKET_CAP_MB", "lots")
    with pytest.raises(ValueError, match="KERASHVD_BUCKET_CAP_MB must be a number of MiB >= 0"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    monkeypatch.delenv("KERASHVD_BUCKET_CAP_MB")
    for bad in (-1, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="bucket_cap_mb must be a number of MiB >= 0"):
            hvd.DistributedGradientTape(tf.GradientTape(), bucket_cap_mb=bad)
