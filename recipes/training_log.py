"""Per-epoch throughput and a CSV log of training, shared by the recipes.

:class:`EpochLog` times the training part of every epoch (from ``on_epoch_begin`` to the
start of validation, or to the end of the epoch without validation), counts the batches this
rank trained, and gathers every rank's rate, so rank 0 can report images/s per rank and in
total. Rank 0 prints one line per epoch and appends one row per epoch to a CSV file whose
columns are :data:`FIELDS`; a rerun that resumes from a checkpoint appends to the same file.

Place it after ``MetricAverageCallback`` so the losses it logs are the averages over ranks.
Every rank must pass it (it gathers the ranks' rates, a collective).
"""

import csv
import os
import statistics
import time

import keras
import numpy as np

import kerashvd as hvd

FIELDS = ["epoch", "loss", "accuracy", "val_loss", "val_accuracy", "lr",
          "images_per_sec", "images_per_sec_per_rank", "seconds"]


def learning_rate(optimizer):
    """The optimizer's current learning rate as a Python float."""
    return float(np.asarray(keras.ops.convert_to_numpy(optimizer.learning_rate)))


class EpochLog(keras.callbacks.Callback):
    """Times each epoch's training steps; rank 0 prints images/s and appends a CSV row.

    Args:
        batch_size: images per step on this rank.
        csv_path: the CSV file rank 0 appends to (header written when the file is new);
            ``None`` for no file.
        verbose: when true, rank 0 prints one line per epoch.

    Attributes:
        rows: the rows logged so far (dicts keyed by :data:`FIELDS`), on every rank.
    """

    def __init__(self, batch_size, csv_path=None, verbose=True):
        super().__init__()
        self.batch_size = int(batch_size)
        self.csv_path = csv_path
        self.verbose = verbose
        self.rows = []
        self._start = self._train_end = None
        self._steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._steps, self._train_end = 0, None
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1

    def on_test_begin(self, logs=None):
        if self._start is not None and self._train_end is None:
            self._train_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        train_seconds = (self._train_end or now) - self._start
        rate = self._steps * self.batch_size / max(train_seconds, 1e-9)
        rates = hvd.allgather_object(rate, name=f"recipes.epoch_log.{epoch}")
        logs = logs or {}
        row = {"epoch": epoch + 1, "lr": learning_rate(self.model.optimizer),
               "images_per_sec": sum(rates), "images_per_sec_per_rank": statistics.fmean(rates),
               "seconds": now - self._start}
        for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
            if key in logs:
                row[key] = float(logs[key])
        self.rows.append(row)
        if hvd.rank() != 0:
            return
        if self.verbose:
            print(f"Epoch {epoch + 1}: {row['images_per_sec']:.1f} images/s in total on "
                  f"{hvd.size()} rank(s), {row['images_per_sec_per_rank']:.1f} per rank; "
                  f"{row['seconds']:.1f} s", flush=True)
        if self.csv_path:
            write_row(self.csv_path, row)


def write_row(path, row):
    """Appends ``row`` to the CSV file ``path`` (columns :data:`FIELDS`), with a header if new."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
