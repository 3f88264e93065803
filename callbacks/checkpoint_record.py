"""Which checkpoint to resume from: the directory's record, read once and shared by every rank.

A directory written by :class:`ModelCheckpoint` holds model files and one small JSON record,
``kerashvd_checkpoint.json``, written atomically (:func:`atomic_save`) right after each model
file: the newest file, the position it was saved at (epochs completed, batches of the next
epoch, the optimizer's ``iterations``), the best monitored value, and the files kept for
``max_to_keep``. :func:`latest_checkpoint` reads it on one rank and broadcasts it, so every
rank resumes from the same file and position even when the ranks' views of a network file
system disagree for a moment.

The file and the record are two atomic renames, not one: a crash between them leaves the
record of the previous save. With ``{epoch}`` in ``ModelCheckpoint``'s ``filepath`` that
record names the previous, intact file; with a fixed name :func:`restore` sees (from
``iterations``) that the file is newer than its record, and says so.
"""

import collections
import json
import os
import warnings

import kerashvd as hvd

from .checkpoint_io import atomic_save

__all__ = ["Checkpoint", "latest_checkpoint"]

RECORD_NAME = "kerashvd_checkpoint.json"

Checkpoint = collections.namedtuple(
    "Checkpoint", ["path", "epoch", "monitor", "best", "step", "iterations", "files"],
    defaults=(0, None, ()))
Checkpoint.__doc__ = """The latest checkpoint in a directory.

Fields:
    path: the model (or weights) file.
    epoch: epochs completed when it was written; pass it to ``fit(initial_epoch=...)``.
    monitor: the monitored quantity's name, or ``None``.
    best: the best monitored value so far, or ``None``; pass it to
        ``ModelCheckpoint(initial_value_threshold=...)`` to keep ``save_best_only`` going.
    step: batches of epoch ``epoch + 1`` already trained when it was written (0 for a save
        at the end of an epoch); :func:`fit_resumable` continues from there.
    iterations: the optimizer's ``iterations`` when it was written (``None`` if unknown);
        :func:`restore` checks the loaded file against it.
    files: the files the writing ``ModelCheckpoint`` keeps (oldest first), for its
        ``max_to_keep``.
"""


def on_root(fn, root_rank, name):
    """Runs ``fn()`` on ``root_rank`` only; every rank returns its result, or raises the
    ``OSError``/``ValueError`` it raised. Every rank must call it (one broadcast)."""
    outcome = None
    if hvd.rank() == root_rank:
        try:
            outcome = (fn(), None)
        except (OSError, ValueError) as err:
            outcome = (None, err)
    result, error = hvd.broadcast_object(outcome, root_rank=root_rank, name=name)
    if error is not None:
        raise error
    return result


def write_record(directory, checkpoint):
    """Atomically records ``checkpoint`` (a :class:`Checkpoint`) as the latest in ``directory``."""
    record = checkpoint._asdict()
    record["path"] = _relative(checkpoint.path, directory)
    record["files"] = [_relative(f, directory) for f in checkpoint.files]

    def write(tmp_path):
        with open(tmp_path, "w") as f:
            json.dump(record, f)

    atomic_save(os.path.join(directory, RECORD_NAME), write)


def _relative(path, directory):
    return os.path.relpath(os.path.abspath(path), os.path.abspath(directory))


def read_record(directory):
    """The :class:`Checkpoint` recorded in ``directory``, or None when there is no record.

    Raises:
        ValueError: the record cannot be read (corrupt or from something else).
        FileNotFoundError: the record names a model file that is missing.
    """
    record_path = os.path.join(directory, RECORD_NAME)
    try:
        with open(record_path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
        iterations = record.get("iterations")
        checkpoint = Checkpoint(
            path=os.path.join(directory, record["path"]), epoch=int(record["epoch"]),
            monitor=record.get("monitor"), best=record.get("best"),
            step=int(record.get("step", 0)),
            iterations=None if iterations is None else int(iterations),
            files=tuple(os.path.join(directory, f) for f in record.get("files", ())))
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(
            f"The checkpoint record {record_path} cannot be read ({type(err).__name__}: {err}); "
            "it should be the JSON that ModelCheckpoint writes, e.g. {\"path\": "
            "\"model-03.keras\", \"epoch\": 3, ...}. Fix or delete it: without it training "
            "starts from scratch, or load a model file of the directory yourself "
            "(fit(initial_epoch=...)).") from err
    if not os.path.exists(checkpoint.path):
        raise FileNotFoundError(
            f"The checkpoint record {record_path} names {checkpoint.path} (epoch "
            f"{checkpoint.epoch}), which does not exist: was it moved or deleted? Restore the "
            "file, or delete the record to start from scratch (resuming would otherwise "
            "silently restart).")
    return checkpoint


def _find(dirname, required):
    """(checkpoint or None, warning text or None) for ``dirname``; raises as documented."""
    if not os.path.isdir(dirname):
        if required:
            raise FileNotFoundError(
                f"latest_checkpoint(required=True): the checkpoint directory {dirname!r} does "
                "not exist. Check the path (a typo would restart training from scratch), or "
                "pass required=False for a first run.")
        return None, (f"The checkpoint directory {dirname!r} does not exist: no checkpoint to "
                      "resume from, training starts from scratch. If you meant to resume, check "
                      "the path; pass required=True to make this an error.")
    found = read_record(dirname)
    if found is None and required:
        raise FileNotFoundError(
            f"latest_checkpoint(required=True): the directory {dirname!r} holds no checkpoint "
            f"record ({RECORD_NAME}, written by hvd.callbacks.ModelCheckpoint). Check the path, "
            "or pass required=False to start from scratch.")
    return found, None


def latest_checkpoint(dirname, *, root_rank=0, broadcast=True, required=False):
    """Returns the latest :class:`Checkpoint` written by ``ModelCheckpoint`` in ``dirname``.

    By default ``root_rank`` reads the record and broadcasts it, so every rank resumes from
    the same epoch even when file systems disagree (every rank must call it then). With
    ``broadcast=False`` each rank reads the record itself and no collective runs.

    A directory that does not exist is most often a mistyped path: rank 0 warns
    (``UserWarning``) that training starts from scratch, and ``required=True`` makes it an
    error, as it does a directory without a checkpoint.

    Args:
        dirname: the checkpoint directory (the directory of ``ModelCheckpoint``'s files).
        root_rank: the rank that reads the record when broadcasting.
        broadcast: share ``root_rank``'s answer with every rank.
        required: raise instead of returning None when there is no checkpoint.

    Returns:
        A ``Checkpoint(path, epoch, monitor, best, step, iterations, files)``, or ``None``
        when there is none.

    Raises:
        ValueError: the record is corrupt (the message names it and what to do).
        FileNotFoundError: the record names a model file that is missing; with
            ``required=True`` also when ``dirname`` does not exist or holds no record (the
            message names the directory). With ``broadcast``, every rank raises the error
            ``root_rank`` met.

    Example:

    >>> import kerashvd as hvd
    >>> ckpt = hvd.callbacks.latest_checkpoint("/tmp/ckpt")
    >>> if ckpt is not None:  # doctest: +SKIP
    ...     model = hvd.load_model(ckpt.path)  # restores the optimizer state too
    ...     model.fit(x, y, epochs=10, initial_epoch=ckpt.epoch,
    ...               callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    """
    dirname = os.fspath(dirname)
    if broadcast:
        found, warning = on_root(lambda: _find(dirname, required), root_rank,
                                 "callbacks.latest_checkpoint")
    else:
        found, warning = _find(dirname, required)
    if warning and hvd.rank() == 0:
        warnings.warn(warning, stacklevel=2)
    return found
