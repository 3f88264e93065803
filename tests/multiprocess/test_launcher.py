"""The launcher: ``kerashvdrun`` and ``kerashvd.run`` start real processes (np=2).

Most ``kerashvdrun`` runs go through tests/scripts/launcher/kerashvdrun_light.py, the same
``main()`` without importing TensorFlow in the launcher; rank scripts avoid TensorFlow except
where kerashvd itself is under test.
"""

import ctypes
import mmap
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import REPO
from fixtures.processes import LAUNCHER_SCRIPTS, LIGHT, launcher_env as _env

pytestmark = pytest.mark.mpi

SCRIPTS = LAUNCHER_SCRIPTS


def kerashvdrun(*args, timeout=120):
    cmd = [sys.executable, LIGHT] + [str(a) for a in args]
    return subprocess.run(cmd, env=_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(pids, within=5.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _pids(directory, np=2):
    return [int(open(os.path.join(directory, f"{r}.pid")).read()) for r in range(np)]


# ---------------------------------------------------------------------------- kerashvdrun


def test_launcher_modules_do_not_import_tensorflow():
    code = (
        "import runpy, sys; sys.argv = ['x', '--help']\n"
        f"try: runpy.run_path({LIGHT!r}, run_name='__main__')\n"
        "except SystemExit: pass\n"
        "import kerashvd.launcher.run_fn\n"
        "assert 'tensorflow' not in sys.modules, 'the launcher imported tensorflow'\n")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--fusion-threshold-mb" in proc.stdout  # --help documents the engine flags


def test_kerashvdrun_console_script_is_cli_main():
    import importlib.metadata

    from kerashvd.launcher import cli

    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="kerashvdrun")
    assert entry.load() is cli.main


def test_kerashvdrun_ranks_see_their_rank_and_size():
    proc = kerashvdrun("-np", 2, "--prefix-output", sys.executable,
                       os.path.join(SCRIPTS, "rank_and_size.py"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "[0] RANK=0 SIZE=2 SUM=1 ENV_RANK=0" in proc.stdout, output
    assert "[1] RANK=1 SIZE=2 SUM=1 ENV_RANK=1" in proc.stdout, output


def _map_without_fd(path):
    """Maps the file ``path`` into this process and closes it, as MPICH's ranks do (Python's
    mmap would keep a descriptor open); returns the function that unmaps it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    return lambda: libc.munmap(address, mmap.PAGESIZE)


def test_supervisors_remove_dead_mpich_segments_before_the_ranks_start():
    """A segment no process uses (a killed job's) is removed before MPI_Init could meet it;
    one that a live process holds open stays, and so does one it only maps (as ranks do)."""
    dead, live, mapped = (f"/dev/shm/mpich_shm_khvdtest_{kind}_0"
                          for kind in ("dead", "live", "mapped"))
    for path in (dead, live, mapped):
        with open(path, "wb") as f:
            f.write(b"\0" * mmap.PAGESIZE)
    holder = open(live, "rb")
    unmap = _map_without_fd(mapped)
    try:
        proc = kerashvdrun("-np", 1, sys.executable, "-c", "pass")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert not os.path.exists(dead)
        assert os.path.exists(live)
        assert os.path.exists(mapped)
    finally:
        holder.close()
        unmap()
        for path in (dead, live, mapped):
            if os.path.exists(path):
                os.unlink(path)


@pytest.mark.parametrize("prefix", [[], ["--prefix-output"]])
def test_kerashvdrun_keeps_each_line_of_every_rank_whole(prefix):
    """Ranks that write each line in pieces at the same time: no line is mixed with another."""
    proc = kerashvdrun("-np", 3, *prefix, sys.executable,
                       os.path.join(SCRIPTS, "split_lines.py"), 100)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    pattern = re.compile(r"(\[\d\] )?rank (\d) line (\d+) x{40}")
    broken = [line for line in lines if not pattern.fullmatch(line)]
    assert not broken, f"{len(broken)} mixed lines, e.g. {broken[:3]}"
    assert sorted(lines) == sorted(f"{f'[{r}] ' if prefix else ''}rank {r} line {i} {'x' * 40}"
                                   for r in range(3) for i in range(100))


def test_kerashvdrun_returns_failed_rank_code_and_stops_the_others(tmp_path):
    start = time.monotonic()
    proc = kerashvdrun("-np", 2, sys.executable, os.path.join(SCRIPTS, "ranks.py"),
                       tmp_path, 1, 7)
    elapsed = time.monotonic() - start
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "rank 1 exited with code 7; stopping the other ranks" in proc.stderr
    assert "was not stopped" not in proc.stdout
    assert "BAD TERMINATION" not in proc.stdout + proc.stderr
    assert elapsed < 20, f"rank 0 (sleeping 60 s) took {elapsed:.1f} s to be stopped"
    assert _gone(_pids(tmp_path)), "a rank process outlived kerashvdrun"


def test_kerashvdrun_sigint_stops_every_rank(tmp_path):
    cmd = [sys.executable, LIGHT, "-np", "2", sys.executable,
           os.path.join(SCRIPTS, "ranks.py"), str(tmp_path)]
    proc = subprocess.Popen(cmd, env=_env(), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("*.pid"))) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    pids = _pids(tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT, out + err
    assert "received SIGINT; stopping all ranks" in err
    assert _gone(pids), "a rank process outlived kerashvdrun after Ctrl-C"


def test_kerashvdrun_flags_become_kerashvd_variables():
    env_name = "KHVD_TEST_FROM_ENV"
    os.environ[env_name] = "inherited value"
    try:
        proc = kerashvdrun(
            "-np", 2, "--fusion-threshold-mb", 2, "--cycle-time-ms", 3.5,
            "--cache-capacity", 10, "--stall-check-time", 7, "--stall-shutdown-time", 9,
            "--peer-timeout", 11, "--timeline-filename", "/tmp/khvd-timeline.json",
            "-x", "KHVD_TEST_X=a b", "-x", env_name, "--verbose",
            sys.executable, os.path.join(SCRIPTS, "print_env.py"), "KHVD_TEST_X", env_name)
    finally:
        del os.environ[env_name]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        for line in ("KERASHVD_FUSION_THRESHOLD=2097152", "KERASHVD_CYCLE_TIME=3.5",
                     "KERASHVD_CACHE_CAPACITY=10", "KERASHVD_STALL_CHECK_TIME=7",
                     "KERASHVD_STALL_SHUTDOWN_TIME=9", "KERASHVD_PEER_TIMEOUT=11",
                     "KERASHVD_TIMELINE=/tmp/khvd-timeline.json", "KHVD_TEST_X=a b",
                     f"{env_name}=inherited value"):
            assert f"rank{rank} {line}" in proc.stdout, proc.stdout
    assert "-genv KERASHVD_CYCLE_TIME 3.5" in proc.stderr  # --verbose shows the command


@pytest.mark.parametrize("args, message", [
    (["-np", "0", "python"], "-np/--num-proc: expected an integer >= 1, received '0'"),
    (["-np", "two", "python"], "-np/--num-proc: expected an integer >= 1, received 'two'"),
    (["python", "x.py"], "-np is required"),
    (["-np", "2"], "no command given"),
    (["-np", "3", "-H", "a:1,b:1", "python"],
     "-np 3 needs 3 slots, but -H a:1,b:1 provides only 2"),
    (["-np", "2", "-H", "a:0", "python"], "must be a positive integer, received 'a:0'"),
    (["-np", "2", "-H", "a:2,,b", "python"], "received an empty entry"),
    (["-np", "2", "-H", "a:1,a:1", "python"], "Host 'a' appears twice"),
    (["-np", "2", "-x", "1BAD=x", "python"], "received -x '1BAD=x'"),
    (["-np", "2", "-x", "KHVD_SURELY_UNSET", "python"], "KHVD_SURELY_UNSET is not set"),
    (["-np", "2", "--cycle-time-ms", "0", "python"], "expected a number >= 0.01, received '0'"),
    (["-np", "2", "--cache-capacity", "1.5", "python"], "expected an integer >= 0"),
    (["-np", "2", "--peer-timeout", "0", "python"], "expected a number >= 2, received '0'"),
    (["-np", "2", "--peer-timeout", "inf", "python"],
     "expected a finite number >= 2, received 'inf'"),
    (["-np", "2", "--stall-check-time", "nan", "python"],
     "expected a finite number >= 0, received 'nan'"),
    (["-np", "2", "--max-restarts", "-1", "python"],
     "--max-restarts: expected an integer >= 0, received '-1'"),
    (["-np", "2", "--max-restarts", "1.5", "python"],
     "--max-restarts: expected an integer >= 0, received '1.5'"),
    (["-np", "2", "--restart-delay", "-1", "python"],
     "--restart-delay: expected a finite number of seconds >= 0, received '-1'"),
    (["-np", "2", "--restart-delay", "inf", "python"],
     "--restart-delay: expected a finite number of seconds >= 0, received 'inf'"),
    (["-np", "2", "--restart-delay", "soon", "python"],
     "--restart-delay: expected a finite number of seconds >= 0, received 'soon'"),
])
def test_kerashvdrun_bad_arguments_give_clear_errors(args, message, capsys):
    from kerashvd.launcher import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_kerashvdrun_uses_hosts_and_slurm_allocation(monkeypatch, capsys):
    from kerashvd.launcher import cli

    assert cli.main(["-np", "3", "-H", "node1:2,node2", "--dry-run", "python", "x.py"]) == 0
    command = capsys.readouterr().err
    assert "-hosts node1:2,node2:1 -n 3 " in command and "-launcher slurm" not in command
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)  # not inside an srun step
    assert cli.main(["--dry-run", "python", "x.py"]) == 0
    assert "srun --mpi=pmi2 --kill-on-bad-exit=1 -n 4 " in capsys.readouterr().err


def test_kerashvdrun_passes_the_commands_options_on_untouched(capsys):
    """Options after the command are the command's, also where they look like a prefix of
    kerashvdrun's own (--hierarchical: --hierarchical-allreduce and -allgather) or equal one."""
    from kerashvd.launcher import cli

    args = ["--hierarchical", "off,on", "-np", "3", "--hosts", "x", "--verb"]
    assert cli.main(["-np", "2", "--dry-run", "python", "-m", "kerashvd.bench", *args]) == 0
    assert capsys.readouterr().err.rstrip().endswith(
        " -- python -m kerashvd.bench " + " ".join(args))


def test_kerashvdrun_hostfile_and_mpi_args(monkeypatch, tmp_path, capsys):
    from kerashvd.launcher import cli

    monkeypatch.setenv("SLURM_JOB_ID", "42")  # a host file wins over the allocation, as -H does
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two nodes\nnode1 slots=4\n\nnode2:2   # the small one\nnode3\n")
    assert cli.main(["-np", "7", "-hostfile", str(hostfile), "--mpi-args=-bind-to core:2",
                     "--dry-run", "python", "x.py"]) == 0
    command = capsys.readouterr().err
    assert "-hosts node1:4,node2:2,node3:1 -bind-to core:2 -n 7 " in command
    assert "-launcher slurm" not in command

    def error(args):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(args + ["python", "x.py"])
        assert exit_info.value.code == 2
        return capsys.readouterr().err

    assert "provides only 7. Add hosts or slots to --hostfile" in error(
        ["-np", "8", "--hostfile", str(hostfile)])
    assert "not allowed with argument" in error(
        ["-np", "2", "-H", "a:2", "--hostfile", str(hostfile)])
    hostfile.write_text("node1 slots=4\nnode2 slots=x\n")
    assert f"received 'node2:x' in {hostfile}:2" in error(["-np", "2", "--hostfile", str(hostfile)])
    hostfile.write_text("node1 cpus=4\n")
    assert f"received 'node1 cpus=4' at {hostfile}:1" in error(["-np", "2", "--hostfile", str(hostfile)])
    hostfile.write_text("# nothing\n")
    assert "lists no host" in error(["-np", "2", "--hostfile", str(hostfile)])
    assert "Cannot read the host file" in error(["-np", "2", "--hostfile", str(tmp_path / "none")])
    assert "--mpi-args '-genv \"A': No closing quotation" in error(
        ["-np", "2", "--mpi-args", '-genv "A'])


# ---------------------------------------------------------------------------- kerashvd.run


def test_run_returns_each_ranks_result_in_rank_order(capsys):
    import kerashvd

    def fn(scale):
        import kerashvd as hvd
        import tensorflow as tf

        hvd.init()
        total = hvd.allreduce(tf.constant(float(hvd.rank() + 1)), op=hvd.Sum)
        print(f"hello from rank {hvd.rank()}")
        return hvd.rank() * scale + float(total)

    assert kerashvd.run(fn, np=2, args=(10,), env={"OMP_NUM_THREADS": "1"}) == [3.0, 13.0]
    out = capsys.readouterr().out
    assert "[0] hello from rank 0" in out and "[1] hello from rank 1" in out, out


def test_run_lambda_and_cleans_up(tmp_path, monkeypatch):
    import tempfile

    import kerashvd

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    offset = 5
    assert kerashvd.run(lambda x: int(os.environ["PMI_RANK"]) + x + offset, np=2,
                        args=(100,)) == [105, 106]
    assert not any(p.name.startswith("kerashvd-run-") for p in tmp_path.iterdir())


def test_run_raises_rank_exception_with_traceback():
    import kerashvd
    from kerashvd.launcher import RankError

    def failing_fn():
        if os.environ["PMI_RANK"] == "1":
            raise ValueError("boom on rank 1")
        time.sleep(60)  # must be stopped, not waited for

    start = time.monotonic()
    with pytest.raises(RankError) as info:
        kerashvd.run(failing_fn, np=2)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert info.value.rank == 1 and "rank 1 (of 2) raised an exception" in message
    assert "Traceback (most recent call last)" in message
    assert "in failing_fn" in message and "ValueError: boom on rank 1" in message
    assert elapsed < 20, f"rank 0 (sleeping 60 s) took {elapsed:.1f} s to be stopped"


def test_run_reports_rank_that_died_without_result():
    import kerashvd
    from kerashvd.launcher import RankError

    def dies():
        if os.environ["PMI_RANK"] == "1":
            os._exit(3)
        time.sleep(60)

    with pytest.raises(RankError) as info:
        kerashvd.run(dies, np=2, verbose=False)
    assert info.value.rank == 1 and info.value.exit_code == 3
    assert "rank 1 (of 2) exited with code 3 without returning a result" in str(info.value)


def test_run_rejects_bad_arguments():
    import kerashvd

    with pytest.raises(TypeError, match="expects a callable fn"):
        kerashvd.run(42, np=2)
    with pytest.raises(ValueError, match=r"int >= 1; received np=0"):
        kerashvd.run(print, np=0)
    with pytest.raises(TypeError, match="args=\\(value,\\)"):
        kerashvd.run(print, np=1, args=5)
