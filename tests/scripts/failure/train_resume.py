"""A resumable data-parallel training script (used by tests/multiprocess/test_failures.py).

Usage::

    python train_resume.py CKPT_DIR [--resume] [--epochs 5] [--kill-epoch E --kill-batch B]

Trains with a DistributedOptimizer(Adam) for ``--epochs`` epochs of ``STEPS`` steps, rank 0
writing ``CKPT_DIR/model-{epoch:02d}.keras`` after every epoch with
``kerashvd.callbacks.ModelCheckpoint``. With ``--kill-epoch E --kill-batch B``, rank 1 SIGKILLs
itself at batch B of epoch E (0-based). With ``--resume`` it continues from the latest
checkpoint as the callbacks package documents: ``latest_checkpoint`` (the same answer on every
rank), ``load_model`` (weights and optimizer state), ``initial_epoch=ckpt.epoch``. Prints
``RANK r RESUMED epoch=E iterations=I file=F`` and ``RANK r FINISHED iterations=I``.
"""

import argparse
import os
import signal

import keras
import numpy as np
import tensorflow as tf

import kerashvd as hvd

STEPS, BATCH = 6, 8

parser = argparse.ArgumentParser()
parser.add_argument("ckpt_dir")
parser.add_argument("--resume", action="store_true")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--kill-epoch", type=int, default=None)
parser.add_argument("--kill-batch", type=int, default=3)
args = parser.parse_args()

hvd.init()
rank = hvd.rank()


class KillRank1(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if rank == 1 and self.epoch == args.kill_epoch and batch == args.kill_batch:
            print(f"RANK 1 KILLING ITSELF at epoch {self.epoch} batch {batch}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


initial_epoch = 0
checkpoint = hvd.callbacks.latest_checkpoint(args.ckpt_dir) if args.resume else None
if args.resume:
    if checkpoint is None:
        raise SystemExit(f"--resume: no checkpoint in {args.ckpt_dir}")
    model = hvd.load_model(checkpoint.path)
    initial_epoch = checkpoint.epoch
    print(f"RANK {rank} RESUMED epoch={checkpoint.epoch} "
          f"iterations={int(model.optimizer.iterations)} file={os.path.basename(checkpoint.path)}",
          flush=True)
else:
    keras.utils.set_random_seed(rank)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")

rng = np.random.default_rng(rank)
x = rng.normal(size=(STEPS * BATCH, 4)).astype(np.float32)
y = x.sum(axis=1, keepdims=True).astype(np.float32)
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()
model.fit(data, steps_per_epoch=STEPS, epochs=args.epochs, initial_epoch=initial_epoch,
          shuffle=False, verbose=0, callbacks=[
              hvd.callbacks.BroadcastGlobalVariablesCallback(0),
              hvd.callbacks.ModelCheckpoint(os.path.join(args.ckpt_dir, "model-{epoch:02d}.keras")),
              KillRank1(),
          ])
print(f"RANK {rank} FINISHED iterations={int(model.optimizer.iterations)}", flush=True)
