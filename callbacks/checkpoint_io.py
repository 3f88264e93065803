"""Crash-safe checkpoint files, and finding the latest one to resume from.

A checkpoint directory written by :class:`ModelCheckpoint` holds model files and one small
JSON record, ``kerashvd_checkpoint.json``, naming the newest model file and the number of
epochs completed when it was written. Both are written with :func:`atomic_save`: the bytes go
to a hidden temporary file in the same directory, are fsynced, and the file is renamed over
the final name with ``os.replace`` (atomic on POSIX and Windows), then the directory is
fsynced. A crash at any point leaves either the old file or the new one, never half of one,
and the record is written after the model file it names.

A crash while writing leaves the hidden temporary file behind (up to a model's size). Its
name holds the writer's host and process id, ``.tmp-HOST-PID-TAG-NAME``, so the next
:func:`atomic_save` in the directory (and ``ModelCheckpoint`` when training starts) removes
the ones no live process can own: those of this host whose process is gone, and those of
other hosts untouched for a day. Nothing else in the directory is ever removed.
"""

import collections
import json
import os
import re
import socket
import time
import uuid
import warnings

import kerashvd as hvd

__all__ = ["Checkpoint", "atomic_save", "latest_checkpoint"]

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
    remove_stale_temporaries(directory)
    tmp_path = os.path.join(directory, f".tmp-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
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


_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
# .tmp-HOST-PID-TAG-NAME (HOST has no '-'); files of older versions have no HOST.
_TEMPORARY = re.compile(r"^\.tmp-(?:(?P<host>[A-Za-z0-9._]+)-)?(?P<pid>\d+)-[0-9a-f]{8}-.")
_OTHER_HOST_AGE = 24 * 3600.0


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. PermissionError: it exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(directory):
    """Removes the temporary files of writers that died in ``directory``; returns their names.

    Only names of :func:`atomic_save`'s pattern are considered: this host's whose process is
    gone, other hosts' not modified for a day (a live write keeps its file changing).
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        match = _TEMPORARY.match(name)
        if match is None:
            continue
        path = os.path.join(directory, name)
        host = match.group("host")
        try:
            if host in (None, _HOST):
                pid = int(match.group("pid"))
                if pid == os.getpid() or _process_alive(pid):
                    continue
            elif time.time() - os.path.getmtime(path) < _OTHER_HOST_AGE:
                continue
            os.remove(path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
        removed.append(name)
    return removed


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


def write_record(directory, path, epoch, monitor=None, best=None, step=0, iterations=None,
                 files=()):
    """Atomically records ``path`` as the latest checkpoint in ``directory``."""
    record = {"path": _relative(path, directory), "epoch": int(epoch), "step": int(step),
              "iterations": None if iterations is None else int(iterations),
              "monitor": monitor, "best": None if best is None else float(best),
              "files": [_relative(f, directory) for f in files]}

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
        path = os.path.join(directory, record["path"])
        iterations = record.get("iterations")
        checkpoint = Checkpoint(path=path, epoch=int(record["epoch"]),
                                monitor=record.get("monitor"), best=record.get("best"),
                                step=int(record.get("step", 0)),
                                iterations=None if iterations is None else int(iterations),
                                files=tuple(os.path.join(directory, f)
                                            for f in record.get("files", ())))
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(
            f"The checkpoint record {record_path} cannot be read ({type(err).__name__}: {err}); "
            "it should be the JSON that ModelCheckpoint writes, e.g. {\"path\": "
            "\"model-03.keras\", \"epoch\": 3, ...}. Fix or delete it: without it training "
            "starts from scratch, or load a model file of the directory yourself "
            "(fit(initial_epoch=...)).") from err
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"The checkpoint record {record_path} names {path} (epoch {checkpoint.epoch}), "
            "which does not exist: was it moved or deleted? Restore the file, or delete the "
            "record to start from scratch (resuming would otherwise silently restart).")
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
        A ``Checkpoint(path, epoch, monitor, best)``, or ``None`` when there is none.

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
    if not broadcast:
        found, warning = _find(dirname, required)
    else:
        outcome = None
        if hvd.rank() == root_rank:
            try:
                found, warning = _find(dirname, required)
                outcome = ("ok", found and tuple(found), warning)
            except (OSError, ValueError) as err:
                outcome = ("error", err, None)
        kind, value, warning = hvd.broadcast_object(outcome, root_rank=root_rank,
                                                    name="callbacks.latest_checkpoint")
        if kind == "error":
            raise value
        found = None if value is None else Checkpoint(*value)
    if warning and hvd.rank() == 0:
        warnings.warn(warning, stacklevel=2)
    return found
