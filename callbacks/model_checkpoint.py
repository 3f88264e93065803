"""Keras' ModelCheckpoint for data-parallel jobs: rank 0 saves, atomically, with a resume record."""

import math
import os
import warnings

import numpy as np

import kerashvd as hvd
from kerashvd.training.keras_compat import KERAS_NAME, USES_TF_KERAS, keras

from ._callback import Callback
from .checkpoint_io import atomic_save, remove_stale_temporaries
from .checkpoint_record import Checkpoint, read_record, write_record
from .random_state import add_random_state
from .resume import batch_offset

__all__ = ["BestModelCheckpoint", "ModelCheckpoint"]

# The endings of single-file formats (written atomically), by save_weights_only. tf_keras also
# writes the legacy HDF5 format; its SavedModel and TF-checkpoint formats are several files.
_SUFFIXES = {False: (".keras", ".h5") if USES_TF_KERAS else (".keras",),
             True: (".weights.h5", ".h5") if USES_TF_KERAS else (".weights.h5",)}
_MAX_HINTS = ("acc", "auc", "precision", "recall", "fmeasure", "f1", "iou", "r2")
_MIN_HINTS = ("loss", "error", "mse", "mae", "mape", "msle", "crossentropy", "hinge")


class ModelCheckpoint(Callback):
    """``keras.callbacks.ModelCheckpoint`` on rank 0, saving atomically, with a resume record.

    At the end of each epoch a ``keras.callbacks.ModelCheckpoint`` built from these arguments
    decides whether to save (``save_best_only``, ``monitor``, ``mode``,
    ``initial_value_threshold``), names the file (``{epoch}`` and log keys in ``filepath``) and
    saves. kerashvd adds what a job of many ranks needs:

    - **Rank 0 saves**; every rank holds the same model, so the others do nothing.
    - **Atomic files** (:func:`atomic_save`): a crash never leaves half a checkpoint under
      the final name.
    - **A resume record**, ``kerashvd_checkpoint.json`` in the file's directory, written
      after each file: the file and its position (epochs done, batches of the next epoch, the
      optimizer's ``iterations``). :func:`latest_checkpoint` reads it for every rank;
      :func:`restore` and :func:`fit_resumable` resume there.
    - **Saves at any batch**: ``save_freq=N`` saves every N batches counted from the epoch's
      start (also after a resume) and at the epoch's end; :class:`PreemptionCallback` saves
      where a signal stopped training. Their files get ``-step{N:06d}`` before the suffix (or
      ``batch=N`` in a ``{batch}`` field), so an epoch's saves never overwrite each other.
    - **Random state**: the dropout layers' generator state, which Keras leaves out, is added
      to each file, for a bit-exact resume.
    - ``max_to_keep``: only the newest files this callback wrote are kept.

    A ``.keras`` file holds the optimizer state; a ``.weights.h5`` file does not. With Keras 2
    (tf_keras) full-model and weights ``.h5`` files work too; SavedModel directories and TF
    checkpoints are several files, which cannot be replaced atomically, and are refused.

    With ``save_best_only``, the monitored value must be the same on every rank for rank 0's
    choice to mean anything: put :class:`MetricAverageCallback` (and, for ``val_*``,
    :class:`DistributedValidationCallback`) before this callback. A missing or NaN value is
    never an improvement, whatever the Keras version. Use one ``ModelCheckpoint`` per
    directory (the record is per directory).

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
        verbose: when > 0, rank 0 prints Keras' line per epoch-end save and one per save
            inside an epoch.
        save_freq: ``"epoch"``, or a number of batches N (see above). Not with
            ``save_best_only``.
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
        if save_freq != "epoch" and not _positive_int(save_freq):
            raise ValueError("save_freq must be 'epoch' or a positive number of batches; "
                             f"received save_freq={save_freq!r}")
        if save_freq != "epoch" and save_best_only:
            raise ValueError("save_best_only compares epoch-end metrics; it cannot be combined "
                             f"with saves every {save_freq} batches (save_freq). Use two "
                             "ModelCheckpoints in two directories for both.")
        if max_to_keep is not None and not _positive_int(max_to_keep):
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
        self.filepath, self.monitor, self.mode = filepath, monitor, mode
        self.save_best_only, self.save_weights_only = bool(save_best_only), bool(save_weights_only)
        self.verbose, self.save_freq, self.max_to_keep = verbose, save_freq, max_to_keep
        # Keras decides and saves at epoch ends, through _AtomicSaving. Its mode only matters
        # with save_best_only; elsewhere "min" keeps Keras from inferring one from the name.
        self._keras = keras.callbacks.ModelCheckpoint(
            filepath, monitor=monitor, verbose=verbose, save_best_only=self.save_best_only,
            save_weights_only=self.save_weights_only,
            mode=mode if self.save_best_only else "min",
            initial_value_threshold=initial_value_threshold)
        self._saving = None
        self._files = None  # the files written and kept, oldest first; from the record
        self._epoch = 0

    @property
    def best(self):
        """The best monitored value so far (``None`` before the first)."""
        best = self._keras.best
        return None if best is None or not math.isfinite(float(best)) else float(best)

    def set_model(self, model):
        """Keras calls this before training; Keras' ``ModelCheckpoint`` then sees ``model``
        through a view whose ``save`` and ``save_weights`` write atomically.

        Args:
            model: the model being trained.

        Raises:
            TypeError: for a model of the other Keras (see ``TF_USE_LEGACY_KERAS``).
        """
        super().set_model(model)
        self._saving = _AtomicSaving(model)
        self._keras.set_model(self._saving)

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

    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() != 0:
            return
        logs = dict(logs or {})
        if self.save_best_only:  # Keras 3.3 and tf_keras skip these; later Keras 3 saves
            current = logs.get(self.monitor)
            if current is None:
                warnings.warn(f"ModelCheckpoint: can save best model only with {self.monitor} "
                              f"available; skipping. Logged keys: {sorted(logs)}", stacklevel=2)
                return
            if math.isnan(float(current)):
                return
        steps = (getattr(self, "params", None) or {}).get("steps") or 0
        logs["batch"] = steps + batch_offset(self.model)  # for {batch} in filepath
        self._saving.written = None
        self._keras.on_epoch_end(epoch, logs)
        if self._saving.written:
            self._record(self._saving.written, epoch + 1, 0)

    def save_position(self, epoch, step, logs=None):
        """Saves now, inside epoch ``epoch`` (0-based) after ``step`` of its batches, on rank 0.

        Every rank may call it; only rank 0 writes. The record then says ``epoch`` epochs
        and ``step`` batches are done. Used by ``save_freq=N`` and :class:`PreemptionCallback`.

        Returns:
            The path written (on rank 0), else None.
        """
        if hvd.rank() != 0:
            return None
        path = self.filepath.format(**{**(logs or {}), "epoch": epoch + 1, "batch": step})
        if "{batch" not in self.filepath:
            stem, suffix = _split_suffix(path)
            path = f"{stem}-step{step:06d}{suffix}"
        save = self._saving.save_weights if self.save_weights_only else self._saving.save
        save(path, overwrite=True)
        self._record(path, epoch, step)
        if self.verbose:
            print(f"\nEpoch {epoch + 1}, batch {step}: saved model to {path}")
        return path

    def _record(self, path, epoch, step):
        """Records ``path`` at its position, then drops the files past ``max_to_keep``."""
        directory = os.path.dirname(os.path.abspath(path))
        files = [f for f in self._kept_files(directory) if os.path.abspath(f) != os.path.abspath(path)]
        files.append(path)
        dropped = files[:-self.max_to_keep] if self.max_to_keep else []
        files = files[len(dropped):]
        optimizer = getattr(self.model, "optimizer", None)
        iterations = (None if optimizer is None or self.save_weights_only
                      else int(np.asarray(optimizer.iterations)))
        write_record(directory, Checkpoint(
            path, epoch, monitor=self.monitor if self.save_best_only else None, best=self.best,
            step=step, iterations=iterations, files=tuple(files)))
        self._files = files
        for old in dropped:  # only after the record names a newer file
            try:
                os.remove(old)
            except FileNotFoundError:
                pass

    def _kept_files(self, directory):
        """The files this callback (or the run it resumes) wrote into ``directory``."""
        if self._files is None:
            try:
                record = read_record(directory)
            except (OSError, ValueError):
                record = None
            self._files = list(record.files) if record is not None else []
        return self._files


class _AtomicSaving:
    """The model as Keras' ``ModelCheckpoint`` sees it: ``save`` and ``save_weights`` write
    through :func:`atomic_save` and add the random state (``written`` is the last file);
    everything else is the model's own."""

    def __init__(self, model):
        self._model = model
        self.written = None

    def __getattr__(self, name):  # only for names not found on the view itself
        if name == "_model":
            raise AttributeError(name)
        return getattr(self._model, name)

    def save(self, filepath, *args, **kwargs):
        self._write(filepath, lambda tmp: self._model.save(tmp, *args, **kwargs))

    def save_weights(self, filepath, *args, **kwargs):
        self._write(filepath, lambda tmp: self._model.save_weights(tmp, *args, **kwargs))

    def _write(self, filepath, save):
        def write(tmp_path):
            save(tmp_path)
            add_random_state(self._model, tmp_path)  # Keras leaves the dropout RNG state out

        self.written = atomic_save(filepath, write)


class BestModelCheckpoint(ModelCheckpoint):
    """Saves the model each time ``monitor`` improves: Horovod's name for
    ``ModelCheckpoint(..., save_best_only=True)``, with the same rank-0, atomic saving.

    Args:
        filepath: where to save (see :class:`ModelCheckpoint`).
        monitor: the log key to improve, ``"val_loss"`` by default.
        verbose: when > 0, rank 0 prints a line per epoch.
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


def _positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


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
