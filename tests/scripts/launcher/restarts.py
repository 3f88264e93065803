"""A rank for the restart tests: records each attempt, then fails, succeeds or waits.

Usage: ``python restarts.py DIR MODE``. Every rank joins MPI (mpi4py, so that MPICH makes
its shared-memory segment, which a killed rank leaves behind), waits at a barrier for the
others, and writes ``DIR/attempt<N>.rank<R>`` with its pid, the KERASHVD_RESTART_COUNT it saw
(``unset`` when there is none) and the time. N is that count (0 when unset). Then by MODE:

- ``kill-once``: rank 1 SIGKILLs itself on attempt 0; on later attempts every rank succeeds.
- ``fail-always``: rank 1 exits with code 3 on every attempt (without MPI_Finalize).
- ``wait``: every rank sleeps 60 s (to be interrupted).

Ranks that do not fail sleep 60 s while another fails, so the launcher must stop them. No
TensorFlow.
"""

import os
import signal
import sys
import time

from mpi4py import MPI

directory, mode = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
seen = os.environ.get("KERASHVD_RESTART_COUNT", "unset")
attempt = 0 if seen == "unset" else int(seen)
comm.Barrier()
path = os.path.join(directory, f"attempt{attempt}.rank{rank}")
with open(path + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {seen} {time.time()}")
os.replace(path + ".tmp", path)
print(f"rank {rank} attempt {attempt} started", flush=True)
comm.Barrier()  # both markers are written before anyone fails

if mode == "kill-once" and attempt == 0:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
elif mode == "fail-always":
    if rank == 1:  # os._exit: MPICH's MPI_Finalize at exit would wait for rank 0
        os._exit(3)
    time.sleep(60)
elif mode == "wait":
    time.sleep(60)
print(f"rank {rank} attempt {attempt} done", flush=True)
