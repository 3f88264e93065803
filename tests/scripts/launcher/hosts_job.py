"""A rank of the multi-host launcher tests (tests/cluster/test_ssh_launch.py). No TensorFlow.

Usage: ``python hosts_job.py MODE [RANK CODE]``. Every rank joins MPI (mpi4py, so that MPICH
makes its shared-memory segment on each host, which a rank killed before MPI_Finalize leaves
behind), prints one JSON line {"rank", "size", "host", "local_size" (the ranks MPI finds on
this host: MPI_COMM_TYPE_SHARED), "pid", "probe" (the value of KHVD_PROBE, or null),
"restart" (KERASHVD_RESTART_COUNT, or null)} and waits at a barrier until every rank has
printed. Then, by MODE:

- ``ok``: every rank ends normally.
- ``fail RANK CODE``: rank RANK exits with CODE without MPI_Finalize; the others sleep 60 s
  (the launcher must stop them).
- ``fail-first RANK CODE``: as ``fail`` on the first attempt (KERASHVD_RESTART_COUNT unset or
  0); on later attempts every rank ends normally.
- ``wait``: every rank sleeps 60 s (to be interrupted).
"""

import json
import os
import socket
import sys
import time

from mpi4py import MPI

mode = sys.argv[1]
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
restart = os.environ.get("KERASHVD_RESTART_COUNT")
local_size = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
sys.stdout.write(json.dumps({"rank": rank, "size": comm.Get_size(), "host": socket.gethostname(),
                             "local_size": local_size, "pid": os.getpid(),
                             "probe": os.environ.get("KHVD_PROBE"), "restart": restart}) + "\n")
sys.stdout.flush()
comm.Barrier()

failing = mode == "fail" or mode == "fail-first" and restart in (None, "0")
if failing and rank == int(sys.argv[2]):
    os._exit(int(sys.argv[3]))  # MPICH's MPI_Finalize at exit would wait for the others
if failing or mode == "wait":
    time.sleep(60)
    print(f"rank {rank} was not stopped", flush=True)
