"""DistributedOptimizer with Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1) under mpiexec -n 2.

The test runs this file as a script on 2 ranks; each rank trains with ``model.fit`` and checks
its weights against one process trained on the concatenation of both ranks' batches.
"""

import os
import subprocess
import sys

import pytest

WORLD = 2
STEPS, BATCH = 4, 2


@pytest.mark.mpi
def test_keras2_fit_under_mpiexec():
    pytest.importorskip("tf_keras")
    from conftest import REPO, mpiexec_path

    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1",
               KERASHVD_STALL_CHECK_TIME="20", KERASHVD_STALL_SHUTDOWN_TIME="60")
    cmd = [mpiexec_path(), "-n", str(WORLD), sys.executable, os.path.abspath(__file__)]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{output[-8000:]}"
    assert output.count("KERAS2 OK") == WORLD, output[-4000:]


# -- the script each rank runs --------------------------------------------------------------
def _make_model(tf_keras, np):
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(4, activation="tanh"),
                                 tf_keras.layers.Dense(1)])
    rng = np.random.RandomState(0)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _reference(tf, tf_keras, np, optimizer, x, y, batch):
    model = _make_model(tf_keras, np)
    loss_fn = tf_keras.losses.MeanSquaredError()
    for start in range(0, len(x), batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[start:start + batch], model(x[start:start + batch]))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return model.get_weights()


def main():
    import numpy as np
    import tensorflow as tf
    import tf_keras

    import kerashvd as hvd
    from kerashvd.optimizer import keras2

    assert tf.keras.optimizers.SGD is tf_keras.optimizers.SGD, "TF_USE_LEGACY_KERAS=1 must be set"
    hvd.init()
    n, r = hvd.size(), hvd.rank()
    rng = np.random.RandomState(1)
    gx = rng.uniform(-1, 1, (STEPS, n, BATCH, 3)).astype("float32")
    gy = (np.sin(3 * gx).sum(-1, keepdims=True) + 0.1).astype("float32")
    x, y = gx[:, r].reshape(-1, 3), gy[:, r].reshape(-1, 1)
    full_x, full_y = gx.reshape(-1, 3), gy.reshape(-1, 1)

    cases = [  # (name, make optimizer, DistributedOptimizer kwargs, reference batch)
        ("sgd", lambda: tf.keras.optimizers.SGD(0.05, momentum=0.9), {}, n * BATCH),
        ("adam", lambda: tf_keras.optimizers.Adam(0.05), {}, n * BATCH),
        ("adam_bpps", lambda: tf_keras.optimizers.Adam(0.05),
         {"backward_passes_per_step": 2, "average_aggregated_gradients": True}, 2 * n * BATCH),
    ]
    for name, make_optimizer, kwargs, ref_batch in cases:
        opt = hvd.DistributedOptimizer(make_optimizer(), **kwargs)
        assert isinstance(opt, keras2.DistributedOptimizer), type(opt)
        model = _make_model(tf_keras, np)
        model.compile(optimizer=opt, loss="mse")
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        expected = _reference(tf, tf_keras, np, make_optimizer(), full_x, full_y, ref_batch)
        assert int(opt.iterations) == STEPS * BATCH * n // ref_batch, (name, int(opt.iterations))
        for got, want in zip(model.get_weights(), expected):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=name)
        blob = b"".join(w.tobytes() for w in model.get_weights())
        gathered = hvd.allgather_object(blob, name=f"keras2.{name}")
        assert all(g == gathered[0] for g in gathered), f"{name}: weights differ between ranks"
    config = opt.get_config()
    again = keras2.DistributedOptimizer.from_config(config)
    assert again.get_config()["backward_passes_per_step"] == 2
    print(f"KERAS2 OK rank {r}", flush=True)


if __name__ == "__main__":
    main()
