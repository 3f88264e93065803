"""Autotune of the gradient buckets' cap (kerashvd/training/optimizer/bucket_tuning.py).

The engine is restarted with ``autotune=True`` and short trials (one warm-up update and three
measured ones each); a Keras model trains the same steps untuned and tuned. Every rank must
run every trial's plan at the same update and end on rank 0's choice, each rank's log must
name the same trials, caps and choice, the tuned weights must equal the untuned ones bit for
bit, and once frozen the tuner must run no more trials.
"""

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import keras
from model_styles import dense, sequential
from test_optimizer import assert_identical_on_all_ranks

pytestmark = pytest.mark.keras
HEADER = "trial,bucket_cap_mb,updates,median_seconds_per_update,chosen"
# Kernels of 256 x 256 float32 (256 KiB each) and their biases: the caps 1 MiB (the default),
# 0.25 MiB and 4 MiB give three different plans (every larger cap, and no cap, the same as 4).
WIDTHS = (256, 256, 256, 256)
CAPS = [1.0, 0.25, 4.0]
STEPS = 24  # 3 trials of 4 updates end after 12


def _train(hvd, steps, **optimizer_args):
    model = sequential("input", (256,), [dense(w, 10 * i, low=-0.05, high=0.05)
                                         for i, w in enumerate(WIDTHS)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), **optimizer_args)
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.RandomState(3 + hvd.rank())
    x = rng.uniform(-1, 1, (steps * 4, 256)).astype("float32")
    y = rng.uniform(-1, 1, (steps * 4, 256)).astype("float32")
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return model, optimizer


def _tuner(optimizer):
    return optimizer._reducer._tuner


def _restart(hvd, log):
    hvd.shutdown()
    hvd.init(autotune=True, autotune_log_file=log, autotune_warmup_samples=0,
             autotune_steps_per_sample=1)


def _rows(path):
    with open(path) as f:
        return [line.split(",") for line in f.read().splitlines()]


def test_bucket_cap_autotune_agrees_logs_freezes_and_keeps_results(hvd):
    untuned, _ = _train(hvd, STEPS)
    folder = hvd.broadcast_object(tempfile.mkdtemp(prefix="kerashvd-buckets-") if hvd.rank() == 0
                                  else None, name="bucket_autotune.folder")
    log = os.path.join(folder, "trials-{rank}.csv")
    mine = os.path.join(folder, f"trials-{hvd.rank()}.buckets.csv")
    _restart(hvd, log)
    try:
        tuned, optimizer = _train(hvd, STEPS)
        tuner = _tuner(optimizer)
        state = [int(tuner.index.numpy()), bool(tuner.frozen.numpy()), int(tuner.updates.numpy())]
        rows = _rows(mine)
        weights = tuned.get_weights()
        # Frozen: more updates run no trial and log nothing.
        tuned.fit(np.zeros((8, 256), "float32"), np.zeros((8, 256), "float32"), batch_size=4,
                  verbose=0)
        assert _rows(mine) == rows
        assert int(tuner.updates.numpy()) == state[2]
    finally:
        hvd.shutdown()
        hvd.init()
    assert tuner.caps_mb == CAPS, tuner.caps_mb
    # Every plan gives the same bits: the tuned steps trained exactly as the untuned ones.
    for a, b in zip(weights, untuned.get_weights()):
        assert np.array_equal(a, b)
    assert_identical_on_all_ranks(hvd, weights, "bucket_autotune.weights")
    # Every rank froze after the same updates, on the same plan.
    states = hvd.allgather_object(state, name="bucket_autotune.state")
    assert all(s == states[0] for s in states), states
    assert states[0][1] and states[0][2] == 4 * len(CAPS), states
    # Each rank logged the same trials, caps and choice (the times are its own).
    assert rows[0] == HEADER.split(","), rows
    assert [r[0] for r in rows[1:]] == ["0", "1", "2", str(state[0])], rows
    assert [float(r[1]) for r in rows[1:-1]] == CAPS and float(rows[-1][1]) == CAPS[state[0]]
    assert [r[4] for r in rows[1:]] == ["0", "0", "0", "1"], rows
    assert all(int(r[2]) == 3 and float(r[3]) > 0 for r in rows[1:]), rows
    logs = hvd.allgather_object([r[:3] + r[4:] for r in rows], name="bucket_autotune.logs")
    assert all(other == logs[0] for other in logs), logs
    if hvd.rank() == 0:  # rank 0's choice is its fastest trial (the first of equals)
        medians = [float(r[3]) for r in rows[1:-1]]
        assert state[0] == int(np.argmin(medians)), rows


def test_a_given_cap_or_grouping_is_not_tuned(hvd):
    folder = hvd.broadcast_object(tempfile.mkdtemp(prefix="kerashvd-buckets-") if hvd.rank() == 0
                                  else None, name="bucket_autotune.untuned.folder")
    log = os.path.join(folder, "trials-{rank}.csv")
    _restart(hvd, log)
    try:
        for args in ({"bucket_cap_mb": 2}, {"num_groups": 2}):
            _, optimizer = _train(hvd, 3, **args)
            assert _tuner(optimizer) is None, args
    finally:
        hvd.shutdown()
        hvd.init()
    assert not os.path.exists(os.path.join(folder, f"trials-{hvd.rank()}.buckets.csv"))


def test_a_tuned_tape_in_a_custom_loop(hvd):
    """DistributedGradientTape in a tf.function tunes its buckets the same way."""
    folder = hvd.broadcast_object(tempfile.mkdtemp(prefix="kerashvd-buckets-") if hvd.rank() == 0
                                  else None, name="bucket_autotune.tape.folder")
    _restart(hvd, os.path.join(folder, "trials-{rank}.csv"))
    try:
        variables = [tf.Variable(tf.fill([256, 256], 0.01 * (i + 1))) for i in range(4)]
        holder = {}

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.add_n([tf.reduce_sum(tf.matmul(x, v)) for v in variables])
            tape = hvd.DistributedGradientTape(tape)
            holder["tape"] = tape
            return tape.gradient(loss, variables)

        x = tf.fill([2, 256], float(hvd.rank() + 1))
        for _ in range(16):
            grads = step(x)
        tuner = holder["tape"]._reducer._tuner
        state = [int(tuner.index.numpy()), bool(tuner.frozen.numpy())]
    finally:
        hvd.shutdown()
        hvd.init()
    n = hvd.size()
    for g in grads:  # the average of every rank's gradient: x's rows summed, per rank
        np.testing.assert_allclose(g.numpy(), np.full([256, 256], 2 * (n + 1) / 2), rtol=1e-6)
    states = hvd.allgather_object(state, name="bucket_autotune.tape.state")
    assert all(s == states[0] for s in states) and states[0][1], states
