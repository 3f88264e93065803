"""kerashvd and mpi4py in the same processes, imported in either order (launched with mpiexec)."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, mpiexec_path

_IMPORTS = {
    "mpi4py_first": "from mpi4py import MPI\nimport kerashvd as hvd\nhvd.init()\n",
    "kerashvd_imported_first": "import kerashvd as hvd\nfrom mpi4py import MPI\nhvd.init()\n",
    "kerashvd_initialized_first": "import kerashvd as hvd\nhvd.init()\nfrom mpi4py import MPI\n",
}

_BODY = """
import numpy as np
import tensorflow as tf

comm = MPI.COMM_WORLD
rank, size = hvd.rank(), hvd.size()
assert comm.Get_size() == size == 2, (comm.Get_size(), size)
assert comm.Get_rank() == rank
assert MPI.Is_initialized() and not MPI.Is_finalized()
assert MPI.Query_thread() == MPI.THREAD_MULTIPLE and hvd.mpi_threads_supported()

for step in range(10):  # interleave the two libraries' collectives
    send = np.arange(4, dtype=np.float64) * (rank + 1) + step
    recv = np.empty_like(send)
    comm.Allreduce(send, recv, op=MPI.SUM)
    expected = sum(np.arange(4, dtype=np.float64) * (q + 1) + step for q in range(size))
    assert np.array_equal(recv, expected), (recv, expected)
    got = hvd.allreduce(tf.constant(send), op=hvd.Sum, name=f"mixed/{step}")
    assert np.array_equal(got.numpy(), expected), (got.numpy(), expected)
assert comm.allgather(rank) == hvd.allgather_object(rank) == list(range(size))
assert comm.bcast({"from": rank}, root=1) == hvd.broadcast_object({"from": rank}, root_rank=1) == {"from": 1}
comm.Barrier()
hvd.barrier()
print(f"DONE rank {rank}", flush=True)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("order", list(_IMPORTS))
def test_mpi4py_and_kerashvd_share_one_mpi(order):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERASHVD_", "KHVD_", "PMI_"))}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                "KERASHVD_STALL_SHUTDOWN_TIME": "60"})
    script = _IMPORTS[order] + textwrap.dedent(_BODY)
    cmd = [mpiexec_path(), "-n", "2", sys.executable, "-c", script]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{output[-8000:]}"
    assert "DONE rank 0" in proc.stdout and "DONE rank 1" in proc.stdout, output[-8000:]
