"""The shared-memory pair (ops/core/backend/shm/shm_pair.h) against MPI, end to end.

Two ranks on one host allreduce through the engine's own segment; with
``shm_allreduce=False`` they go through MPI. Both paths must give the same bits on both ranks:
every reducible dtype (halves reduced in float32), every op, in place and out of place, sizes
within one 2 MiB chunk and across several, and fused groups. The values include NaN
(the same payload on both ranks), infinities and signed zeros. The pair is seen in use through
its mapping among the process's memory maps (psutil), and nothing of it is left in /dev/shm afterwards.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, mpiexec_path

_SCRIPT = textwrap.dedent("""
    import hashlib
    import re
    import numpy as np
    import psutil
    import tensorflow as tf
    import kerashvd as hvd

    def mapped():  # the segment only: libraries may live under a path with "kerashvd-" in it
        return any(re.match(r"/dev/shm/kerashvd-[0-9]+-[0-9a-f]+", m.path)
                   for m in psutil.Process().memory_maps(grouped=False))

    def values(dtype, n, rank):
        rng = np.random.default_rng(1000 + rank)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        x = rng.standard_normal(n) * 100
        special = rng.integers(0, 12, n)
        x[special == 0] = np.nan
        x[special == 1] = np.inf if rank else -np.inf
        x[special == 2] = -0.0 if rank else 0.0
        return x.astype(dtype)

    dtypes = [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.float16,
              tf.bfloat16.as_numpy_dtype]
    ops = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
           "Product": hvd.Product}
    results = {}
    used = {}
    for shm in (True, False):
        hvd.init(shm_allreduce=shm)
        rank = hvd.rank()
        assert hvd.size() == 2 and hvd.local_size() == 2
        for dtype in dtypes:
            for name, op in ops.items():
                if name == "Average" and np.issubdtype(dtype, np.integer):
                    continue
                for n in (1, 1001, 1_300_001):
                    if n > 1001 and (name in ("Min", "Product") or dtype in (np.int8, np.uint8)):
                        continue  # one op and two wide types cross chunks: enough, and quick
                    x = tf.constant(values(dtype, n, rank))
                    key = f"{np.dtype(dtype).name}/{name}/{n}"
                    out = hvd.allreduce(x, op=op, name="pair." + key)  # out of place
                    inplace = tf.function(lambda t: hvd.allreduce(t * 1, op=op, name="pair.ip." + key))(x)
                    results[(shm, key)] = hashlib.sha1(out.numpy().tobytes() + inplace.numpy().tobytes()).hexdigest()
        group = [tf.constant(values(np.float32, n, rank)) for n in (3, 700_000, 5, 300_000)]
        fused = hvd.grouped_allreduce(group, op=hvd.Average, name="pair.group")
        results[(shm, "group")] = hashlib.sha1(b"".join(t.numpy().tobytes() for t in fused)).hexdigest()
        used[shm] = mapped()
        hvd.shutdown()
    assert used == {True: True, False: False}, used
    assert not mapped()  # the pair's mapping goes with the engine
    differ = [k for (shm, k) in results if shm and results[(True, k)] != results[(False, k)]]
    assert not differ, f"rank {rank}: the pair and MPI differ for {differ}"
    from mpi4py import MPI
    all_results = MPI.COMM_WORLD.allgather(results)
    assert all_results[0] == all_results[1], "the ranks got different bits"
    print(f"PAIR OK rank {rank}: {len(results) // 2} cases", flush=True)
""")


@pytest.mark.mpi
def test_shm_pair_gives_mpis_bits_on_both_ranks(shm_segments_left):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERASHVD_", "KHVD_", "PMI_"))}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                "KERASHVD_STALL_SHUTDOWN_TIME": "60"})
    before = {f for f in os.listdir("/dev/shm") if f.startswith("kerashvd-")}
    cmd = [mpiexec_path(), "-n", "2", sys.executable, "-c", _SCRIPT]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{output[-8000:]}"
    assert "PAIR OK rank 0" in proc.stdout and "PAIR OK rank 1" in proc.stdout, output[-8000:]
    left = {f for f in os.listdir("/dev/shm") if f.startswith("kerashvd-")} - before
    assert not left, f"segments left in /dev/shm: {sorted(left)}"
