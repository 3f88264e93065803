"""Removes the shared-memory segments that MPICH ranks killed on this host left behind.

MPICH's shared-memory transport keeps one file per job and host in ``/dev/shm``
(``mpich_shm_<hash of the PMI job name>_<n>``) and removes it in ``MPI_Finalize``. A rank
killed before that (SIGKILL, a walltime or a failure test) leaves it there. Under SLURM the PMI
job name is ``<job id>.<step>``, so a later job with the same id (a fresh test cluster numbers
its jobs from 1 again; a cluster whose job ids wrapped) opens the dead job's file in
``MPI_Init`` and fails there ("Out of memory" in ``MPIDI_POSIX_comm_bootstrap``, or "Message
truncated").

A segment is dead when no live process has it mapped or open: the ranks of the job that made
it map it for their whole life, and the process creating one holds it open from
``shm_open`` until it has mapped it, so a segment being made right now is never taken for
dead. Only segments that appeared after a given moment are removed (the ones the caller's own
job made), unless the caller asks for all.

The standard library and psutil (a dependency of kerashvd) only: the per-rank supervisor
loads this file by path, and the launcher runs it on other hosts after a job (``python -I
shm_segments.py [BEFORE...]``: removes the dead segments not named, waiting up to
:data:`SETTLE` seconds for those still in use). psutil is imported only when there are
segments to check.
"""

import os
import sys
import time

SHM_DIR = "/dev/shm"
PREFIX = "mpich_shm_"
SETTLE = 3.0  # seconds ranks still exiting after their job's end may hold their segment


def segments(shm_dir=SHM_DIR):
    """The names of MPICH's segments in ``shm_dir`` now (a set; empty where there is none)."""
    try:
        return {name for name in os.listdir(shm_dir) if name.startswith(PREFIX)}
    except OSError:
        return set()


def in_use(paths):
    """Of ``paths``, those that some live process has mapped or open.

    Processes this one may not inspect (another user's) are left out, so run it as the user
    of the ranks. Reads every process's memory maps: about 0.4 s on a host running a hundred
    processes, TensorFlow ranks among them.
    """
    import psutil  # here: the supervisor imports this module at every rank's start

    used = set()
    for proc in psutil.process_iter():
        try:
            used.update(m.path for m in proc.memory_maps(grouped=False) if m.path in paths)
            used.update(f.path for f in proc.open_files() if f.path in paths)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # gone, or not ours to read
    return used


def remove_dead(before=None, shm_dir=SHM_DIR):
    """Removes MPICH segments that no live process uses; returns the names removed.

    Args:
        before: the result of :func:`segments` taken before the caller's job started: those
            are left alone (another job's). ``None`` considers every segment.
        shm_dir: where the segments live.
    """
    candidates = segments(shm_dir) - (before or set())
    if not candidates:
        return []
    paths = {os.path.join(shm_dir, name) for name in candidates}
    removed = []
    for path in sorted(paths - in_use(paths)):
        try:
            os.unlink(path)
        except OSError:
            continue  # removed meanwhile, or not ours
        removed.append(os.path.basename(path))
    return removed


def remove_dead_after_job(before, settle=SETTLE, shm_dir=SHM_DIR):
    """Removes the segments a job that has just ended left behind: those not in ``before``
    that no live process uses, waiting up to ``settle`` seconds for ranks still on their way
    out to let go of theirs."""
    deadline = time.monotonic() + settle
    while True:
        remove_dead(before, shm_dir)
        if not segments(shm_dir) - before or time.monotonic() > deadline:
            return
        time.sleep(0.1)


if __name__ == "__main__":
    remove_dead_after_job(set(sys.argv[1:]))
