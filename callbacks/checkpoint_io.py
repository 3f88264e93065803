"""Crash-safe checkpoint files: each one is replaced whole or not at all.

Keras writes a checkpoint straight to its final name, so a process killed mid-save (a walltime
limit, a preemption, an out-of-memory kill) leaves half a file there, which the next run then
fails to load or, worse, loads. :func:`atomic_save` writes to a hidden temporary file in the
same directory instead, fsyncs it, renames it over the final name with ``os.replace`` (atomic
on POSIX and Windows) and fsyncs the directory: a crash at any point leaves either the old
file or the new one.

A crash while writing leaves the temporary file behind (up to a model's size). Its name holds
the writer's host and process id, ``.tmp-HOST-PID-TAG-NAME``, so the next :func:`atomic_save`
in the directory (and ``ModelCheckpoint`` when training starts) removes the ones no live
process can own: those of this host whose process is gone, and those of other hosts untouched
for a day. Nothing else in the directory is ever removed.
"""

import os
import re
import socket
import time
import uuid

import psutil

__all__ = ["atomic_save"]


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

    Raises:
        FileNotFoundError: ``write_fn`` returned without creating the file.

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
        try:
            if match.group("host") in (None, _HOST):
                if psutil.pid_exists(int(match.group("pid"))):
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
