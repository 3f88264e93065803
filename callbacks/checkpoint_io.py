"""Crash-safe checkpoint files, and finding the latest one to resume from.

A checkpoint directory written by :class:`ModelCheckpoint` holds model files and one small
JSON record, ``kerashvd_checkpoint.json``, naming the newest model file and the number of
epochs completed when it was written. Both are written with :func:`atomic_save`: the bytes go
to a hidden temporary file in the same directory, are fsynced, and the file is renamed over
the final name with ``os.replace`` (atomic on POSIX and Windows), then the directory is
fsynced. A crash at any point leaves either the old file or the new one, never half of one,
and the record is written after the model file it names.
"""

import collections
import json
import os
import uuid

import kerashvd as hvd

__all__ = ["Checkpoint", "atomic_save", "latest_checkpoint"]

RECORD_NAME = "kerashvd_checkpoint.json"

Checkpoint = collections.namedtuple("Checkpoint", ["path", "epoch", "monitor", "best"])
Checkpoint.__doc__ = """The latest checkpoint in a directory.

Fields:
    path: the model (or weights) file.
    epoch: epochs completed when it was written; pass it to ``fit(initial_epoch=...)``.
    monitor: the monitored quantity's name, or ``None``.
    best: the best monitored value so far, or ``None``; pass it to
        ``ModelCheckpoint(initial_value_threshold=...)`` to keep ``save_best_only`` going.
"""


def atomic_save(filepath, write_fn):
    """Writes a file so that ``filepath`` is always either the old file or the complete new one.

    ``write_fn(tmp_path)`` writes the content to ``tmp_path``, a hidden file in the same
    directory whose name ends like ``filepath`` (so ``model.save`` sees the ``.keras`` or
    ``.weights.h5`` suffix it requires). The file is then fsynced and renamed over
    ``filepath``, and the directory fsynced. If ``write_fn`` raises, the temporary file is
    removed, ``filepath`` is untouched, and the exception propagates.

    Args:
        filepath: the final path; its directory is created if needed.
        write_fn: a function taking the temporary path.

    Returns:
        ``filepath``.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.callbacks.atomic_save("/tmp/ckpt/model.keras", model.save)  # doctest: +SKIP
    '/tmp/ckpt/model.keras'
    """
    directory = os.path.dirname(os.path.abspath(filepath))
    os.makedirs(directory, exist_ok=True)
    tmp_path = os.path.join(directory, f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
                                       f"{os.path.basename(filepath)}")
    try:
        write_fn(tmp_path)
        if not os.path.isfile(tmp_path):
            raise FileNotFoundError(f"atomic_save: write_fn did not create a file at {tmp_path}")
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, filepath)
    except BaseException:
        if os.path.lexists(tmp_path):
            os.remove(tmp_path)
        raise
    _fsync_directory(directory)
    return filepath


def _fsync_directory(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows: directories cannot be opened; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_record(directory, path, epoch, monitor=None, best=None):
    """Atomically records ``path`` as the latest checkpoint in ``directory``."""
    record = {"path": os.path.relpath(os.path.abspath(path), os.path.abspath(directory)),
              "epoch": int(epoch), "monitor": monitor,
              "best": None if best is None else float(best)}

    def write(tmp_path):
        with open(tmp_path, "w") as f:
            json.dump(record, f)

    atomic_save(os.path.join(directory, RECORD_NAME), write)


def read_record(directory):
    try:
        with open(os.path.join(directory, RECORD_NAME)) as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    path = os.path.join(directory, record["path"])
    if not os.path.exists(path):
        return None
    return Checkpoint(path=path, epoch=int(record["epoch"]), monitor=record.get("monitor"),
                      best=record.get("best"))


def latest_checkpoint(dirname, *, root_rank=0, broadcast=True):
    """Returns the latest :class:`Checkpoint` written by ``ModelCheckpoint`` in ``dirname``.

    By default ``root_rank`` reads the record and broadcasts it, so every rank resumes from
    the same epoch even when file systems disagree (every rank must call it then). With
    ``broadcast=False`` each rank reads the record itself and no collective runs.

    Args:
        dirname: the checkpoint directory (the directory of ``ModelCheckpoint``'s files).
        root_rank: the rank that reads the record when broadcasting.
        broadcast: share ``root_rank``'s answer with every rank.

    Returns:
        A ``Checkpoint(path, epoch, monitor, best)``, or ``None`` when there is none.

    Example:

    >>> import kerashvd as hvd
    >>> ckpt = hvd.callbacks.latest_checkpoint("/tmp/ckpt")
    >>> if ckpt is not None:  # doctest: +SKIP
    ...     model = keras.models.load_model(ckpt.path)  # restores the optimizer state too
    ...     model.fit(x, y, epochs=10, initial_epoch=ckpt.epoch,
    ...               callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    """
    if not broadcast:
        return read_record(dirname)
    found = read_record(dirname) if hvd.rank() == root_rank else None
    found = hvd.broadcast_object(found and tuple(found), root_rank=root_rank,
                                 name="callbacks.latest_checkpoint")
    return None if found is None else Checkpoint(*found)
