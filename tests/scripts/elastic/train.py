"""Elastic training for the tests: a small Keras regression under ``hvd.elastic.run``, whose
every step can be recomputed by a run of fixed size (``--reference``).

Rank ``r``'s batch at step ``s`` of epoch ``e`` is drawn from a seed made of (e, s, r), so a
run that trains the same global steps on the same world sizes sees the same data; the model
starts from a fixed seed on rank 0 (``sync()`` gives it to every rank); SGD with momentum has
optimizer state to carry over; the learning rate is ``BASE_LR * hvd.size()``, set by the
state's reset callback. Training goes through ``hvd.callbacks.fit_resumable`` from
``state.epoch``/``state.batch``, so a new world goes on exactly at the commit.

Usage::

    kerashvdrun --min-np 2 ... python train.py OUT [--epochs 3] [--steps 12] [--pace S]
        [--commit-every N] [--hold STEP:SIZE] [--fail-at STEP]
    kerashvdrun -np 3 python train.py OUT --reference 3:0:7,2:7:36 --save OUT/ref.npz

Elastic runs print JSON lines: ``{"event": "world", ...}`` (rank 0, when a world starts
training, with the global step it starts from), ``{"event": "step", ...}`` (rank 0, after
each step), ``{"event": "hold", ...}`` and ``{"event": "final", ...}`` (every rank, with a
digest of its model and optimizer variables); every rank writes OUT/pid.W.R. Rank 0 saves the
final variables to OUT/final.npz. ``--reference`` trains phases of fixed sizes in one world
(a smaller phase on a process set of the first ranks) and saves the end to ``--save``.
``--hold STEP:SIZE`` makes a world of fewer than SIZE ranks
wait at global step STEP (checking for host updates) until hosts come, at most 120 s.
``--fail-at STEP`` makes every rank raise ``ValueError`` after global step STEP (an error of
the script's own).
"""

import argparse
import hashlib
import json
import os
import socket
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kerashvd as hvd  # noqa: E402
from kerashvd.training.keras_compat import optimizer_variables  # noqa: E402

BASE_LR = 0.02
FEATURES, BATCH = 16, 8

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=12, help="steps per epoch")
parser.add_argument("--pace", type=float, default=0.0, help="seconds of sleep per step")
parser.add_argument("--commit-every", type=int, default=1)
parser.add_argument("--hold", default=None, help="STEP:SIZE")
parser.add_argument("--fail-at", type=int, default=None, help="STEP")
parser.add_argument("--reference", default=None, help="SIZE:START:STOP,... (no elastic)")
parser.add_argument("--save", default=None)
args = parser.parse_args()

hvd.init()
rank, size = hvd.rank(), hvd.size()
world = int(os.environ.get("KERASHVD_RESTART_COUNT", "0"))
started = time.time()


def emit(**record):
    print(json.dumps(dict(record, time=time.time())), flush=True)


def batches(epoch, step):
    """This rank's batches of ``epoch`` from ``step`` on."""
    xs, ys = [], []
    for s in range(step, args.steps):
        rng = np.random.default_rng([epoch, s, rank])
        x = rng.normal(size=(BATCH, FEATURES)).astype("float32")
        xs.append(x)
        ys.append((np.sin(x[:, :4]).sum(axis=1, keepdims=True) + 0.1 * x[:, 4:5]).astype("float32"))
    return tf.data.Dataset.from_tensor_slices((np.array(xs), np.array(ys)))


def build_model(ranks, process_set):
    """The model, compiled for ``ranks`` ranks reducing over ``process_set``."""
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(BASE_LR * ranks, momentum=0.9)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer, process_set=process_set),
                  loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


keras.utils.set_random_seed(1234)
model = build_model(size, hvd.global_process_set)


def all_variables():
    return list(model.variables) + optimizer_variables(model.optimizer)


def digest():
    h = hashlib.sha256()
    for v in all_variables():
        h.update(np.asarray(v.numpy()).tobytes())
    return h.hexdigest()


def save(path):
    np.savez(path, *[np.asarray(v.numpy()) for v in all_variables()])


class Pace(keras.callbacks.Callback):
    """Sleeps after each step; rank 0 reports it."""

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(args.pace)


class Report(keras.callbacks.Callback):
    """After the commit of a step: rank 0 prints it; a small world waits at --hold."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        step = self.state.epoch * args.steps + self.state.batch
        if rank == 0:
            emit(event="step", world=world, size=size, step=step, loss=float(logs["loss"]))
        if step == args.fail_at:
            raise ValueError(f"bad input at step {step}")
        if args.hold:
            hold_step, hold_size = map(int, args.hold.split(":"))
            if step == hold_step and size < hold_size:
                emit(event="hold", world=world, rank=rank, size=size, step=step)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    time.sleep(0.2)
                    self.state.check_host_updates()
                raise RuntimeError("no host came within 120 s of the hold")


if args.reference:
    # Phases "SIZE:START:STOP,...": global steps START..STOP on ranks 0..SIZE-1 (a process set
    # when SIZE is less than the world), each phase from the state the one before left.
    values = None
    for phase in args.reference.split(","):
        phase_size, start, stop = map(int, phase.split(":"))
        members = hvd.global_process_set if phase_size == size else \
            hvd.add_process_set(list(range(phase_size)))
        if rank >= phase_size:
            continue
        keras.utils.set_random_seed(1234)
        model = build_model(phase_size, members)
        for v, value in zip(all_variables(), values or []):
            v.assign(value)
        model.optimizer.learning_rate.assign(BASE_LR * phase_size)

        class StopAt(keras.callbacks.Callback):
            """Stops training after global step ``stop``."""

            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch  # fit_resumable numbers epochs from the run's start

            def on_train_batch_end(self, batch, logs=None):
                done = self.epoch * args.steps + hvd.callbacks.batch_offset(self.model) + \
                    batch + 1
                self.model.stop_training = done >= stop

        epoch0, step0 = divmod(start, args.steps)
        hvd.callbacks.fit_resumable(model, batches, epochs=args.epochs,
                                    steps_per_epoch=args.steps, initial_epoch=epoch0,
                                    initial_step=step0, callbacks=[StopAt()], verbose=0)
        values = [np.asarray(v.numpy()) for v in all_variables()]
        emit(event="phase", rank=rank, size=phase_size, start=start, stop=stop,
             digest=digest())
    if rank == 0:
        save(args.save)
    sys.exit(0)

with open(os.path.join(args.out, f"pid.{world}.{rank}"), "w") as f:
    f.write(str(os.getpid()))

state = hvd.elastic.KerasState(model, epoch=0, batch=0)
state.register_reset_callbacks([lambda: model.optimizer.learning_rate.assign(BASE_LR * size)])
callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
             hvd.elastic.UpdateBatchStateCallback(state),
             Pace(),
             hvd.elastic.CommitStateCallback(state, batches_per_commit=args.commit_every),
             Report(state)]


@hvd.elastic.run
def train(state):
    if rank == 0:
        emit(event="world", world=world, size=size, step=state.epoch * args.steps + state.batch,
             started=started)
    hvd.callbacks.fit_resumable(state.model, batches, epochs=args.epochs,
                                steps_per_epoch=args.steps, initial_epoch=state.epoch,
                                initial_step=state.batch, callbacks=callbacks, verbose=0)


train(state)
if rank == 0:
    save(os.path.join(args.out, "final.npz"))
emit(event="final", rank=rank, size=size, world=world, digest=digest(),
     host=socket.gethostname())
