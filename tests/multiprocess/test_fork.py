"""A child process forked after init() gets an error from kerashvd at once, not a hang.

fork() copies the engine into the child, but not its background threads nor a place in the
parent's MPI communicator, so before the fix a collective there waited forever. The script
below forks three children after init(): one with os.fork() that tries every kind of call,
one multiprocessing worker with the 'fork' start method, and one that calls shutdown() and
then init(). Each child must finish within
CHILD_SECONDS, and the parent's collectives must keep working. The script runs as one process
and as two MPI ranks, each under a subprocess timeout, so a regression fails instead of hanging.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, mpiexec_path

CHILD_SECONDS = 30

SCRIPT = textwrap.dedent(r"""
    import multiprocessing
    import os
    import sys
    import time

    import tensorflow as tf
    import kerashvd as hvd

    CHILD_SECONDS = float(sys.argv[1])
    hvd.init()
    rank, size, parent = hvd.rank(), hvd.size(), os.getpid()
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="before").numpy()[0] == size


    def expect_fork_error(what, call, error_type):
        start = time.monotonic()
        try:
            call()
        except error_type as err:
            message = str(err)
            for part in (f"process {os.getpid()}", f"fork of process {parent}", "'spawn'",
                         "kerashvdrun"):
                assert part in message, (what, part, message)
            took = time.monotonic() - start
            assert took < 5, (what, took)
            return
        raise AssertionError(f"{what} did not raise in a forked child")


    def child_calls():
        # The inherited state still answers; everything that communicates refuses.
        assert hvd.is_initialized()
        assert (hvd.rank(), hvd.size()) == (rank, size)
        failed = tf.errors.FailedPreconditionError
        expect_fork_error("allreduce", lambda: hvd.allreduce(tf.constant([1.0]), name="child"),
                          failed)
        expect_fork_error("broadcast", lambda: hvd.broadcast(tf.constant([1.0]), 0), failed)
        expect_fork_error("allgather", lambda: hvd.allgather(tf.constant([1.0])), failed)
        expect_fork_error("barrier", hvd.barrier, failed)
        expect_fork_error("join", hvd.join, failed)
        expect_fork_error("broadcast_object", lambda: hvd.broadcast_object(1), failed)
        expect_fork_error("add_process_set", lambda: hvd.add_process_set([0]), RuntimeError)
        expect_fork_error("init", hvd.init, RuntimeError)


    def wait(pid, what):
        deadline = time.monotonic() + CHILD_SECONDS
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (what, status)
                return
            time.sleep(0.05)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError(f"rank {rank}: the {what} child did not finish within "
                             f"{CHILD_SECONDS} s (it hangs)")


    # 1. os.fork(): every kind of call, then os._exit.
    pid = os.fork()
    if pid == 0:
        try:
            child_calls()
            code = 0
        except BaseException as err:  # noqa: BLE001  (reported by the exit status)
            print(f"rank {rank} os.fork child: {type(err).__name__}: {err}", flush=True)
            code = 1
        os._exit(code)
    wait(pid, "os.fork")

    # 2. A multiprocessing worker started with 'fork'.
    worker = multiprocessing.get_context("fork").Process(target=child_calls)
    worker.start()
    worker.join(CHILD_SECONDS)
    if worker.is_alive():
        worker.kill()
        raise AssertionError(f"rank {rank}: the multiprocessing 'fork' worker hangs")
    assert worker.exitcode == 0, worker.exitcode

    # 3. shutdown() in a child only forgets the parent's engine: no hang, no MPI call, and
    #    init() still refuses. (The child ends with os._exit, as multiprocessing's workers do:
    #    a normal exit would run the MPI library's destructors in the child, which with
    #    MPICH's UCX transport break the parent's MPI state; see docs/collectives.md.)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            hvd.shutdown()
            assert not hvd.is_initialized()
            expect_fork_error("init after shutdown", hvd.init, RuntimeError)
            code = 0
        finally:
            os._exit(code)
    wait(pid, "shutdown")

    # The parent goes on.
    after = hvd.allreduce(tf.constant([float(rank)]), op=hvd.Sum, name="after")
    assert after.numpy()[0] == sum(range(size)), after
    hvd.barrier()
    print(f"rank {rank} FORK OK", flush=True)
""")


@pytest.mark.mpi
@pytest.mark.parametrize("np", [1, 2])
def test_forked_child_fails_at_once_and_the_parent_goes_on(tmp_path, np):
    script = tmp_path / "fork_after_init.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERASHVD_", "KHVD_", "PMI_"))}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                "KERASHVD_STALL_CHECK_TIME": "20", "KERASHVD_STALL_SHUTDOWN_TIME": "60"})
    launcher = [mpiexec_path(), "-n", str(np)] if np > 1 else []
    cmd = launcher + [sys.executable, str(script), str(CHILD_SECONDS)]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=240 + 3 * CHILD_SECONDS)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    for r in range(np):
        assert f"rank {r} FORK OK" in output, output[-6000:]
