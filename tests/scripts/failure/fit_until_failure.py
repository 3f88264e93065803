"""A data-parallel training job in which one rank fails on purpose (used by tests/multiprocess/test_failures.py).

Usage::

    python fit_until_failure.py STATE_DIR --failure {kill,raise,stop} [--where {fit,collective}]
        [--fail-rank 1] [--at-batch 3]

Every rank writes ``STATE_DIR/pid.RANK`` and trains a small model with a DistributedOptimizer
for far longer than any test waits. ``--where fit``: the failing rank fails in a callback at
``--at-batch`` of the first epoch, inside ``model.fit``. ``--where collective``: the other
ranks wait in an allreduce that the failing rank never joins; it fails after 1 s. Failures:
``kill`` (SIGKILL itself), ``raise`` (a RuntimeError), ``stop`` (SIGSTOP itself: a frozen
rank, which the test must SIGKILL). Just before failing, the rank writes the time to
``STATE_DIR/failed_at``. Every other rank that gets an error prints one line
``RANK r ERROR <unix time> <type>: <message>`` (and writes it to ``STATE_DIR/error.RANK``)
and re-raises it.
"""

import argparse
import os
import signal
import time

parser = argparse.ArgumentParser()
parser.add_argument("state_dir")
parser.add_argument("--failure", choices=["kill", "raise", "stop"], required=True)
parser.add_argument("--where", choices=["fit", "collective"], default="fit")
parser.add_argument("--fail-rank", type=int, default=1)
parser.add_argument("--at-batch", type=int, default=3)
args = parser.parse_args()


def write_atomically(name, text):
    path = os.path.join(args.state_dir, name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


rank = int(os.environ.get("PMI_RANK", "0"))
write_atomically(f"pid.{rank}", str(os.getpid()))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kerashvd as hvd  # noqa: E402

hvd.init()
assert hvd.rank() == rank


def fail():
    write_atomically("failed_at", repr(time.time()))
    print(f"RANK {rank} FAILING ({args.failure})", flush=True)
    if args.failure == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif args.failure == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(3600)  # only if someone sends SIGCONT
    raise RuntimeError(f"injected failure on rank {rank}")


class FailAtBatch(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == args.at_batch:
            fail()


def work():
    if args.where == "collective":
        hvd.allreduce(tf.ones([4]), name="before")  # every rank is up and connected
        if rank == args.fail_rank:
            time.sleep(1.0)
            fail()
        print(f"RANK {rank} WAITING in allreduce", flush=True)
        hvd.allreduce(tf.ones([4]), name="never_completes")
        return
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = rng.normal(size=(64, 1)).astype(np.float32)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    if rank == args.fail_rank:
        callbacks.append(FailAtBatch())
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    model.fit(data, steps_per_epoch=50, epochs=1000, callbacks=callbacks, shuffle=False, verbose=0)


try:
    work()
except Exception as err:
    if rank == args.fail_rank:
        raise
    line = f"RANK {rank} ERROR {time.time():.6f} {type(err).__name__}: {err}"
    write_atomically(f"error.{rank}", line)
    print(line, flush=True)
    raise
print(f"RANK {rank} FINISHED WITHOUT ERROR", flush=True)
