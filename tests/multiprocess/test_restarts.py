"""``kerashvdrun --max-restarts N``: a failed job is stopped and started again, every rank.

Real processes (np=2) running tests/scripts/launcher/restarts.py (mpi4py, no TensorFlow),
which writes one marker file per rank and attempt with the KERASHVD_RESTART_COUNT it saw.
Every test checks that no process naming its directory outlives kerashvdrun and that no
MPICH shared-memory segment is left behind.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from fixtures.processes import assert_nothing_left, kill_all, processes_naming
from fixtures.processes import LAUNCHER_SCRIPTS as SCRIPTS, LIGHT, launcher_env as _env

pytestmark = pytest.mark.mpi

SCRIPT = os.path.join(SCRIPTS, "restarts.py")


@pytest.fixture
def job_dir(tmp_path):
    """A fresh directory on every rank's command line; leftovers are killed."""
    yield str(tmp_path)
    kill_all(processes_naming(str(tmp_path)))


def _start(job_dir, mode, *options):
    """Starts kerashvdrun; its stderr goes to JOB_DIR/stderr so a test can watch it."""
    cmd = [sys.executable, LIGHT, "-np", "2", *options, sys.executable, SCRIPT, job_dir, mode]
    stderr = open(os.path.join(job_dir, "stderr"), "w")
    proc = subprocess.Popen(cmd, env=_env(), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=stderr, text=True)
    stderr.close()
    return proc


def _finish(proc, job_dir, timeout=60):
    """(exit code, stdout, stderr) of a kerashvdrun started by :func:`_start`."""
    out, _ = proc.communicate(timeout=timeout)
    with open(os.path.join(job_dir, "stderr")) as f:
        return proc.returncode, out, f.read()


def _attempts(job_dir):
    """{(attempt, rank): (pid, KERASHVD_RESTART_COUNT seen, time)} from the markers."""
    found = {}
    for name in os.listdir(job_dir):
        if name.startswith("attempt") and ".rank" in name and not name.endswith(".tmp"):
            attempt, rank = name[len("attempt"):].split(".rank")
            pid, seen, when = open(os.path.join(job_dir, name)).read().split()
            found[int(attempt), int(rank)] = (int(pid), seen, float(when))
    return found


def _wait_for(predicate, proc, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{what} did not happen (kerashvdrun: {proc.poll()})")
        time.sleep(0.05)


def test_a_rank_killed_on_the_first_attempt_is_restarted(job_dir, shm_segments_left):
    start = time.monotonic()
    code, out, err = _finish(_start(job_dir, "kill-once", "--max-restarts", "2"), job_dir)
    elapsed = time.monotonic() - start
    assert code == 0, out + err
    attempts = _attempts(job_dir)
    assert sorted(attempts) == [(0, 0), (0, 1), (1, 0), (1, 1)], (attempts, out + err)
    assert [attempts[a, r][1] for a in (0, 1) for r in (0, 1)] == ["0", "0", "1", "1"]
    assert attempts[0, 0][0] != attempts[1, 0][0], "attempt 1 reused attempt 0's process"
    # The default delay (3 s) passed between the failure and the next start.
    assert min(attempts[1, r][2] for r in (0, 1)) - attempts[0, 1][2] >= 3.0, attempts
    for message in (
            "kerashvdrun: rank 1 was killed by signal 9 (SIGKILL); stopping the other ranks.",
            "kerashvdrun: attempt 1 of 3 failed (rank 1 was killed by signal 9 (SIGKILL)); "
            "every rank has stopped. Restarting all ranks in 3 s (restart 1 of 2).",
            "kerashvdrun: starting attempt 2 of 3 (KERASHVD_RESTART_COUNT=1).",
            "kerashvdrun: attempt 2 of 3 succeeded after 1 restart."):
        assert message in err, err
    assert "rank 0 attempt 1 done" in out and "rank 1 attempt 1 done" in out, out
    assert "attempt 0 done" not in out, out  # rank 0 of attempt 0 was stopped, not waited for
    assert_nothing_left(job_dir)
    assert shm_segments_left() == [], "the killed attempt's /dev/shm segment was left"
    print(f"2 attempts in {elapsed:.1f} s")


@pytest.mark.parametrize("max_restarts", [0, 1])
def test_a_job_that_always_fails_gives_up_with_the_last_code(job_dir, max_restarts,
                                                             shm_segments_left):
    start = time.monotonic()
    proc = _start(job_dir, "fail-always", "--max-restarts", str(max_restarts),
                  "--restart-delay", "0.5")
    code, out, err = _finish(proc, job_dir)
    elapsed = time.monotonic() - start
    assert code == 3, out + err
    attempts = _attempts(job_dir)
    tries = max_restarts + 1
    assert sorted(attempts) == [(a, r) for a in range(tries) for r in (0, 1)], (attempts, err)
    assert err.count("kerashvdrun: rank 1 exited with code 3; stopping the other ranks.") == tries
    if max_restarts:
        assert ("kerashvdrun: the job failed 2 times, on every attempt allowed "
                "(--max-restarts 1); giving up and exiting with the last failure's code, 3:\n"
                "  attempt 1: rank 1 exited with code 3\n"
                "  attempt 2: rank 1 exited with code 3\n") in err, err
    else:  # the default: today's behaviour, no word about attempts
        assert "attempt" not in err, err
    assert_nothing_left(job_dir)
    assert shm_segments_left() == []
    print(f"{tries} attempt(s) in {elapsed:.1f} s")


def test_sigterm_during_an_attempt_is_not_restarted(job_dir, shm_segments_left):
    proc = _start(job_dir, "wait", "--max-restarts", "2", "--restart-delay", "0")
    _wait_for(lambda: len(_attempts(job_dir)) == 2, proc, "both ranks starting")
    proc.send_signal(signal.SIGTERM)
    code, out, err = _finish(proc, job_dir, timeout=30)
    assert code == 128 + signal.SIGTERM, out + err
    assert "kerashvdrun: received SIGTERM; stopping all ranks" in err, err
    assert "kerashvdrun: not restarting: stopped by SIGTERM during attempt 1 of 3." in err, err
    assert "starting attempt 2" not in err, err
    assert sorted(_attempts(job_dir)) == [(0, 0), (0, 1)]
    assert_nothing_left(job_dir)
    assert shm_segments_left() == []


def test_sigterm_while_waiting_to_restart_ends_kerashvdrun(job_dir, shm_segments_left):
    proc = _start(job_dir, "fail-always", "--max-restarts", "1", "--restart-delay", "60")
    stderr = os.path.join(job_dir, "stderr")
    _wait_for(lambda: "Restarting all ranks in 60 s" in open(stderr).read(), proc,
              "the first attempt failing")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, out, err = _finish(proc, job_dir, timeout=30)
    assert code == 128 + signal.SIGTERM, out + err
    assert time.monotonic() - sent < 5, "kerashvdrun went on waiting after SIGTERM"
    assert "kerashvdrun: received SIGTERM while waiting to restart; not restarting." in err, err
    assert sorted(_attempts(job_dir)) == [(0, 0), (0, 1)]
    assert_nothing_left(job_dir)
    assert shm_segments_left() == []
