"""What users see when a rank dies, raises, or freezes, and what is left behind.

Every test starts real processes (np=2) from tests/scripts/failure/ with a subprocess timeout,
so a regression is a failed test, never a hung run, and checks afterwards that no process
whose command line names the test's own directory is still running.

Measured facts the tests rely on (mpich 5.0.2 hydra, kerashvd's peer monitor):
- A SIGKILLed rank closes its TCP connection to rank 0's monitor at once: the other ranks'
  collectives fail within ~0.1 s ("rank 1 exited or was killed"), long before
  KERASHVD_PEER_TIMEOUT.
- hydra itself SIGKILLs the surviving ranks ~0.1-0.3 s after a rank dies (its "BAD
  TERMINATION" banner), and kerashvdrun SIGTERMs them as soon as the dead rank's supervisor
  reports. Whether a survivor's own error gets printed first is a race under both launchers;
  the tests that check the survivors' error therefore start ranks under a shell wrapper that
  keeps hydra from noticing the death (the wrapper of a killed rank lingers), so the
  survivors report and exit on their own, as they would if the launcher gave them time.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conftest import REPO, mpiexec_path
from fixtures.processes import assert_nothing_left, kill_all, processes_naming

pytestmark = pytest.mark.mpi

SCRIPTS = os.path.join(REPO, "tests", "scripts", "failure")
FIT = os.path.join(SCRIPTS, "fit_until_failure.py")
TRAIN = os.path.join(SCRIPTS, "train_resume.py")
CHECK = os.path.join(SCRIPTS, "check_checkpoints.py")
KERASHVDRUN = [sys.executable, "-c",
               "import sys; from kerashvd.launcher.cli import main; sys.exit(main())"]
# Runs a rank; if it was killed by a signal, the wrapper stays (hydra sees no death) until
# hydra stops it after the other ranks have exited.
KEEP_HYDRA_AWAY = ["sh", "-c", '"$@"; code=$?; if [ $code -gt 128 ]; then sleep 60; fi; exit $code',
                   "rank"]
START_TIMEOUT = 240  # two TensorFlow processes starting on a loaded 2-core machine


def _env(**settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERASHVD_", "KHVD_", "PMI_"))}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    env.update({k: str(v) for k, v in settings.items()})
    return env


def _run(cmd, timeout=START_TIMEOUT, **settings):
    """Runs ``cmd``; returns (exit code, stdout + stderr, unix time when it returned)."""
    proc = subprocess.run(cmd, env=_env(**settings), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr, time.time()


@pytest.fixture
def job_dir(tmp_path):
    """A fresh directory whose path is on every process's command line; leftovers are killed."""
    yield str(tmp_path)
    kill_all(processes_naming(str(tmp_path)))


def _read(directory, name):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def _survivor_error(directory, rank=0):
    """(error line, seconds from the failure to it) or (None, None)."""
    line, failed_at = _read(directory, f"error.{rank}"), _read(directory, "failed_at")
    if line is None or failed_at is None:
        return None, None
    return line, float(line.split()[3]) - float(failed_at)


def _fit_job(directory, failure, *extra):
    return [sys.executable, FIT, directory, "--failure", failure, *extra]


# ------------------------------------------------------------------ a rank is SIGKILLed


@pytest.mark.parametrize("where", ["fit", "collective"])
def test_survivor_fails_fast_naming_the_killed_rank(job_dir, where):
    """Rank 1 is SIGKILLed inside model.fit (at batch 3) or while rank 0 waits in an allreduce."""
    job = _fit_job(job_dir, "kill", "--where", where)
    cmd = [mpiexec_path(), "-n", "2", *KEEP_HYDRA_AWAY, *job]
    code, out, _ = _run(cmd, KERASHVD_PEER_TIMEOUT=10)
    line, seconds = _survivor_error(job_dir)
    assert line is not None, out[-5000:]
    assert line.startswith("RANK 0 ERROR") and "AbortedError" in line, line
    assert ("kerashvd rank 0: rank 1 exited or was killed (its connection closed without a "
            "goodbye)") in line, line
    # Found through the closed connection, not the 10 s heartbeat timeout.
    assert seconds < 5.0, f"rank 0 reported {seconds:.2f} s after rank 1 died"
    assert code != 0, out[-3000:]
    assert "RANK 0 ERROR" in out  # the user sees it in the job's output too
    assert_nothing_left(job_dir)
    print(f"killed in {where}: rank 0's error after {seconds:.3f} s; mpiexec exit {code}")


@pytest.mark.parametrize("launcher", ["kerashvdrun", "mpiexec"])
def test_launcher_stops_the_job_when_a_rank_is_killed_mid_fit(job_dir, launcher,
                                                               shm_segments_left):
    if launcher == "kerashvdrun":
        cmd = KERASHVDRUN + ["-np", "2", *_fit_job(job_dir, "kill")]
    else:
        cmd = [mpiexec_path(), "-n", "2", *_fit_job(job_dir, "kill")]
    code, out, ended = _run(cmd, KERASHVD_PEER_TIMEOUT=10)
    failed_at = _read(job_dir, "failed_at")
    assert failed_at is not None, out[-5000:]
    stop_seconds = ended - float(failed_at)
    if launcher == "kerashvdrun":
        assert code == 128 + signal.SIGKILL, out[-5000:]
        assert "kerashvdrun: rank 1 was killed by signal 9 (SIGKILL); stopping the other ranks." in out
    else:
        assert code != 0, out[-5000:]
        assert "BAD TERMINATION" in out or "Killed (signal 9)" in out, out[-5000:]
    assert stop_seconds < 20, f"the job ran on for {stop_seconds:.1f} s after rank 1 died"
    assert_nothing_left(job_dir)
    if launcher == "kerashvdrun":  # plain mpiexec leaves the killed job's segment to MPICH
        assert shm_segments_left() == [], "kerashvdrun left the killed job's /dev/shm segment"
    # Whether rank 0 printed its own error before being stopped is a race (module docstring).
    line, seconds = _survivor_error(job_dir)
    print(f"{launcher}: exit {code}, stopped {stop_seconds:.2f} s after the kill; rank 0's own "
          f"error {'after %.2f s' % seconds if line else 'not printed (stopped first)'}")
    if line is not None:
        assert "rank 1 exited or was killed" in line, line


def test_kerashvd_run_raises_rank_error_naming_a_killed_rank(job_dir, monkeypatch,
                                                             shm_segments_left):
    import tempfile

    import kerashvd
    from kerashvd.launcher import RankError

    monkeypatch.setattr(tempfile, "tempdir", job_dir)  # the ranks' command lines name job_dir

    def train():
        import os
        import signal
        import time

        import tensorflow as tf

        import kerashvd as hvd

        hvd.init()
        hvd.allreduce(tf.ones([2]), name="up")
        if hvd.rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(tf.ones([2]), name="never_completes")
        time.sleep(120)

    start = time.monotonic()
    with pytest.raises(RankError) as info:
        kerashvd.run(train, np=2, env={"KERASHVD_PEER_TIMEOUT": "10", "OMP_NUM_THREADS": "1",
                                       "TF_CPP_MIN_LOG_LEVEL": "3"}, verbose=False)
    elapsed = time.monotonic() - start
    assert info.value.rank == 1 and info.value.exit_code == 128 + signal.SIGKILL, str(info.value)
    assert ("kerashvd.run: rank 1 (of 2) was killed by signal 9 (SIGKILL) without returning a "
            "result") in str(info.value)
    assert elapsed < START_TIMEOUT
    assert_nothing_left(job_dir)
    assert shm_segments_left() == [], "kerashvd.run left the killed job's /dev/shm segment"


def test_rank_killed_during_a_process_set_collective(job_dir, monkeypatch, shm_segments_left):
    """Rank 1 dies while rank 0 waits for it in a collective of the set {0, 1}; rank 2 is
    not a member. Rank 0's collective fails at once, naming rank 1."""
    import tempfile

    import kerashvd
    from kerashvd.launcher import RankError

    monkeypatch.setattr(tempfile, "tempdir", job_dir)
    report = os.path.join(job_dir, "rank0.txt")

    def train(report):
        import os
        import signal
        import time

        import tensorflow as tf

        import kerashvd as hvd

        pair = hvd.ProcessSet([0, 1])
        hvd.init(process_sets=[pair])
        if pair.included():
            hvd.allreduce(tf.ones([2]), process_set=pair, name="up")
        if hvd.rank() == 1:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        if hvd.rank() == 0:
            start = time.monotonic()
            try:
                hvd.allreduce(tf.ones([2]), process_set=pair, name="never_completes")
            except Exception as err:  # noqa: BLE001  (the test reads what was raised)
                with open(report, "w") as f:
                    f.write(f"{time.monotonic() - start:.2f}\n{type(err).__name__}: {err}")
        time.sleep(120)

    with pytest.raises(RankError) as info:
        kerashvd.run(train, np=3, args=(report,),
                     env={"KERASHVD_PEER_TIMEOUT": "10", "OMP_NUM_THREADS": "1",
                          "TF_CPP_MIN_LOG_LEVEL": "3"}, verbose=False)
    assert info.value.rank == 1, str(info.value)
    with open(report) as f:
        seconds, message = f.read().split("\n", 1)
    assert message.startswith("AbortedError") and "rank 1 exited or was killed" in message, message
    assert float(seconds) < 10, f"rank 0 waited {seconds} s"
    assert_nothing_left(job_dir)
    assert shm_segments_left() == [], "kerashvd.run left the killed job's /dev/shm segment"


# ------------------------------------------------------- a rank raises, a rank freezes


def test_python_exception_on_one_rank(job_dir):
    code, out, _ = _run(KERASHVDRUN + ["-np", "2", *_fit_job(job_dir, "raise")],
                        KERASHVD_PEER_TIMEOUT=10)
    assert code == 1, out[-5000:]
    assert "RuntimeError: injected failure on rank 1" in out, out[-5000:]
    line, seconds = _survivor_error(job_dir)
    assert line is not None, out[-5000:]
    assert "kerashvd was shut down by rank(s) 1" in line, line
    assert seconds < 5.0, f"rank 0 reported {seconds:.2f} s after rank 1 raised"
    # kerashvdrun names the first rank to *exit*: rank 1 takes ~1-2 s to exit after raising
    # (traceback, atexit, TensorFlow teardown) while rank 0 fails within ~0.1 s, so either
    # rank can be named; rank 0's error above says who really failed.
    blamed = re.search(r"kerashvdrun: rank (\d) exited with code 1; stopping the other ranks\.", out)
    assert blamed is not None, out[-5000:]
    assert_nothing_left(job_dir)
    print(f"kerashvdrun named rank {blamed.group(1)}; rank 0's error after {seconds:.2f} s")


@pytest.mark.parametrize("launcher", ["mpiexec", "kerashvdrun"])
def test_frozen_rank_is_reported_after_the_peer_timeout(job_dir, launcher):
    """Rank 1 SIGSTOPs itself at batch 3; KERASHVD_PEER_TIMEOUT=5."""
    job = _fit_job(job_dir, "stop")
    if launcher == "kerashvdrun":
        cmd = KERASHVDRUN + ["-np", "2", *job]
    else:
        cmd = [mpiexec_path(), "-n", "2", *job]
    proc = subprocess.Popen(cmd, env=_env(KERASHVD_PEER_TIMEOUT=5), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while _read(job_dir, "error.0") is None:
            assert proc.poll() is None, proc.communicate()[0][-5000:]
            assert time.monotonic() < deadline, "rank 0 never reported the frozen rank"
            time.sleep(0.2)
        line, seconds = _survivor_error(job_dir)
        assert "kerashvd rank 0: rank 1 stopped responding (no heartbeat for 5 s)" in line, line
        # Heartbeats are sent every second: silence starts at most 1 s before the freeze.
        assert 3.5 < seconds < 20, f"reported {seconds:.2f} s after rank 1 froze"
        try:  # the launcher may stop the frozen rank itself ...
            out, _ = proc.communicate(timeout=30)
            needed_kill = False
        except subprocess.TimeoutExpired:  # ... or it must be cleaned up by hand
            kill_all([int(_read(job_dir, "pid.1"))])
            out, _ = proc.communicate(timeout=60)
            needed_kill = True
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, out[-5000:]
    if launcher == "kerashvdrun":
        # The frozen rank never exits, so the launcher names the first rank that did.
        assert "kerashvdrun: rank 0 exited with code 1; stopping the other ranks." in out, out[-5000:]
    assert_nothing_left(job_dir)
    print(f"{launcher}: exit {proc.returncode}; error after {seconds:.2f} s; "
          f"{'rank 1 had to be SIGKILLed by hand' if needed_kill else 'the launcher ended rank 1'}")


FREEZE_RANK_0 = textwrap.dedent("""
    import os, signal, sys, time
    import tensorflow as tf
    import kerashvd as hvd

    state, where = sys.argv[1], sys.argv[2]
    hvd.init()
    hvd.allreduce(tf.ones([2]), name="up")  # every rank is up and connected
    if hvd.rank() == 0:
        with open(os.path.join(state, "pid.0"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(2.0)  # the others wait for rank 0 for 2 s before it freezes
        with open(os.path.join(state, "failed_at"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGSTOP)
    try:
        if where == "collective":
            hvd.allreduce(tf.ones([2]), name="never_completes")
        else:
            hvd.add_process_set([0, 1])
    except Exception as err:
        line = f"RANK {hvd.rank()} ERROR {time.time():.6f} {type(err).__name__}: {err}"
        with open(os.path.join(state, f"error.{hvd.rank()}"), "w") as f:
            f.write(line)
""")


@pytest.mark.parametrize("where", ["collective", "add_process_set"])
def test_frozen_rank_0_is_named_by_every_other_rank(job_dir, where):
    """Rank 0 SIGSTOPs itself while ranks 1 and 2 wait for it (KERASHVD_PEER_TIMEOUT=3).

    Both survivors must name rank 0 from its missing heartbeats, within the peer timeout of
    the freeze, also where their wait began before the freeze (a process-set registration),
    whose own timeout used to end it first with an error that named no rank.
    """
    timeout = 3
    cmd = [mpiexec_path(), "-n", "3", sys.executable, "-c", FREEZE_RANK_0, job_dir, where]
    proc = subprocess.Popen(cmd, env=_env(KERASHVD_PEER_TIMEOUT=timeout), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while _read(job_dir, "error.1") is None or _read(job_dir, "error.2") is None:
            assert proc.poll() is None, proc.communicate()[0][-5000:]
            assert time.monotonic() < deadline, "the survivors never reported rank 0"
            time.sleep(0.2)
        kill_all([int(_read(job_dir, "pid.0"))])
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    failed_at = float(_read(job_dir, "failed_at"))
    for rank in (1, 2):
        line = _read(job_dir, f"error.{rank}")
        assert (f"kerashvd rank {rank}: rank 0 stopped responding (no heartbeat for {timeout} s)"
                in line), line
        seconds = float(line.split()[3]) - failed_at
        # Heartbeats come every second: the silence starts at most 1 s before the freeze.
        assert timeout - 1.5 < seconds < timeout + 1.5, f"rank {rank} reported after {seconds:.2f} s"
    assert_nothing_left(job_dir)


# ---------------------------------------------------------------------- the timeline


@pytest.mark.parametrize("how", ["start_timeline", "environment"])
def test_timeline_is_valid_json_after_sigkill(tmp_path, how):
    path = tmp_path / "timeline.json"
    script = textwrap.dedent(f"""
        import os, signal, time
        import tensorflow as tf
        import kerashvd as hvd
        hvd.init()
        if {how == "start_timeline"}:
            hvd.start_timeline({str(path)!r})
        for i in range(40):
            hvd.allreduce(tf.ones([8]), name=f"killed.{{i}}")
        time.sleep(0.5)  # several of the writer's 100 ms passes
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    settings = {}
    if how == "environment":
        settings = {"KERASHVD_TIMELINE": path, "KERASHVD_TIMELINE_MAX_MB": 0.01}
    code, out, _ = _run([sys.executable, "-c", script], **settings)
    assert code == -signal.SIGKILL, out[-5000:]
    with open(path) as f:
        events = json.load(f)  # complete JSON although the process never closed the file
    names = {e["args"]["tensor"] for e in events if "tensor" in e.get("args", {})}
    if how == "start_timeline":
        assert {f"killed.{i}" for i in range(40)} <= names
        assert any(e["name"] == "ALLREDUCE" for e in events)
    else:
        max_bytes = int(0.01 * (1 << 20))
        assert events[-1]["name"] == "TIMELINE_TRUNCATED", events[-3:]
        assert os.path.getsize(path) <= max_bytes + 400


# ------------------------------------------------------ checkpoints survive a failure


def test_resume_after_a_rank_is_killed_mid_epoch_3(job_dir):
    """ModelCheckpoint on rank 0; rank 1 SIGKILLed in epoch 3; --resume continues exactly."""
    ckpt = os.path.join(job_dir, "ckpt")
    steps = 6  # train_resume.STEPS
    code, out, _ = _run(KERASHVDRUN + ["-np", "2", sys.executable, TRAIN, ckpt, "--epochs", "5",
                                       "--kill-epoch", "2", "--kill-batch", "3"],
                        KERASHVD_PEER_TIMEOUT=10)
    assert code == 128 + signal.SIGKILL, out[-5000:]
    assert "RANK 1 KILLING ITSELF at epoch 2 batch 3" in out, out[-5000:]
    assert_nothing_left(job_dir)
    # Two complete epochs saved; no temporary file, nothing half-written under a final name.
    assert sorted(os.listdir(ckpt)) == ["kerashvd_checkpoint.json", "model-01.keras",
                                        "model-02.keras"]

    code, out, _ = _run(KERASHVDRUN + ["-np", "2", sys.executable, TRAIN, ckpt, "--epochs", "5",
                                       "--resume"], KERASHVD_PEER_TIMEOUT=10)
    assert code == 0, out[-5000:]
    for rank in (0, 1):
        resumed = f"RANK {rank} RESUMED epoch=2 iterations={2 * steps} file=model-02.keras"
        assert resumed in out, out[-5000:]
        assert f"RANK {rank} FINISHED iterations={5 * steps}" in out, out[-5000:]
    assert_nothing_left(job_dir)

    assert sorted(os.listdir(ckpt)) == ["kerashvd_checkpoint.json"] + [
        f"model-{e:02d}.keras" for e in range(1, 6)]
    code, out, _ = _run([sys.executable, CHECK, ckpt])
    assert code == 0, out[-5000:]
    report = json.loads(out.split("CHECK ", 1)[1].splitlines()[0])
    # Every file loads, with the optimizer state of the epoch it was written at.
    assert report["files"] == {f"model-{e:02d}.keras": e * steps for e in range(1, 6)}, report
    assert report["record"]["epoch"] == 5 and report["record"]["path"] == "model-05.keras"
