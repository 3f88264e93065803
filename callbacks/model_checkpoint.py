"""Rank-0, crash-safe, resumable model checkpoints."""

import math
import os
import warnings

import numpy as np

import kerashvd as hvd
from kerashvd.training.keras_compat import KERAS_NAME, USES_TF_KERAS

from ._callback import Callback
from .checkpoint_io import atomic_save, read_record, remove_stale_temporaries, write_record
from .random_state import add_random_state
from .resume import batch_offset

__all__ = ["ModelCheckpoint"]

# The endings of single-file formats (written atomically), by save_weights_only. tf_keras also
# writes the legacy HDF5 format; its SavedModel and TF-checkpoint formats are several files.
_SUFFIXES = {False: (".keras", ".h5") if USES_TF_KERAS else (".keras",),
             True: (".weights.h5", ".h5") if USES_TF_KERAS else (".weights.h5",)}
_MAX_HINTS = ("acc", "auc", "precision", "recall", "fmeasure", "f1", "iou", "r2")
_MIN_HINTS = ("loss", "error", "mse", "mae", "mape", "msle", "crossentropy", "hinge")


class ModelCheckpoint(Callback):
    """Saves the model at the end of epochs, on rank 0 only, atomically, with a resume record.

    A drop-in for ``keras.callbacks.ModelCheckpoint`` (epoch frequency) in data-parallel
    jobs: every rank holds the same model, so only rank 0 writes; other ranks do nothing (no
    collectives, no waiting). Each file is written to a temporary file in the same directory,
    fsynced and renamed over the final name (:func:`atomic_save`), so a crash never leaves a
    half-written checkpoint under the final name; the temporary files a crash leaves are
    removed when training starts and at the next save. After each save, the record
    ``kerashvd_checkpoint.json`` in the file's directory names the file and the epochs
    completed; :func:`latest_checkpoint` reads it to resume::

        ckpt = hvd.callbacks.latest_checkpoint(ckpt_dir)      # same answer on every rank
        if ckpt:
            model = hvd.load_model(ckpt.path)                 # weights + optimizer state
        model.fit(..., initial_epoch=ckpt.epoch if ckpt else 0, callbacks=[
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),  # rank 0's state everywhere
            hvd.callbacks.ModelCheckpoint(path, initial_value_threshold=ckpt and ckpt.best)])

    Loading on rank 0 only also works (the other ranks build and compile the same model in
    code; the broadcast callback then copies rank 0's weights, iterations and optimizer slots).
    A full-model ``.keras`` file holds the optimizer state; a ``.weights.h5`` file does not.
    With Keras 2 (tf_keras) a full-model ``.h5`` file (legacy HDF5, optimizer state included)
    and ``.h5`` weights work too; tf_keras' SavedModel directories and TF checkpoints are
    several files, which cannot be replaced atomically, and are refused.

    The record is written right after the model file (two atomic renames, not one): a crash
    between them leaves a complete model file and a record of the previous save. With
    ``{epoch}`` in ``filepath`` that record names the previous, still intact file, so resuming
    is exact; with a fixed name the file is one epoch newer than the record says.

    With ``save_best_only``, the monitored value must be the same on every rank for rank 0's
    choice to mean anything: put :class:`MetricAverageCallback` (and, for ``val_*``,
    :class:`DistributedValidationCallback`) before this callback. Use one ``ModelCheckpoint``
    per directory (the record is per directory).

    Saves inside an epoch (``save_freq=N``, and :class:`PreemptionCallback`'s save) record the
    batches of the epoch already trained (``Checkpoint.step``), for :func:`fit_resumable` to
    continue from; their file is the epoch's name with ``-step{N:06d}`` before the suffix
    (or ``filepath`` formatted with ``batch=N`` when it holds ``{batch}``), so an epoch's
    saves never overwrite each other. The record also holds the optimizer's ``iterations``,
    which :func:`restore` checks against the loaded file.

    Args:
        filepath: where to save; may contain ``{epoch}`` (1-based, as in Keras) and log keys,
            e.g. ``"ckpt/model-{epoch:03d}.keras"``. Must end in ``.keras``, or
            ``.weights.h5`` with ``save_weights_only=True`` (Keras 2: or ``.h5``).
        monitor: the log key compared for ``save_best_only``.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (inferred from ``monitor``'s name).
        save_best_only: save only when ``monitor`` improves.
        save_weights_only: save weights (``model.save_weights``) instead of the whole model.
        initial_value_threshold: the best value so far (e.g. ``Checkpoint.best`` on resume);
            a model must beat it to be saved with ``save_best_only``.
        verbose: when > 0, rank 0 prints a line per save.
        save_freq: ``"epoch"``, or a number of batches N: then also every N batches inside
            an epoch (counted from the epoch's start; Keras' own callback would stop saving
            at epoch ends). Not with ``save_best_only``.
        max_to_keep: keep only the newest this many of the files this callback wrote
            (``None``: keep all). Older ones are deleted after the record names a newer
            file; files this callback did not write are never touched.

    Raises:
        ValueError: for a bad ``filepath`` suffix, ``mode``, ``save_freq`` or
            ``max_to_keep``, or a ``monitor`` whose direction ``mode="auto"`` cannot infer.

    Example:

    >>> import kerashvd as hvd
    >>> model.fit(x, y, validation_data=(x_val, y_val), epochs=5, callbacks=[
    ...     hvd.callbacks.MetricAverageCallback(),
    ...     hvd.callbacks.ModelCheckpoint("ckpt/best.keras", save_best_only=True),
    ... ])  # doctest: +SKIP
    """

    def __init__(self, filepath, monitor="val_loss", mode="auto", save_best_only=False,
                 save_weights_only=False, initial_value_threshold=None, verbose=0,
                 save_freq="epoch", max_to_keep=None):
        super().__init__()
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int)
                                     or save_freq < 1):
            raise ValueError("save_freq must be 'epoch' or a positive number of batches; "
                             f"received save_freq={save_freq!r}")
        if save_freq != "epoch" and save_best_only:
            raise ValueError("save_best_only compares epoch-end metrics; it cannot be combined "
                             f"with saves every {save_freq} batches (save_freq). Use two "
                             "ModelCheckpoints in two directories for both.")
        if max_to_keep is not None and (isinstance(max_to_keep, bool)
                                        or not isinstance(max_to_keep, int) or max_to_keep < 1):
            raise ValueError(f"max_to_keep must be None or an int >= 1; received {max_to_keep!r}")
        filepath = os.fspath(filepath)
        suffixes = _SUFFIXES[bool(save_weights_only)]
        if not filepath.endswith(suffixes):
            raise ValueError(
                f"filepath must end in {' or '.join(map(repr, suffixes))} with save_weights_only="
                f"{save_weights_only} on {KERAS_NAME}; received filepath={filepath!r}. "
                "ModelCheckpoint replaces single files atomically, so SavedModel directories "
                "and TF checkpoints are not supported.")
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode must be 'auto', 'min' or 'max'; received mode={mode!r}")
        if mode == "auto" and save_best_only:
            mode = _infer_mode(monitor)
        self.filepath = filepath
        self.monitor = monitor
        self.mode = mode
        self.save_best_only = bool(save_best_only)
        self.save_weights_only = bool(save_weights_only)
        self.best = None if initial_value_threshold is None else float(initial_value_threshold)
        self.verbose = verbose
        self.save_freq = save_freq
        self.max_to_keep = max_to_keep
        self._files = None  # the files written and kept, oldest first; from the record
        self._epoch = 0

    def on_train_begin(self, logs=None):
        directory = os.path.dirname(os.path.abspath(self.filepath))
        if hvd.rank() == 0 and "{" not in directory:
            remove_stale_temporaries(directory)  # left by a crash during a save

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        step = batch + 1 + batch_offset(self.model)
        steps = (getattr(self, "params", None) or {}).get("steps")
        if step % self.save_freq == 0 and not (steps and batch + 1 >= steps):
            self.save_position(self._epoch, step, logs)  # the last batch: on_epoch_end saves

    def save_position(self, epoch, step, logs=None):
        """Saves now, inside epoch ``epoch`` (0-based) after ``step`` of its batches, on rank 0.

        Every rank may call it; only rank 0 writes. The record then says ``epoch`` epochs
        and ``step`` batches are done. Used by ``save_freq=N`` and :class:`PreemptionCallback`.

        Returns:
            The path written (on rank 0), else None.
        """
        if hvd.rank() != 0:
            return None
        logs = dict(logs or {})
        path = self.filepath.format(**{**logs, "epoch": epoch + 1, "batch": step})
        if "{batch" not in self.filepath:
            stem, suffix = _split_suffix(path)
            path = f"{stem}-step{step:06d}{suffix}"
        return self._write(path, epoch, step)

    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() != 0:
            return
        logs = dict(logs or {})
        current = logs.get(self.monitor)
        if self.save_best_only:
            if current is None:
                warnings.warn(f"ModelCheckpoint: can save best model only with {self.monitor} "
                              f"available; skipping. Logged keys: {sorted(logs)}", stacklevel=2)
                return
            current = float(current)
            if not self._improves(current):
                return
            self.best = current
        steps = (getattr(self, "params", None) or {}).get("steps") or 0
        path = self.filepath.format(**{**logs, "epoch": epoch + 1,
                                       "batch": steps + batch_offset(self.model)})
        self._write(path, epoch + 1, 0)

    def _write(self, path, epoch, step):
        """Writes the model to ``path``, then the record, then drops files past max_to_keep."""
        directory = os.path.dirname(os.path.abspath(path))
        save = self.model.save_weights if self.save_weights_only else self.model.save

        def writer(tmp_path):
            save(tmp_path)
            add_random_state(self.model, tmp_path)  # Keras leaves the dropout RNG state out

        atomic_save(path, writer)
        files = [f for f in self._kept_files(directory) if os.path.abspath(f) != os.path.abspath(path)]
        files.append(path)
        dropped = files[:-self.max_to_keep] if self.max_to_keep else []
        files = files[len(dropped):]
        optimizer = getattr(self.model, "optimizer", None)
        iterations = None if optimizer is None or self.save_weights_only else int(np.asarray(optimizer.iterations))
        write_record(directory, path, epoch, monitor=self.monitor if self.save_best_only else None,
                     best=self.best, step=step, iterations=iterations, files=files)
        self._files = files
        for old in dropped:  # only after the record names a newer file
            try:
                os.remove(old)
            except FileNotFoundError:
                pass
        if self.verbose:
            where = f"Epoch {epoch}" if not step else f"Epoch {epoch + 1}, batch {step}"
            print(f"\n{where}: saved model to {path}")
        return path

    def _kept_files(self, directory):
        """The files this callback (or the run it resumes) wrote into ``directory``."""
        if self._files is None:
            try:
                record = read_record(directory)
            except (OSError, ValueError):
                record = None
            self._files = list(record.files) if record is not None else []
        return self._files

    def _improves(self, value):
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        return value < self.best if self.mode == "min" else value > self.best


class BestModelCheckpoint(ModelCheckpoint):
    """Saves the model each time ``monitor`` improves: Horovod's name for
    ``ModelCheckpoint(..., save_best_only=True)``, with the same rank-0, atomic saving.

    Args:
        filepath: where to save (see :class:`ModelCheckpoint`).
        monitor: the log key to improve, ``"val_loss"`` by default.
        verbose: when > 0, rank 0 prints a line per save.
        mode: ``"min"``, ``"max"`` or ``"auto"``.
        save_freq: ``"epoch"``.

    Example:

    >>> import kerashvd as hvd
    >>> model.fit(x, y, validation_data=(x_val, y_val), epochs=5, callbacks=[
    ...     hvd.callbacks.MetricAverageCallback(),
    ...     hvd.callbacks.BestModelCheckpoint("ckpt/best.keras", monitor="val_loss"),
    ... ])  # doctest: +SKIP
    """

    def __init__(self, filepath, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch"):
        super().__init__(filepath, monitor=monitor, mode=mode, save_best_only=True,
                         verbose=verbose, save_freq=save_freq)


def _split_suffix(path):
    """("dir/model-003", ".keras") for "dir/model-003.keras"; knows the two-part ".weights.h5"."""
    for suffix in (".weights.h5", ".keras", ".h5"):
        if path.endswith(suffix):
            return path[:-len(suffix)], suffix
    return os.path.splitext(path)


def _infer_mode(monitor):
    name = monitor.removeprefix("val_").lower()
    if any(hint in name for hint in _MIN_HINTS):
        return "min"
    if any(hint in name for hint in _MAX_HINTS):
        return "max"
    raise ValueError(f"ModelCheckpoint cannot infer whether monitor={monitor!r} should be "
                     "minimized or maximized; pass mode='min' or mode='max'.")
