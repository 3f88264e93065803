"""kerashvd under a real SLURM cluster (the ``slurm_cluster`` fixture, tests/fixtures/slurm_cluster.py).

Covers: ``srun --mpi=pmi2`` gives one MPI world; a plain ``srun`` (each task a world of one)
is an error on every task; the launches that are fine inside a batch script (plain python,
kerashvdrun, the mpich package's mpiexec, srun, kerashvdrun inside an srun step); a failing
rank under kerashvdrun stops the job, and with --max-restarts starts it again; and the sbatch
templates in recipes/slurm/ train a recipe with a log free of TensorFlow's start-up notices,
and the GPU template warns when no GPU is bound.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import psutil

import pytest

from conftest import REPO, TF_NOTICE

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

WORLD = os.path.join(REPO, "tests", "scripts", "slurm", "world.py")
# Short stall deadlines: a mismatch must fail a test, not hang it.
RANK_ENV = {"KERASHVD_STALL_CHECK_TIME": "20", "KERASHVD_STALL_SHUTDOWN_TIME": "60",
            "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def reports(text):
    """The JSON objects printed by tests/scripts/slurm/world.py, in any order (ranks that
    share a log may interleave their lines)."""
    return [json.loads(match) for match in re.findall(r"\{[^{}]*\}", text)]


def srun_world(cluster, srun_options, *world_args, env=None):
    proc = cluster.run(["srun", *srun_options, sys.executable, WORLD, *world_args],
                       env=dict(RANK_ENV, **(env or {})), timeout=180)
    return proc, reports(proc.stdout)


@pytest.mark.parametrize("options, env, ntasks, allreduce", [
    (["--mpi=pmi2"], {}, 2, True),
    ([], {"SLURM_MPI_TYPE": "pmi2"}, 3, False),
], ids=["--mpi=pmi2", "SLURM_MPI_TYPE=pmi2"])
def test_srun_with_pmi2_starts_one_world(slurm_cluster, options, env, ntasks, allreduce):
    proc, ranks = srun_world(slurm_cluster, [*options, "-n", str(ntasks)],
                             *(["--allreduce"] if allreduce else []), env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert len(ranks) == ntasks, output[-5000:]
    assert sorted(r["rank"] for r in ranks) == list(range(ntasks))
    assert {r["size"] for r in ranks} == {ntasks}
    assert {r["local_size"] for r in ranks} == {ntasks}  # one host
    assert all(r["rank"] == int(r["procid"]) for r in ranks)  # MPI rank == SLURM task
    if allreduce:
        assert {r["sum"] for r in ranks} == {ntasks * (ntasks + 1) / 2}


def test_plain_srun_is_an_error_on_every_task(slurm_cluster):
    proc, tasks = srun_world(slurm_cluster, ["-n", "2"], "--allreduce")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-5000:]
    assert sorted(t["procid"] for t in tasks) == ["0", "1"], output[-5000:]
    for task in tasks:
        error = task.get("error", "")
        assert "the launcher started 2 processes (SLURM_STEP_NUM_TASKS=2)" in error, output
        assert "srun --mpi=pmi2 -n 2" in error and "SLURM_MPI_TYPE=pmi2" in error, error


BATCH_SCRIPT = """\
#!/bin/bash
# Launches that are right inside an allocation of 2 tasks; each prints its world.
world={world}
python "$world" --tag batch                   # the batch script's own python: a world of 1
kerashvdrun --verbose python "$world" --tag kerashvdrun --allreduce  # -np: SLURM_NTASKS
mpiexec -n 2 python "$world" --tag mpiexec    # the mpich package's hydra
srun --mpi=pmi2 python "$world" --tag srun
srun -n 1 kerashvdrun --verbose -np 2 python "$world" --tag nested  # in an srun step
kerashvdrun -x KHVD_TEST_VALUE=passed --prefix-output python -c \
    'import os; print("value", os.environ["KHVD_TEST_VALUE"])'
srun -n 1 python -c 'import kerashvd as hvd                   # kerashvd.run in an srun step
print("run:", hvd.run(lambda: hvd.init() or hvd.size(), np=2, verbose=False))'
# A rank that fails stops the job; kerashvdrun exits with its code.
kerashvdrun python -c 'import os, sys, time
if os.environ["PMI_RANK"] == "1": sys.exit(7)
time.sleep(120)'
echo "failing job: exit $?"
"""


def test_launches_inside_a_batch_script(slurm_cluster, tmp_path):
    script = tmp_path / "launches.sh"
    script.write_text(BATCH_SCRIPT.format(world=WORLD))
    job = slurm_cluster.sbatch(script, chdir=tmp_path, env=RANK_ENV,
                               options=["-n", "2", "-c", "2", f"--output={tmp_path}/%j.out"])
    state = slurm_cluster.wait(job, timeout=300)
    log = slurm_cluster.log(job)
    assert state == "COMPLETED", log[-5000:]
    by_tag = {}
    for report in reports(log):
        assert "error" not in report, log[-5000:]
        by_tag.setdefault(report["tag"], []).append(report)
    assert [r["size"] for r in by_tag["batch"]] == [1], log[-5000:]
    for tag in ("kerashvdrun", "mpiexec", "srun", "nested"):
        ranks = by_tag.get(tag, [])
        assert sorted(r["rank"] for r in ranks) == [0, 1], (tag, log[-5000:])
        assert {r["size"] for r in ranks} == {2}, (tag, log[-5000:])
    assert {r["sum"] for r in by_tag["kerashvdrun"]} == {3.0}
    # kerashvdrun's srun: the job's CPUs per task passed on, --overlap inside a step.
    kill = "--kill-on-bad-exit=1"
    assert re.search(rf"kerashvdrun: \S*srun --mpi=pmi2 {kill} --cpus-per-task=2 -n 2 ", log), log
    assert re.search(rf"kerashvdrun: \S*srun --mpi=pmi2 {kill} --overlap --cpus-per-task=2 -n 2 ",
                     log), log
    assert "[0] value passed" in log and "[1] value passed" in log, log[-5000:]
    assert "run: [2, 2]" in log, log[-5000:]
    assert "failing job: exit 7" in log, log[-5000:]
    assert "rank 1 exited with code 7" in log, log[-5000:]  # kerashvdrun names the rank


# Rank 1 fails on the first attempt only; every rank joins kerashvd (init() must accept
# KERASHVD_RESTART_COUNT) and says which attempt it is on.
FAIL_ONCE = """\
import os, time
import kerashvd as hvd
hvd.init()
attempt = os.environ["KERASHVD_RESTART_COUNT"]
print(f"rank {hvd.rank()} of {hvd.size()} on attempt {attempt}", flush=True)
if attempt == "0":
    if hvd.rank() == 1:
        os._exit(5)
    time.sleep(120)
"""


def test_kerashvdrun_restarts_a_failed_job_inside_a_batch_script(slurm_cluster, tmp_path):
    """``kerashvdrun --max-restarts 1`` in an allocation: the failed srun step is followed by
    a new one, whose ranks see KERASHVD_RESTART_COUNT=1, and the job ends COMPLETED."""
    (tmp_path / "fail_once.py").write_text(FAIL_ONCE)
    script = tmp_path / "restarts.sh"
    script.write_text("#!/bin/bash\n"
                      "kerashvdrun --max-restarts 1 --restart-delay 1 python fail_once.py\n"
                      'echo "restarted job: exit $?"\n')
    job = slurm_cluster.sbatch(script, chdir=tmp_path, env=RANK_ENV,
                               options=["-n", "2", f"--output={tmp_path}/%j.out"])
    state = slurm_cluster.wait(job, timeout=300)
    log = slurm_cluster.log(job)
    assert state == "COMPLETED", log[-5000:]
    for rank in (0, 1):
        for attempt in (0, 1):
            assert f"rank {rank} of 2 on attempt {attempt}" in log, log[-5000:]
    assert "kerashvdrun: rank 1 exited with code 5; stopping the other ranks." in log, log[-5000:]
    assert "kerashvdrun: attempt 1 of 2 failed (rank 1 exited with code 5)" in log, log[-5000:]
    assert "kerashvdrun: attempt 2 of 2 succeeded after 1 restart." in log, log[-5000:]
    assert "restarted job: exit 0" in log, log[-5000:]


def template_job(cluster, tmp_path, template, *recipe_args, options=(), gres=True):
    """Submits recipes/slurm/TEMPLATE from the repository root, as docs/launching.md says.

    ``gres=False`` submits the GPU template without its GRES request, as on a cluster whose
    nodes have no GPUs.
    """
    path = os.path.join(REPO, "recipes", "slurm", template)
    if template == "gpu.sbatch" and not (cluster.gpus and gres):
        # Asked for, or no fake GPUs on this cluster (no mknod): the same template without
        # its GRES request.
        text = open(path).read()
        path = tmp_path / template
        path.write_text(re.sub(r"(?m)^#SBATCH --gres=.*\n", "", text))
    job = cluster.sbatch(path, *recipe_args, chdir=REPO, env=RANK_ENV,
                         options=[f"--output={tmp_path}/%x-%j.out", *options])
    state = cluster.wait(job, timeout=600)
    return state, cluster.log(job)


# The templates ask for production sizes; the test cluster has 4 CPUs and 2 fake GPUs.
SMALL = {"cpu.sbatch": ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1"],
         "gpu.sbatch": ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1"]}
# What the templates' kerashvdrun --verbose prints: the CPUs per task passed on, and a rank
# that fails ending the others.
TEMPLATE_SRUN = re.compile(r"kerashvdrun: \S*srun --mpi=pmi2 --kill-on-bad-exit=1 "
                           r"--cpus-per-task=1 -n 2 ")
NO_GPU_WARNING = "uses the GPU template but no GPU is bound"


def tf_notices(log):
    """The lines of ``log`` that are TensorFlow start-up notices (none belong in a job log)."""
    return [line for line in log.splitlines() if TF_NOTICE.search(line)]


@pytest.mark.slow
@pytest.mark.parametrize("template", ["cpu.sbatch", "gpu.sbatch"])
def test_template_trains_the_quickstart(slurm_cluster, tmp_path, template):
    options = list(SMALL[template])
    if template == "gpu.sbatch" and slurm_cluster.gpus:
        options.append("--gres=gpu:2")
    state, log = template_job(slurm_cluster, tmp_path, template, "recipes/quickstart.py",
                              "--tiny", options=options)
    assert state == "COMPLETED", log[-5000:]
    assert "2 ranks" in log and "1 thread(s) each" in log, log[-3000:]
    assert tf_notices(log) == [], log[-5000:]
    assert TEMPLATE_SRUN.search(log), log[-3000:]
    if template == "gpu.sbatch" and slurm_cluster.gpus:
        assert "GPUs 0,1:" in log, log[-3000:]  # SLURM's binding of the (fake) GRES
        assert NO_GPU_WARNING not in log, log[-3000:]
    match = re.search(r"ranks=2 final val_accuracy=([0-9.]+)", log)
    assert match and float(match.group(1)) > 0.8, log[-5000:]


@pytest.mark.slow
def test_cpu_template_trains_mnist(slurm_cluster, tmp_path, mnist_data_dir):
    """The line of docs/recipes.md, on the small tfds MNIST of tests/fixtures/datasets."""
    csv = tmp_path / "mnist.csv"
    state, log = template_job(slurm_cluster, tmp_path, "cpu.sbatch", "recipes/mnist.py",
                              "--tiny", "--data-dir", mnist_data_dir, "--log-csv", csv,
                              options=SMALL["cpu.sbatch"])
    assert state == "COMPLETED", log[-5000:]
    match = re.search(r"ranks=2 epochs=2 final val_accuracy=([0-9.]+)", log)
    assert match and float(match.group(1)) > 0.8, log[-5000:]  # chance is 0.1
    assert tf_notices(log) == [], log[-5000:]
    assert len(csv.read_text().splitlines()) == 3, csv.read_text()  # header + 2 epochs


WHERE_AM_I = ("import os; print('rank', os.environ['PMI_RANK'], 'sees GPUs',"
              " os.environ.get('CUDA_VISIBLE_DEVICES', 'none'))")


@pytest.mark.parametrize("bound", [True, False], ids=["gres", "no-gres"])
def test_gpu_template_warns_once_when_no_gpu_is_bound(slurm_cluster, tmp_path, bound):
    """Without a GPU bound to the job, the GPU template says once that ranks train on the CPU;
    with SLURM's binding of the (fake) GRES, it says nothing."""
    if bound and not slurm_cluster.gpus:
        pytest.skip("no fake GPUs on this cluster (mknod failed)")
    options = [*SMALL["gpu.sbatch"], *(["--gres=gpu:2"] if bound else [])]
    state, log = template_job(slurm_cluster, tmp_path, "gpu.sbatch", "python", "-c",
                              WHERE_AM_I, options=options, gres=bound)
    assert state == "COMPLETED", log[-5000:]
    assert len(re.findall(r"(?m)^rank \d sees GPUs", log)) == 2, log[-3000:]
    if bound:
        assert NO_GPU_WARNING not in log, log[-3000:]
    else:
        assert log.count(NO_GPU_WARNING) == 1, log[-3000:]
        assert "every rank trains on the CPU" in log, log[-3000:]


def test_template_rejects_a_missing_recipe(slurm_cluster, tmp_path):
    state, log = template_job(slurm_cluster, tmp_path, "cpu.sbatch", "recipes/no_such.py",
                              options=SMALL["cpu.sbatch"])
    assert state == "FAILED", log
    assert "recipes/no_such.py: no such file" in log, log


# Task 1 fails before MPI starts; task 0 goes into MPI_Init, where it would wait for task 1
# until the time limit under SLURM's default KillOnBadExit=0.
FAIL_AT_START = """\
import os, sys
if os.environ["SLURM_PROCID"] == "1":
    sys.exit(3)
import kerashvd as hvd
hvd.init()
print("rank 0 passed init", flush=True)
"""


def test_template_ends_the_job_when_a_rank_fails_at_start(slurm_cluster, tmp_path):
    script = tmp_path / "fail_at_start.py"
    script.write_text(FAIL_AT_START)
    state, log = template_job(slurm_cluster, tmp_path, "cpu.sbatch", script,
                              options=[*SMALL["cpu.sbatch"], "--time=3"])
    assert state == "FAILED", (state, log[-5000:])  # TIMEOUT without --kill-on-bad-exit
    assert "rank 0 passed init" not in log, log[-5000:]


def test_fixture_leaves_the_node_idle(slurm_cluster):
    """Sanity of the fixture itself: the node is up and offers the CPUs the tests rely on."""
    proc = slurm_cluster.run(["scontrol", "show", "node", slurm_cluster.node])
    assert proc.returncode == 0, proc.stderr
    assert f"CPUTot={slurm_cluster.cpus}" in proc.stdout, proc.stdout
    assert shutil.which("srun", path=slurm_cluster.env["PATH"]), slurm_cluster.env["PATH"]


def test_srun_command_takes_the_job_shape_and_the_users_options():
    """No cluster needed: what kerashvdrun asks srun for, from the allocation's variables."""
    from kerashvd.launcher.backends.srun import srun_command

    def head(environ, srun_args=(), env=None):
        argv = srun_command("srun", 4, ["python", "t.py"], environ=environ,
                            srun_args=srun_args, env=env)
        return argv[:argv.index("-n") + 2], argv[argv.index("--") + 1:]

    kill = "--kill-on-bad-exit=1"
    assert head({}) == (["srun", "--mpi=pmi2", kill, "-n", "4"], ["python", "t.py"])
    assert head({"SLURM_CPUS_PER_TASK": "8", "SLURM_STEP_ID": "0"})[0] == [
        "srun", "--mpi=pmi2", kill, "--overlap", "--cpus-per-task=8", "-n", "4"]
    for given in (["-c", "2"], ["--cpus-per-task", "2"], ["--cpus-per-task=2"]):
        assert head({"SLURM_CPUS_PER_TASK": "8"}, given)[0] == ["srun", "--mpi=pmi2", kill,
                                                                *given, "-n", "4"]
    for given in (["-K0"], ["--kill-on-bad-exit=0"], ["--kill-on-bad-exit", "0"]):
        assert head({}, given)[0] == ["srun", "--mpi=pmi2", *given, "-n", "4"]
    assert head({}, env={"A": "1", "B": "x y"})[1] == ["env", "A=1", "B=x y", "python", "t.py"]


def _step_daemons(job):
    """Pids of the slurmstepd processes of ``job`` (their title is "slurmstepd: [JOB.STEP]")."""
    from fixtures.node_network import _cmdline

    titles = {pid: _cmdline(pid) for pid in psutil.pids()}
    return [pid for pid, title in titles.items() if title and title.startswith("slurmstepd")
            and (f"[{job}." in title or f"[{job}]" in title)]


def wait_through_requeue(cluster, job, timeout=600):
    """``cluster.wait(job)`` through a requeue. SLURM holds a requeued job (``Reason=BeginTime``)
    for the credential lifetime (``cluster.cred_expire``) and then starts it at its next
    scheduling pass, up to a minute later; this waits out the hold and then asks for that pass
    at once (``scontrol update StartTime=now``)."""
    deadline = time.monotonic() + timeout
    held_since = None
    while time.monotonic() < deadline:
        fields = cluster.job(job)
        held = fields.get("JobState") == "PENDING" and fields.get("Reason") == "BeginTime"
        if held and held_since is None:
            held_since = time.monotonic()
        # Not before the hold is over: slurmd revoked the last run's credentials, and a run
        # started sooner has been refused ("Job credential revoked", "Job ... already killed,
        # do not launch batch job") and ended FAILED. And only once every slurmstepd of the
        # last run has exited: the next run has the same job and step ids, and an old step
        # still ending removes its PMI-2 socket, which by then is the new step's (srun fails
        # at the ranks' last PMI exchange, "mpi/pmi2: failed to send temp kvs to compute
        # nodes").
        if (held and time.monotonic() - held_since >= cluster.cred_expire + 1
                and not _step_daemons(job)):
            cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], timeout=30)
        if fields.get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING",
                                           "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", None):
            break
        time.sleep(0.25)
    return cluster.wait(job, timeout=max(1, deadline - time.monotonic()))


def _archive_arrays(path):
    """Every array of a ``.keras`` checkpoint (weights, optimizer state, RNG state) by name."""
    import io
    import zipfile

    import h5py

    arrays = {}
    with zipfile.ZipFile(path) as archive:
        with h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as weights:
            weights.visititems(lambda name, obj: arrays.__setitem__(name, np.array(obj))
                               if isinstance(obj, h5py.Dataset) else None)
        with np.load(io.BytesIO(archive.read("kerashvd/random_state.npz"))) as state:
            arrays.update({f"random_state/{k}": state[k] for k in state.files})
    return arrays


@pytest.mark.slow
def test_template_stops_on_the_walltime_signal_requeues_and_resumes_exactly(
        slurm_cluster, tmp_path, mnist_data_dir):
    """What ``#SBATCH --signal=USR1@120`` sends before the time limit, sent mid-epoch with
    ``scancel --signal=USR1``: every rank stops after the same batch, rank 0 saves, the job
    requeues itself and the next run resumes at that batch, ending with the weights (and
    optimizer and RNG state) of a run that was never interrupted."""
    common = ["--tiny", "--data-dir", mnist_data_dir]
    reference = tmp_path / "reference"
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "kerashvdrun"), "-np", "2",
         sys.executable, os.path.join(REPO, "recipes", "mnist.py"), *common,
         "--checkpoint-dir", reference], capture_output=True, text=True, timeout=600,
        cwd=REPO, env=dict(os.environ, **RANK_ENV, TF_NUM_INTRAOP_THREADS="1"))  # as the job
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]

    ckpt = tmp_path / "ckpt"
    job = slurm_cluster.sbatch(
        os.path.join(REPO, "recipes", "slurm", "cpu.sbatch"), "recipes/mnist.py", *common,
        "--checkpoint-dir", ckpt, "--save-every", "1", "--keep", "3", chdir=REPO, env=RANK_ENV,
        options=[f"--output={tmp_path}/%x-%j.out", *SMALL["cpu.sbatch"]])
    deadline = time.monotonic() + 300
    while not (ckpt / "model-001-step000002.keras").exists():  # training is under way
        assert time.monotonic() < deadline, slurm_cluster.log(job)[-5000:]
        time.sleep(0.05)
    slurm_cluster.run(["scancel", "--signal=USR1", str(job)], timeout=30)
    state = wait_through_requeue(slurm_cluster, job)
    log = slurm_cluster.log(job)
    assert state == "COMPLETED", f"{log[-5000:]}\n{slurm_cluster.history(job)}"
    stopped = re.search(r"SIGUSR1 received: every rank stopped after batch (\d+) of epoch 1", log)
    assert stopped, log[-5000:]
    assert "stopped with a checkpoint; requeueing (run 1 of at most 20)" in log, log[-5000:]
    assert re.search(rf"Resuming from \S*model-001-step{int(stopped.group(1)):06d}\.keras at "
                     rf"batch {int(stopped.group(1)) + 1} of epoch 1", log), log[-5000:]
    assert re.search(r"ranks=2 epochs=2 final val_accuracy=", log), log[-5000:]
    assert sorted(p.name for p in ckpt.glob("*.keras"))[-1] == "model-002.keras"

    expected, actual = (_archive_arrays(d / "model-002.keras") for d in (reference, ckpt))
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert np.array_equal(actual[name], value), name


@pytest.mark.slow
def test_template_signals_every_rank_before_the_time_limit_and_requeues(slurm_cluster, tmp_path):
    """The templates' ``--signal=USR1@120`` reaches every rank (not only the batch shell), and
    their exit code 75 requeues the job: checked with a 1-minute limit and a 40 s warning (20
    s after the start: a rank that has not set its handler yet dies of the signal, and on a
    busy machine the ranks have been seen to start 10 s after the job)."""
    job = slurm_cluster.sbatch(
        os.path.join(REPO, "recipes", "slurm", "cpu.sbatch"), "python",
        os.path.join(REPO, "tests", "scripts", "slurm", "walltime_signal.py"), "58", chdir=REPO,
        env=RANK_ENV, options=[f"--output={tmp_path}/%x-%j.out", *SMALL["cpu.sbatch"],
                               "--time=1", "--signal=USR1@40"])
    state = wait_through_requeue(slurm_cluster, job, timeout=300)
    log = slurm_cluster.log(job)
    assert state == "COMPLETED", (f"{log[-3000:]}\n{slurm_cluster.job(job)}\n"
                                  f"{slurm_cluster.history(job)}")
    assert len(re.findall(r"(?m)^rank \d: SIGUSR1 \d+ s after the start", log)) == 2, log[-5000:]
    assert "requeueing (run 1 of at most 20)" in log, log[-5000:]
    assert len(re.findall(r"(?m)^rank \d: requeued run 1$", log)) == 2, log[-5000:]


@pytest.mark.slow
def test_scancel_stops_every_rank_at_one_batch_with_a_checkpoint(slurm_cluster, tmp_path,
                                                                 mnist_data_dir):
    """``scancel`` (SIGTERM to every process of the job, as preemption sends): the ranks stop
    after the same batch within the grace time and rank 0's checkpoint of that batch is
    complete (that a run resumes from such a checkpoint exactly, the requeue test above shows)."""
    ckpt = tmp_path / "ckpt"
    args = ["recipes/mnist.py", "--tiny", "--data-dir", mnist_data_dir, "--checkpoint-dir", ckpt,
            "--save-every", "1"]
    options = [f"--output={tmp_path}/%x-%j.out", *SMALL["cpu.sbatch"]]
    template = os.path.join(REPO, "recipes", "slurm", "cpu.sbatch")
    job = slurm_cluster.sbatch(template, *args, chdir=REPO, env=RANK_ENV, options=options)
    deadline = time.monotonic() + 300
    while not (ckpt / "model-001-step000002.keras").exists():
        assert time.monotonic() < deadline, slurm_cluster.log(job)[-5000:]
        time.sleep(0.05)
    slurm_cluster.run(["scancel", str(job)], timeout=30)
    assert slurm_cluster.wait(job, timeout=120) == "CANCELLED"
    log = slurm_cluster.log(job)
    stopped = re.search(r"SIGTERM received: every rank stopped after batch (\d+) of epoch 1", log)
    assert stopped, log[-5000:]
    record = json.loads((ckpt / "kerashvd_checkpoint.json").read_text())
    assert (record["epoch"], record["step"]) == (0, int(stopped.group(1))), record

    found = json.loads((ckpt / "kerashvd_checkpoint.json").read_text())["path"]
    assert os.path.getsize(ckpt / found) > 0 and not list(ckpt.glob(".tmp-*")), found
