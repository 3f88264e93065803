"""A data-parallel Keras job that trains until a node fails (used by tests/cluster/test_node_failures.py).

Usage::

    python fit_across_nodes.py STATE_DIR CKPT_DIR

Every rank writes ``STATE_DIR/pid.RANK`` (its process id) and ``STATE_DIR/host.RANK`` (its
node), then trains a small model with a DistributedOptimizer for far longer than any test
waits, in epochs of a few steps; rank 0 saves ``CKPT_DIR/model.keras`` after every epoch with
``kerashvd.callbacks.ModelCheckpoint`` (atomically, with the resume record). Each step sleeps
a little so that the job leaves the loaded test machine some CPU. A rank whose training fails
writes one line ``RANK r ERROR <unix time> <host> <type>: <message>`` to
``STATE_DIR/error.RANK`` (and prints it) and re-raises.
"""

import os
import socket
import sys
import time

state_dir, ckpt_dir = sys.argv[1], sys.argv[2]
rank = int(os.environ.get("PMI_RANK", "0"))
host = socket.gethostname()


def write_atomically(name, text):
    path = os.path.join(state_dir, name)
    with open(f"{path}.{os.getpid()}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{path}.{os.getpid()}.tmp", path)


write_atomically(f"pid.{rank}", str(os.getpid()))
write_atomically(f"host.{rank}", host)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kerashvd as hvd  # noqa: E402

hvd.init()
assert hvd.rank() == rank


class Pace(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)


rng = np.random.default_rng(rank)
x = rng.normal(size=(64, 8)).astype(np.float32)
y = x.sum(axis=1, keepdims=True).astype(np.float32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
try:
    model.fit(data, steps_per_epoch=5, epochs=100_000, shuffle=False, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.ModelCheckpoint(os.path.join(ckpt_dir, "model.keras")),
        Pace(),
    ])
except Exception as err:
    line = f"RANK {rank} ERROR {time.time():.6f} {host} {type(err).__name__}: {err}"
    write_atomically(f"error.{rank}", line)
    print(line, flush=True)
    raise
print(f"RANK {rank} FINISHED WITHOUT ERROR", flush=True)
