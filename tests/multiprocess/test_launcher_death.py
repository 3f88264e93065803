"""No rank outlives its launcher: ``kerashvdrun`` or ``kerashvd.run`` killed with SIGKILL.

Real processes throughout: the launcher is killed while its ranks sleep, and every process
it had started (mpiexec, hydra's proxy, the supervisors, the ranks) must be gone within a
bounded time. Two mechanisms do it, each tested alone as well: the parent-death signal of
mpiexec (local ranks) and each supervisor's watch connection to the launcher (any host).
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from conftest import REPO
from fixtures.processes import LAUNCHER_SCRIPTS as SCRIPTS, LIGHT, launcher_env as _env

pytestmark = pytest.mark.mpi
WITHIN = 20.0  # seconds for every process of the job to end (SIGTERM, then SIGKILL after 5 s)


def _descendants(pid):
    """Pids of the live (non-zombie) descendants of process ``pid``."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [child.pid for child in children if _alive(child.pid)]


def _alive(pid):
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(condition, within, what):
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _kill_and_check(launcher, pid_dir, np=2):
    """Waits for ``np`` rank pid files, SIGKILLs ``launcher``, checks its whole tree ends."""
    _wait_for(lambda: len([n for n in os.listdir(pid_dir) if n.endswith(".pid")]) >= np
              or launcher.poll() is not None, 120, "the ranks to start")
    assert launcher.poll() is None, launcher.communicate()
    tree = _descendants(launcher.pid)
    ranks = [int(open(os.path.join(pid_dir, f"{r}.pid")).read()) for r in range(np)]
    assert set(ranks) <= set(tree), (ranks, tree)
    launcher.kill()
    start = time.monotonic()
    try:
        _wait_for(lambda: not any(_alive(p) for p in tree), WITHIN, "the job's processes to end")
    finally:
        for pid in tree:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    launcher.communicate()
    return time.monotonic() - start


def test_sigkill_of_kerashvdrun_ends_every_rank(tmp_path):
    launcher = subprocess.Popen(
        [sys.executable, LIGHT, "-np", "2", sys.executable, os.path.join(SCRIPTS, "ranks.py"),
         str(tmp_path)], env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _kill_and_check(launcher, str(tmp_path))


def test_sigkill_of_a_process_in_kerashvd_run_ends_every_rank(tmp_path):
    """A notebook kernel that dies inside kerashvd.run(fn, np=2)."""
    code = textwrap.dedent(f"""
        import os, time, kerashvd
        def fn():
            path = os.path.join({str(tmp_path)!r}, os.environ["PMI_RANK"] + ".pid")
            with open(path + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(path + ".tmp", path)
            time.sleep(60)
        kerashvd.run(fn, np=2)
        """)
    launcher = subprocess.Popen([sys.executable, "-c", code], env=_env(), cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _kill_and_check(launcher, str(tmp_path))


# The launcher modules without importing the kerashvd package (as kerashvdrun_light.py does).
_LIGHT_PREAMBLE = textwrap.dedent(f"""
    import sys, types
    _stub = types.ModuleType("kerashvd")
    _stub.__path__ = [{os.path.join(REPO, "kerashvd")!r}]
    sys.modules["kerashvd"] = _stub
    """)


# Each mechanism alone. A fake launcher: a ReportServer in a process of its own, which starts
# a supervisor (as mpiexec would) either as a direct child with the parent-death signal and no
# report address, or detached (as on another host) with the report address.
FAKE_LAUNCHER = textwrap.dedent("""
    import os, queue, subprocess, sys, time
    from kerashvd.launcher import command, job, reports
    mode, pid_dir = sys.argv[1], sys.argv[2]
    rank = [sys.executable, os.path.join(pid_dir, "..", "rank.py"), pid_dir, mode]
    server = reports.ReportServer(queue.Queue())
    if mode == "watch":  # a supervisor that is not our child, as on another host
        argv = [sys.executable, "-I", command.SUPERVISOR, "--report", server.address,
                "--token", server.token, "--", *rank]
        subprocess.Popen(argv, start_new_session=True, env=dict(os.environ, PMI_RANK="0"))
    else:  # our child, with the parent-death signal, no connection
        argv = [sys.executable, "-I", command.SUPERVISOR, "--", *rank]
        subprocess.Popen(job.with_parent_death_signal(argv), start_new_session=True,
                         env=dict(os.environ, PMI_RANK="0"))
    time.sleep(120)
    """)
RANK = textwrap.dedent("""
    import os, signal, sys, time
    if sys.argv[2] == "watch":  # a rank that ignores SIGTERM: the supervisor's SIGKILL ends it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(sys.argv[1], "0.pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(sys.argv[1], "0.pid.tmp"), os.path.join(sys.argv[1], "0.pid"))
    time.sleep(120)
    """)


@pytest.mark.parametrize("mode", ["watch", "parent_death_signal"])
def test_each_mechanism_alone_ends_a_rank_whose_launcher_died(tmp_path, mode):
    (tmp_path / "rank.py").write_text(RANK)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    launcher = subprocess.Popen([sys.executable, "-c", _LIGHT_PREAMBLE + FAKE_LAUNCHER, mode,
                                 str(pid_dir)], env=_env(), cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    _wait_for(lambda: (pid_dir / "0.pid").exists() or launcher.poll() is not None, 60,
              "the rank to start")
    assert launcher.poll() is None, launcher.communicate()
    rank = int((pid_dir / "0.pid").read_text())
    launcher.kill()
    start = time.monotonic()
    try:
        _wait_for(lambda: not _alive(rank), WITHIN, "the rank to end")
    finally:
        if _alive(rank):
            os.kill(rank, signal.SIGKILL)
    launcher.communicate()  # (the rank held the launcher's pipes)
    if mode == "watch":  # SIGTERM is ignored: SIGKILL after the supervisor's grace time
        assert time.monotonic() - start > 3.0
