"""Elastic training for real: ``kerashvdrun --min-np/--max-np/--host-discovery-script``
starting worlds of Keras ranks, a rank or a node lost mid-epoch, a node coming back, and
Horovod's elastic Keras example with only its import changed.

The training script is tests/scripts/elastic/train.py: its data is a function of (epoch,
step, rank), so a run of fixed sizes without the elastic mode (its ``--reference`` phases, in
one job, a smaller phase on a process set) trains the same steps, and the elastic run must
end with the same bytes in every model and optimizer variable. Each test prints what it
measured (seconds from the kill to training again in the new world, steps lost).
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import REPO
from fixtures.processes import LIGHT, assert_nothing_left, kill_all, processes_naming
from fixtures.processes import launcher_env as _env

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

TRAIN = os.path.join(REPO, "tests", "scripts", "elastic", "train.py")
HOROVOD = os.path.join(REPO, "tests", "scripts", "horovod")
EPOCHS, STEPS = 2, 12


class Job:
    """A running kerashvdrun: its stdout's JSON events and every output line, as they come."""

    def __init__(self, argv, cwd=REPO, env=None):
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env or _env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines, self.events, self._new = [], [], queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith('{"event"'):
                self.events.append(json.loads(line))
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, predicate, what, timeout=180):
        """Waits until ``predicate(event)`` holds for an event, or a line of output when
        ``predicate`` is a string; returns the event or line."""
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for item in (self.lines if isinstance(predicate, str) else self.events)[seen:]:
                if (predicate in item) if isinstance(predicate, str) else predicate(item):
                    return item
            seen = len(self.lines if isinstance(predicate, str) else self.events)
            try:
                if self._new.get(timeout=0.2) is None:
                    break
            except queue.Empty:
                pass
        self.proc.kill()
        pytest.fail(f"{what} did not happen within {timeout} s:\n{self.output()[-6000:]}")

    def finish(self, timeout=240):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"kerashvdrun did not end within {timeout} s:\n{self.output()[-6000:]}")
        for _ in range(50):
            if self._new.empty() and self.proc.stdout.closed or not self._new.empty():
                break
            time.sleep(0.05)
        time.sleep(0.2)
        return self.proc.returncode

    def output(self):
        return "".join(self.lines)

    def of(self, kind, **match):
        return [e for e in self.events if e["event"] == kind and
                all(e.get(k) == v for k, v in match.items())]


def discovery(tmp_path, text):
    """A discovery script printing the file it reads; returns (script, hosts file)."""
    hosts = tmp_path / "hosts"
    hosts.write_text(text)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts}\n")
    script.chmod(0o755)
    return str(script), hosts


@pytest.fixture
def out(tmp_path):
    directory = tmp_path / "out"
    directory.mkdir()
    yield directory
    kill_all(processes_naming(str(directory)))


def test_a_rank_killed_mid_epoch_leaves_a_world_of_two_equal_to_a_run_of_three_then_two(
        tmp_path, out, shm_segments_left):
    script, _ = discovery(tmp_path, "localhost:3\n")
    job = Job([sys.executable, LIGHT, "--min-np", "2", "--max-np", "3",
               "--host-discovery-script", script, sys.executable, TRAIN, str(out),
               "--epochs", str(EPOCHS), "--steps", str(STEPS), "--pace", "0.05"])
    job.wait_for(lambda e: e["event"] == "step" and e["step"] >= 5, "step 5 of world 1")
    os.kill(int((out / "pid.0.2").read_text()), signal.SIGKILL)
    killed = time.time()
    assert job.finish() == 0, job.output()[-6000:]
    log = job.output()
    worlds = job.of("world")
    assert [(w["world"], w["size"]) for w in worlds] == [(0, 3), (1, 2)], log
    before = max(e["step"] for e in job.of("step", world=0))  # rank 0's last commit
    resumed = worlds[1]["step"]
    assert before <= resumed <= before + 1, (before, resumed)  # a survivor's newer commit
    assert "kerashvdrun: rank 2 was killed by signal 9 (SIGKILL)" in log
    assert f"ranks 0, 1 handed over (commit " in log and "Reset 1." in log
    assert f"kerashvdrun: elastic: world 2 trains from commit {resumed + resumed // STEPS}" \
        in log, log  # the epoch ends commit too
    finals = job.of("final")
    assert sorted(e["rank"] for e in finals) == [0, 1] and len({e["digest"] for e in finals}) == 1
    assert [e["step"] for e in job.of("step", world=1)] == list(range(resumed + 1,
                                                                      EPOCHS * STEPS + 1))
    assert_nothing_left(str(out))
    assert shm_segments_left() == []

    # The same steps on 3 ranks, then 2, in one job without the elastic mode.
    reference = subprocess.run(
        [sys.executable, LIGHT, "-np", "3", sys.executable, TRAIN, str(out), "--epochs",
         str(EPOCHS), "--steps", str(STEPS), "--reference",
         f"3:0:{resumed},2:{resumed}:{EPOCHS * STEPS}", "--save", str(out / "reference.npz")],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=240)
    assert reference.returncode == 0, reference.stdout[-3000:] + reference.stderr[-3000:]
    with np.load(out / "final.npz") as elastic, np.load(out / "reference.npz") as expected:
        assert elastic.files == expected.files
        for name in elastic.files:
            np.testing.assert_array_equal(elastic[name], expected[name], err_msg=name)
    print(f"killed after step {before}, resumed from step {resumed}; world 2 started "
          f"training {worlds[1]['time'] - killed:.1f} s after the kill")


def test_horovod_elastic_keras_example_grows_from_one_rank_to_two(tmp_path):
    """Horovod's example, import changed, under tf_keras: a host slot comes while it trains;
    the next commit moves training to a world of 2, whose reset callback rescales the
    learning rate and runs its one-step fit, and the example ends."""
    script, hosts = discovery(tmp_path, "localhost:1\n")
    env = dict(_env(), TF_USE_LEGACY_KERAS="1")
    job = Job([sys.executable, LIGHT, "--min-np", "1", "--max-np", "2",
               "--host-discovery-script", script, sys.executable,
               os.path.join(HOROVOD, "offline_mnist.py"),
               os.path.join(HOROVOD, "keras_mnist_elastic.py"), "--batches-per-epoch", "32",
               "--epochs", "8", "--batch-size", "16"], cwd=tmp_path, env=env)
    deadline = time.monotonic() + 180
    while not (tmp_path / "checkpoint-1.h5").exists():
        assert job.proc.poll() is None and time.monotonic() < deadline, job.output()[-6000:]
        time.sleep(0.1)
    # The new slot is listed after epoch 1; discovery runs every second, so the 7 epochs
    # left (32 batches each) must outlast it. With 4 batches an epoch (about 0.1 s), training
    # had ended before the update came in one CI-style run.
    hosts.write_text("localhost:2\n")
    assert job.finish() == 0, job.output()[-6000:]
    log = job.output()
    assert "kerashvdrun: elastic: world 1 ends at its next commit; the next runs 2 ranks on " \
           "localhost:2." in log, log
    assert "ended: hosts added; rank 0 handed over (commit " in log, log
    assert "kerashvdrun: elastic: world 2: 2 ranks on localhost:2, from commit" in log, log
    assert "kerashvdrun: elastic: training finished in world 2, after 1 reset." in log
    assert (tmp_path / "checkpoint-1.h5").exists()


@pytest.mark.slurm
def test_a_node_lost_in_a_slurm_allocation_leaves_the_job_on_the_other(cluster_2_nodes,
                                                                        tmp_path, out):
    """sbatch -N 2 --no-kill: kerashvdrun takes the allocation's nodes as hosts. Every job
    process of the second node (slurmstepd, supervisor, rank) is SIGKILLed mid-epoch: the
    survivor hands over, srun (which waits for ever for a node whose slurmstepd is gone) is
    stopped once every rank has ended, and a world of one rank finishes on the first node."""
    from test_node_failures import _node_processes, _signal_all
    from test_slurm import RANK_ENV

    cluster = cluster_2_nodes
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nkerashvdrun --min-np 1 {sys.executable} {TRAIN} {out} "
                      f"--epochs {EPOCHS} --steps {STEPS} --pace 0.05\n")
    job = cluster.sbatch(script, chdir=tmp_path, env=dict(RANK_ENV, PYTHONUNBUFFERED="1"),
                         options=["-N", "2", "--ntasks-per-node=1", "--no-kill",
                                  f"--output={tmp_path}/%j.out"])
    deadline = time.monotonic() + 180
    while '"step": 3,' not in cluster.log(job):
        assert time.monotonic() < deadline and cluster.job(job).get("JobState") in (
            "PENDING", "RUNNING"), cluster.log(job)[-5000:]
        time.sleep(0.1)
    _signal_all(_node_processes(cluster.nodes[1]), signal.SIGKILL)
    assert cluster.wait(job, timeout=240) == "COMPLETED", cluster.log(job)[-5000:]
    log = cluster.log(job)
    n1, n2 = cluster.nodes
    assert f"(the SLURM allocation lists {n1}:1,{n2}:1)" in log, log
    assert f"--nodelist={n1},{n2} --distribution=arbitrary -n 2 " not in log  # not --verbose
    assert "every rank of world 1 has ended, but 5 s later its launcher still waits" in log
    assert f"kerashvdrun: elastic: world 2: 1 rank on {n1}:1, from commit" in log, log
    events = [json.loads(line) for line in log.splitlines() if line.startswith('{"event"')]
    finals = [e for e in events if e["event"] == "final"]
    assert [(e["world"], e["host"]) for e in finals] == [(1, n1)], log
    assert max(e["step"] for e in events if e["event"] == "step") == EPOCHS * STEPS


def test_a_node_lost_mid_epoch_then_back_rejoins(ssh_nodes, tmp_path, out):
    """Two nodes over ssh, one rank each: every process of the second node is SIGKILLed
    mid-epoch; the job goes on on the first; discovery drops the second node, lists it
    again, and it joins at the next commit (a world of 1 holds at step 16 until then)."""
    from test_ssh_launch import assert_nothing_left

    n1, n2 = ssh_nodes.nodes
    script, hosts = discovery(tmp_path, f"{n1}:1\n{n2}:1\n")
    argv = [sys.executable, "-m", "kerashvd.launcher.cli", "--ssh-config-file",
            ssh_nodes.ssh_config, "--min-np", "1", "--max-np", "2",
            "--host-discovery-script", script, sys.executable, TRAIN, str(out), "--epochs",
            str(EPOCHS), "--steps", str(STEPS), "--pace", "0.05", "--hold", "16:2"]
    job = Job(ssh_nodes.command(n1, argv))
    job.wait_for(lambda e: e["event"] == "step" and e["step"] >= 3, "step 3 of world 1")
    for pid, _ in ssh_nodes.processes(n2):
        os.kill(pid, signal.SIGKILL)
    killed = time.time()
    world = job.wait_for(lambda e: e["event"] == "world" and e["world"] == 1, "world 2")
    hosts.write_text(f"{n1}:1\n")
    job.wait_for(f"kerashvdrun: elastic: hosts -{n2}", "the node leaving the list")
    hosts.write_text(f"{n1}:1\n{n2}:1\n")
    assert job.finish() == 0, job.output()[-6000:]
    log = job.output()
    assert [(w["world"], w["size"]) for w in job.of("world")] == [(0, 2), (1, 1), (2, 2)], log
    assert f"rank 1 ended without a word (killed with its supervisor, or stopped by " \
           f"kerashvdrun); rank 0 handed over" in log, log
    assert f"kerashvdrun: elastic: world 2: 1 rank on {n1}:1, from commit" in log, log
    assert f"kerashvdrun: elastic: world 3: 2 ranks on {n1}:1,{n2}:1" in log, log
    finals = job.of("final", world=2)
    assert sorted((e["rank"], e["host"]) for e in finals) == [(0, n1), (1, n2)], log
    assert len({e["digest"] for e in finals}) == 1
    steps = [e["step"] for e in job.of("step")]
    assert steps[-1] == EPOCHS * STEPS and job.of("world")[2]["step"] <= 16
    assert_nothing_left(ssh_nodes)
    print(f"node lost after step {max(e['step'] for e in job.of('step', world=0))}; world 2 "
          f"started training {world['time'] - killed:.1f} s after the kill, from step "
          f"{world['step']}")


def test_an_error_of_the_script_on_every_rank_ends_the_job_at_once(tmp_path, out):
    """Every rank raises ValueError at step 3 (inside hvd.elastic.run, no host lost): the job
    ends with that error instead of waiting --elastic-timeout for hosts (discovery could bring
    some), and no other world starts."""
    script, _ = discovery(tmp_path, "localhost:2\n")
    started = time.monotonic()
    job = Job([sys.executable, LIGHT, "--min-np", "1", "--max-np", "2",
               "--host-discovery-script", script, "--elastic-timeout", "120", sys.executable,
               TRAIN, str(out), "--epochs", str(EPOCHS), "--steps", str(STEPS),
               "--fail-at", "3"])
    assert job.finish() == 1, job.output()[-6000:]
    seconds = time.monotonic() - started
    log = job.output()
    assert "kerashvdrun: elastic: world 1 (2 ranks on localhost:2) ended: rank 0 exited with " \
           "code 1 (on localhost); rank 1 exited with code 1 (on localhost).\nEvery rank " \
           "failed by itself (ranks 0, 1: ValueError: bad input at step 3): an error of the " \
           "training script, which another world would meet again; not starting one." in log, log
    assert [w["world"] for w in job.of("world")] == [0] and "waiting up to" not in log, log
    assert seconds < 60, (seconds, log[-3000:])
    print(f"the job ended {seconds:.1f} s after it started")
