"""DistributedGradientTape, and sparse (embedding) gradients, at any world size."""

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import keras
from test_optimizer import (BATCH, STEPS, apply, assert_close, assert_identical_on_all_ranks,
                            make_data, make_model, reference_train)

pytestmark = pytest.mark.keras


@pytest.mark.parametrize("style", ["input", "subclassed"])
def test_custom_loop_with_distributed_tape_equals_the_concatenated_batch(hvd, style):
    """A subclassed model and its optimizer are built inside the first traced step; the
    state is then broadcast after that step, as Horovod's custom loops do."""
    x, y, full_x, full_y = make_data(hvd)
    model = make_model(style=style)
    opt = keras.optimizers.Adam(0.05)
    model.compile(optimizer=opt, loss="mse")  # broadcast_model_state includes model.optimizer
    if style == "input":
        opt.build(model.trainable_variables)  # variables outside the function: a single trace
    loss_fn = keras.losses.MeanSquaredError()

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        apply(opt, grads, model.trainable_variables)
        return loss

    for step in range(STEPS):
        train_step(x[step * BATCH:(step + 1) * BATCH], y[step * BATCH:(step + 1) * BATCH])
        if step == 0:
            hvd.callbacks.broadcast_model_state(model, root_rank=0, name=f"tape_loop.{style}")
    expected = reference_train(make_model(), keras.optimizers.Adam(0.05), full_x, full_y,
                               BATCH * hvd.size())
    assert_identical_on_all_ranks(hvd, model.get_weights(), f"tape_loop_{style}")
    assert_close(model.get_weights(), expected.get_weights())


def test_tape_keeps_structure_none_and_delegates(hvd):
    a = tf.Variable([1.0, 2.0])
    b = tf.Variable(3.0)
    unused = tf.Variable(0.0)
    scale = float(hvd.rank() + 1)
    with hvd.DistributedGradientTape(tf.GradientTape(persistent=True), name="tape_struct") as tape:
        loss = tf.reduce_sum(a * scale) + b * b * scale
    grads = tape.gradient(loss, {"a": a, "pair": (b, unused)})
    mean_scale = np.mean(np.arange(1, hvd.size() + 1))
    np.testing.assert_allclose(grads["a"].numpy(), [mean_scale] * 2, rtol=1e-6)
    np.testing.assert_allclose(grads["pair"][0].numpy(), 6.0 * mean_scale, rtol=1e-6)
    assert grads["pair"][1] is None
    assert {v.ref() for v in tape.watched_variables()} == {a.ref(), b.ref()}  # delegated
    with pytest.raises(TypeError, match="tf.GradientTape"):
        hvd.DistributedGradientTape(object())


def test_tape_inside_xla_gives_an_actionable_error(hvd):
    w = tf.Variable(1.0)

    @tf.function(jit_compile=True)
    def step():
        with tf.GradientTape() as tape:
            loss = w * w
        return hvd.DistributedGradientTape(tape).gradient(loss, [w])

    with pytest.raises(ValueError, match="jit_compile"):
        step()


# -- sparse gradients (tf.IndexedSlices from an Embedding) ---------------------------------
VOCAB, DIM = 12, 3


def _embedding_model():
    model = keras.Sequential([keras.Input((2,), dtype="int32"), keras.layers.Embedding(VOCAB, DIM),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    rng = np.random.RandomState(7)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _embedding_data(hvd, steps=3):
    n, r = hvd.size(), hvd.rank()
    rng = np.random.RandomState(3)
    ids = rng.randint(0, VOCAB, (steps, n, BATCH, 2)).astype("int32")
    target = rng.uniform(-1, 1, (steps, n, BATCH, 1)).astype("float32")
    return ids[:, r].reshape(-1, 2), target[:, r].reshape(-1, 1), ids.reshape(-1, 2), target.reshape(-1, 1)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_embedding_gradients_with_and_without_sparse_as_dense(hvd, monkeypatch, sparse_as_dense):
    from kerashvd.collectives import tensors as collectives

    ids, target, full_ids, full_target = _embedding_data(hvd)
    reduced_kinds = []
    original = collectives.allreduce

    def recording(tensor, *args, **kwargs):
        reduced_kinds.append(type(tensor).__name__)
        return original(tensor, *args, **kwargs)

    monkeypatch.setattr(collectives, "allreduce", recording)
    model = _embedding_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), sparse_as_dense=sparse_as_dense)
    loss_fn = keras.losses.MeanSquaredError()
    steps, gradient_kinds = len(ids) // BATCH, []
    for step in range(steps):  # eagerly: the same apply() as model.fit's, without a trace
        rows = slice(step * BATCH, (step + 1) * BATCH)
        with tf.GradientTape() as tape:
            loss = loss_fn(target[rows], model(ids[rows]))
        grads = tape.gradient(loss, model.trainable_variables)
        gradient_kinds.append(type(grads[0]).__name__)
        apply(opt, grads, model.trainable_variables)

    expected = reference_train(_embedding_model(), keras.optimizers.SGD(0.1), full_ids,
                               full_target, BATCH * hvd.size())
    assert gradient_kinds == ["IndexedSlices"] * steps  # the Embedding's gradient is sparse
    assert reduced_kinds == ([] if sparse_as_dense else ["IndexedSlices"] * steps)
    assert_identical_on_all_ranks(hvd, model.get_weights(), "embedding")
    assert_close(model.get_weights(), expected.get_weights())


def test_sparse_gradients_through_the_tape(hvd):
    ids, _, full_ids, _ = _embedding_data(hvd, steps=1)
    model = _embedding_model()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(ids))
    (grad,) = hvd.DistributedGradientTape(tape, name="tape_sparse").gradient(
        loss, model.trainable_variables[:1])
    assert isinstance(grad, tf.IndexedSlices)
    full_model = _embedding_model()
    with tf.GradientTape() as tape:
        full_loss = tf.reduce_sum(full_model(full_ids)) / hvd.size()
    (expected,) = tape.gradient(full_loss, full_model.trainable_variables[:1])
    np.testing.assert_allclose(tf.convert_to_tensor(grad).numpy(),
                               tf.convert_to_tensor(expected).numpy(), atol=1e-6)
