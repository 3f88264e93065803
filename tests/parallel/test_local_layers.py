"""Local layers (PartialDistributedOptimizer, register_local_var/_source), at any world size.

The reference simulates every rank in this one process, without communication: each
simulated rank has its own copy of the model and of the optimizer and its own batch; shared
gradients are the mean over the simulated ranks, local ones stay with their rank (divided by
the world size when scaled).
"""

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import keras
from model_styles import dense, sequential
from test_optimizer import apply, assert_close, assert_identical_on_all_ranks

pytestmark = pytest.mark.keras
BATCH, STEPS = 3, 4


def _model(style="input"):
    return sequential(style, (3,), [dense(4, 0, activation="tanh"), dense(2, 2)])


def _data(rank):
    """Rank ``rank``'s STEPS batches, different on every rank."""
    rng = np.random.RandomState(10 + rank)
    x = rng.uniform(-1, 1, (STEPS * BATCH, 3)).astype("float32")
    return x, np.stack([np.sin(3 * x).sum(-1), x[:, 0] * (rank + 1)], -1).astype("float32")


def _simulate(n, passes, scale):
    """Each simulated rank's final weights; the last layer is local, `passes` per update."""
    loss_fn = keras.losses.MeanSquaredError()
    models = [_model() for _ in range(n)]
    opts = [keras.optimizers.SGD(0.1, momentum=0.5) for _ in range(n)]
    data = [_data(r) for r in range(n)]
    sums = None
    for step in range(STEPS):
        grads = []
        for r in range(n):
            x, y = data[r]
            with tf.GradientTape() as tape:
                loss = loss_fn(y[step * BATCH:(step + 1) * BATCH],
                               models[r](x[step * BATCH:(step + 1) * BATCH]))
            grads.append([g.numpy() for g in tape.gradient(loss, models[r].trainable_variables)])
        sums = grads if sums is None else [[a + b for a, b in zip(s, g)] for s, g in zip(sums, grads)]
        if (step + 1) % passes:
            continue
        for r in range(n):
            update = [np.mean([sums[q][i] for q in range(n)], axis=0) for i in range(2)]
            update += [g / (n if scale else 1) for g in sums[r][2:]]
            apply(opts[r], [tf.constant(u) for u in update], models[r].trainable_variables)
        sums = None
    return [m.get_weights() for m in models]


@pytest.mark.parametrize("passes,scale,style", [(1, True, "input"), (2, True, "deferred"),
                                                (1, False, "subclassed")])
def test_fit_with_a_local_head_matches_the_simulation(hvd, passes, scale, style):
    """The head is registered before fit; with a lazily built model its weights appear only
    inside the first step, where they must be found and kept local."""
    n, r = hvd.size(), hvd.rank()
    head = dense(2, 2)
    model = sequential(style, (3,), [dense(4, 0, activation="tanh"), head])
    opt = hvd.PartialDistributedOptimizer(
        keras.optimizers.SGD(0.1, momentum=0.5), name=f"partial_fit_{passes}_{scale}",
        backward_passes_per_step=passes, local_layers=[head], scale_local_gradients=scale)
    model.compile(optimizer=opt, loss="mse")
    x, y = _data(r)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert len(head.trainable_weights) == 2
    assert {id(v) for v in opt._reducer.local_variables} == {id(w) for w in head.trainable_weights}

    expected = _simulate(n, passes, scale)
    assert_close(model.get_weights(), expected[r])
    assert_identical_on_all_ranks(hvd, model.get_weights()[:2], f"partial_fit_shared_{passes}_{scale}")
    heads = hvd.allgather_object(model.get_weights()[2].tobytes(), name=f"partial_heads_{passes}_{scale}")
    assert len(set(heads)) == n, "each rank's local head must differ (different data)"


def test_tape_local_sources_dense_sparse_and_unscaled(hvd):
    n, r = hvd.size(), hvd.rank()
    shared = tf.Variable([1.0, 2.0])
    local = tf.Variable([3.0, 4.0])
    table = tf.Variable(np.ones((5, 2), np.float32))
    unused = tf.Variable(0.0)
    scale = float(r + 1)
    for scaled in (True, False):
        with tf.GradientTape() as plain:
            loss = scale * (tf.reduce_sum(shared) + tf.reduce_sum(local * local)
                            + tf.reduce_sum(tf.gather(table, [1, 3])))
        tape = hvd.DistributedGradientTape(plain, name=f"tape_local_{scaled}",
                                           scale_local_gradients=scaled)
        tape.register_local_source(local)
        tape.register_local_source(table)
        tape.register_local_source(unused)
        g_shared, g_local, g_table, g_unused = tape.gradient(loss, [shared, local, table, unused])
        divisor = n if scaled else 1
        np.testing.assert_allclose(g_shared.numpy(), [(n + 1) / 2] * 2, rtol=1e-6)
        np.testing.assert_allclose(g_local.numpy(), [6 * scale / divisor, 8 * scale / divisor],
                                   rtol=1e-6)
        assert isinstance(g_table, tf.IndexedSlices)  # not densified, not gathered
        np.testing.assert_array_equal(g_table.indices.numpy(), [1, 3])
        np.testing.assert_allclose(g_table.values.numpy(), np.full((2, 2), scale / divisor), rtol=1e-6)
        assert g_unused is None


def test_partial_tape_registers_the_layers(hvd):
    n, r = hvd.size(), hvd.rank()
    model = _model()
    x, y = _data(r)
    with tf.GradientTape() as plain:
        loss = keras.losses.MeanSquaredError()(y[:BATCH], model(x[:BATCH]))
    local_grads = plain.gradient(loss, model.trainable_variables)[2:]
    with tf.GradientTape() as plain:
        loss = keras.losses.MeanSquaredError()(y[:BATCH], model(x[:BATCH]))
    tape = hvd.PartialDistributedGradientTape(plain, local_layers=model.layers[-1],
                                              name="partial_tape")
    grads = tape.gradient(loss, model.trainable_variables)
    for got, own in zip(grads[2:], local_grads):
        np.testing.assert_allclose(got.numpy(), own.numpy() / n, rtol=1e-6)
    assert_identical_on_all_ranks(hvd, [g.numpy() for g in grads[:2]], "partial_tape_shared")


def test_partial_tape_local_and_global_gradients(hvd):
    """Horovod's get_local_and_global_gradients: the gradients gradient() gives, split into
    those of the local sources and those of the others, each in the order of the sources."""
    n, r = hvd.size(), hvd.rank()
    model = _model()
    x, y = _data(r)

    def partial_tape(name):
        with tf.GradientTape() as plain:
            loss = keras.losses.MeanSquaredError()(y[:BATCH], model(x[:BATCH]))
        return hvd.PartialDistributedGradientTape(plain, local_layers=[model.layers[-1]],
                                                  name=name), loss

    tape, loss = partial_tape("split_whole")
    whole = tape.gradient(loss, model.trainable_variables)
    tape, loss = partial_tape("split_parts")
    # Sources in a mixed order: a local weight first, a shared one last.
    variables = model.trainable_variables
    sources = [variables[2], variables[0], variables[3], variables[1]]
    local, shared = tape.get_local_and_global_gradients(loss, sources)
    assert len(local) == 2 and len(shared) == 2
    for got, want in zip(local + shared, [whole[2], whole[3], whole[0], whole[1]]):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert_identical_on_all_ranks(hvd, [g.numpy() for g in shared], "split_shared")
    with pytest.raises(TypeError, match="flat list of sources"):
        tape.get_local_and_global_gradients(loss, {"w": variables[0]})


@pytest.mark.parametrize("as_layer", [False, True])
def test_broadcast_leaves_local_variables_alone(hvd, as_layer):
    r = hvd.rank()
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.set_weights([w + r for w in model.get_weights()])
    head = model.layers[-1]
    local = head if as_layer else head.trainable_weights
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=local)
    callback.set_model(model)
    callback.on_train_begin()
    weights, root = model.get_weights(), _model().get_weights()
    assert_close(weights[:2], root[:2], atol=0)
    assert_close(weights[2:], [w + r for w in root[2:]], atol=0)


def test_bad_local_arguments_are_refused(hvd):
    with pytest.raises(ValueError, match="local_layers"):
        hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[object()])
    with pytest.raises(ValueError, match="local_layers"):
        hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers="dense")
    with pytest.raises(TypeError, match="register_local_var"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)).register_local_var("dense/kernel")
    with pytest.raises(ValueError, match="local_variables"):
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=3)
