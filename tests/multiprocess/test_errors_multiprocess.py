"""Failures that involve several processes: stalls, stall shutdown, a rank shutting down.

Each test launches ``mpiexec -n 2`` on a small script and bounds it with a subprocess timeout,
so a regression shows up as a failed test, never as a hung test run.
"""

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO, mpiexec_path


def run_mpi(script, np=2, timeout=150, **settings):
    """Runs ``script`` on ``np`` ranks; returns (exit code, stdout, stderr, seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERASHVD_", "KHVD_", "PMI_"))}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    env.update({k: str(v) for k, v in settings.items()})
    header = "import kerashvd as hvd\nimport tensorflow as tf\nhvd.init()\nrank = hvd.rank()\n"
    cmd = [mpiexec_path(), "-n", str(np), sys.executable, "-c", header + textwrap.dedent(script)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


@pytest.mark.mpi
def test_stall_warning_names_the_tensor_and_the_missing_rank():
    """Rank 1 reaches 'lonely' late twice: first a new name, then one the response cache knows."""
    code, out, err, _ = run_mpi("""
        import time
        for attempt in range(2):
            if rank == 1:
                time.sleep(5)  # rank 0 waits alone for longer than KERASHVD_STALL_CHECK_TIME
            got = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="lonely")
            assert float(got[0]) == 2.0
        print(f"DONE rank {rank}", flush=True)
    """, KERASHVD_STALL_CHECK_TIME=2)
    assert code == 0, out + err
    assert "DONE rank 0" in out and "DONE rank 1" in out, out + err
    warnings = [line for line in err.splitlines() if "WARNING: Stalled" in line]
    assert len(warnings) == 2, err  # one warning per stalled collective
    for line in warnings:
        assert line.startswith("[kerashvd rank 0] WARNING: Stalled allreduce 'lonely'"), line
        assert "submitted by ranks [0]" in line and "still missing on ranks [1]" in line, line


@pytest.mark.mpi
def test_stall_in_a_process_set_names_world_ranks_and_stops_only_that_set():
    """Set {1, 2} of 3 ranks: rank 1 submits, rank 2 never does. The set's coordinator is
    world rank 1; the warning and the error name world ranks; the world goes on."""
    code, out, err, seconds = run_mpi("""
        import time
        pair = hvd.add_process_set([1, 2])
        if rank == 1:
            try:
                hvd.allreduce(tf.ones([2]), process_set=pair, name="lonely")
            except tf.errors.AbortedError as err:
                print(f"ERROR rank 1: {err}", flush=True)
        else:
            # The world meets again after the set's stall shutdown (~3 s) and well before the
            # world's own stall shutdown would end rank 1's wait there (~6 s).
            time.sleep(4.5)
        got = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="world_after")
        print(f"WORLD rank {rank} {float(got)}", flush=True)
    """, np=3, KERASHVD_STALL_CHECK_TIME=1, KERASHVD_STALL_SHUTDOWN_TIME=3)
    assert code == 0, out + err
    warnings = [line for line in err.splitlines() if "WARNING: Stalled allreduce 'lonely'" in line]
    assert len(warnings) == 1, err
    assert warnings[0].startswith("[kerashvd rank 1] WARNING: Stalled allreduce 'lonely'")
    assert "submitted by ranks [1], still missing on ranks [2]" in warnings[0], warnings[0]
    error = next(line for line in out.splitlines() if line.startswith("ERROR rank 1"))
    assert "KERASHVD_STALL_SHUTDOWN_TIME was exceeded" in error, error
    for r in range(3):
        assert f"WORLD rank {r} 3.0" in out, out + err


@pytest.mark.mpi
def test_stall_shutdown_fails_every_rank_and_the_processes_exit():
    code, out, err, seconds = run_mpi("""
        import time
        start = time.monotonic()
        try:
            if rank == 0:
                hvd.allreduce(tf.ones([2]), name="only_on_rank0")
            else:
                hvd.allgather(tf.ones([2]), name="only_on_rank1")  # blocked in another collective
        except tf.errors.AbortedError as err:
            print(f"RANK {rank} ABORTED after {time.monotonic() - start:.1f} s: {err}", flush=True)
        else:
            print(f"RANK {rank} NO ERROR", flush=True)
        try:  # the engine has stopped: later collectives fail at once, with the reason
            hvd.allreduce(tf.ones([2]), name="later")
        except tf.errors.AbortedError as err:
            print(f"RANK {rank} LATER ABORTED: {err}", flush=True)
        print(f"DONE rank {rank}", flush=True)
    """, KERASHVD_STALL_CHECK_TIME=2, KERASHVD_STALL_SHUTDOWN_TIME=4)
    assert code == 0, out + err
    for r in (0, 1):
        assert f"DONE rank {r}" in out, out + err
        # hydra forwards both ranks' output through one pipe and may join their lines, so
        # look for each rank's report anywhere, up to the next rank's marker.
        match = re.search(rf"RANK {r} ABORTED after ([0-9.]+) s: (.*?)(?=RANK \d|DONE rank|$)", out, re.S)
        assert match, out + err
        report = match.group(2)
        assert "KERASHVD_STALL_SHUTDOWN_TIME" in report, report
        assert "only_on_rank0" in report or "only_on_rank1" in report, report
        waited = float(match.group(1))
        assert 4 <= waited < 40, match.group(0)
        assert f"RANK {r} LATER ABORTED" in out and "KERASHVD_STALL_SHUTDOWN_TIME" in out, out
    assert seconds < 140


@pytest.mark.mpi
def test_shutdown_on_one_rank_fails_the_others_pending_collective():
    code, out, err, _ = run_mpi("""
        import time
        if rank == 1:
            time.sleep(1)
            hvd.shutdown()
        else:
            try:
                hvd.allreduce(tf.ones([2]), name="never")
            except tf.errors.AbortedError as err:
                print(f"RANK 0 ABORTED: {err}", flush=True)
        print(f"DONE rank {rank}", flush=True)
    """, KERASHVD_STALL_SHUTDOWN_TIME=60)
    assert code == 0, out + err
    assert "DONE rank 0" in out and "DONE rank 1" in out, out + err
    assert "RANK 0 ABORTED" in out and "shut down" in out, out + err


@pytest.mark.mpi
def test_broadcast_gradient_in_tf_function_does_not_hang():
    """Regression: non-root ranks must not prune the broadcast gradient's allreduce from the graph
    (it once fed only tf.zeros_like there, and the root waited forever)."""
    code, out, err, _ = run_mpi("""
        x = tf.constant([1.0, 2.0, 3.0])
        w = tf.constant([1.0, 1.0, 1.0]) * (rank + 1)

        @tf.function
        def grad(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(w * hvd.broadcast(x, root_rank=0, name="b"))
            return tape.gradient(loss, x)

        g = grad(x).numpy().tolist()
        # Horovod's definition: the ranks' gradients (1 and 2) averaged, on the root only.
        assert g == ([1.5] * 3 if rank == 0 else [0.0] * 3), g
        print(f"DONE rank {rank}", flush=True)
    """, KERASHVD_STALL_CHECK_TIME=2, KERASHVD_STALL_SHUTDOWN_TIME=5)
    assert code == 0, out + err
    assert "DONE rank 0" in out and "DONE rank 1" in out, out + err
