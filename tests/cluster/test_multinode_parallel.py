"""More of kerashvd across SLURM nodes (tests/fixtures/multinode_cluster.py), beyond test_multinode.py:

- tests/parallel's process-set tests and its Keras equivalence check (N ranks x batch B give
  the weights of 1 rank x batch N*B), run as they are by 3 ranks on 2 nodes (2 + 1, the
  uneven layout), so that the set "head" (ranks 0, 1) lies within the first node and "evens"
  (0, 2) spans both;
- GPU pinning by local rank with the fake GPUs of every node (SLURM's GRES): each rank's
  CUDA_VISIBLE_DEVICES and the device kerashvd's rule picks from it;
- the front-end notebook submitting a 2-node job.
"""

import json
import os
import sys

import pytest

from conftest import PARALLEL, REPO
from fixtures.multinode_cluster import retry_start
from test_slurm import RANK_ENV

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

UNEVEN = ["-N", "2", "-n", "3", "--distribution=block"]
GPU_PIN = os.path.join(REPO, "tests", "scripts", "slurm", "gpu_pin.py")


def run_job(cluster, argv, what, timeout=300, env=None):
    def launch():
        proc = cluster.run(argv, env=dict(RANK_ENV, **(env or {})), timeout=timeout)
        return proc.returncode == 0, proc.stdout + proc.stderr

    ok, output = retry_start(launch, what)
    assert ok, output[-8000:]
    return output


@pytest.mark.slow
def test_process_sets_and_keras_equivalence_across_nodes(cluster_2_nodes):
    # Where srun puts the ranks with these options (ranks 0, 1 on the first node).
    placed = run_job(cluster_2_nodes,
                     ["srun", *UNEVEN, "sh", "-c", 'echo "$SLURM_PROCID $(hostname)"'],
                     "srun placement")
    hosts = dict(line.split() for line in placed.splitlines() if line[:1].isdigit())
    nodes = cluster_2_nodes.nodes
    assert hosts == {"0": nodes[0], "1": nodes[0], "2": nodes[1]}, placed
    tests = [os.path.join(PARALLEL, "test_process_sets.py"),
             os.path.join(PARALLEL, "test_optimizer.py") +
             "::test_fit_equals_one_process_on_the_concatenated_batch"]
    output = run_job(
        cluster_2_nodes,
        ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1", *UNEVEN, "--chdir", REPO, sys.executable,
         "-m", "pytest", *tests, "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-W", "ignore::DeprecationWarning"],
        "srun tests/parallel 2+1", timeout=600,
        env={"KHVD_TEST_WORLD": "3", "PYTHONUNBUFFERED": "1"})
    summaries = [line for line in output.splitlines() if " passed" in line and " in " in line]
    assert len(summaries) == 3 and not any("failed" in s or "error" in s for s in summaries), \
        output[-8000:]
    # Every rank ran the sets' collectives and the four fit-equivalence cases.
    assert all(int(s.split(" passed")[0].split()[-1]) >= 30 for s in summaries), summaries


def test_gpu_pinning_by_local_rank_on_every_node(cluster_2_nodes):
    if not cluster_2_nodes.gpus:
        pytest.skip("no fake GPUs: mknod is not allowed here")
    nodes = cluster_2_nodes.nodes
    # --gres=gpu:2: both of a node's GPUs visible to each of its ranks; kerashvd keeps the
    # one of its local rank (as TensorFlow would number them).
    output = run_job(cluster_2_nodes, ["srun", "--mpi=pmi2", "-N", "2", "-n", "4",
                                       "--ntasks-per-node=2", "--gres=gpu:2", sys.executable,
                                       GPU_PIN], "srun gpu:2 per node")
    ranks = sorted((json.loads(line) for line in output.splitlines() if line.startswith("{")),
                   key=lambda r: r["rank"])
    assert [(r["host"], r["local_rank"], r["slurm_localid"]) for r in ranks] == [
        (nodes[0], 0, "0"), (nodes[0], 1, "1"), (nodes[1], 0, "0"), (nodes[1], 1, "1")], ranks
    assert [(r["visible"], r["pinned"]) for r in ranks] == \
        [(["0", "1"], "0"), (["0", "1"], "1")] * 2
    # --gpus-per-task=1: SLURM binds one GPU to each task, a different one per task of a
    # node; kerashvd leaves that single GPU as it is.
    output = run_job(cluster_2_nodes, ["srun", "--mpi=pmi2", "-N", "2", "-n", "4",
                                       "--ntasks-per-node=2", "--gpus-per-task=1",
                                       sys.executable, GPU_PIN], "srun gpus-per-task=1")
    ranks = sorted((json.loads(line) for line in output.splitlines() if line.startswith("{")),
                   key=lambda r: r["rank"])
    for node in nodes:
        mine = [r for r in ranks if r["host"] == node]
        assert len(mine) == 2 and all(len(r["visible"]) == 1 and r["pinned"] is None
                                      for r in mine), ranks
        assert sorted(r["visible"][0] for r in mine) == ["0", "1"], ranks


@pytest.mark.slow
def test_frontend_notebook_submits_a_two_node_job(cluster_2_nodes, tmp_path):
    """notebooks/slurm_frontend.ipynb with NODES=2: the job runs one rank on each node."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from fixtures.notebooks import SLURM_NOTEBOOK, cell_text, read_clean, with_parameters
    from conftest import TF_NOTICE

    def launch():
        nb = with_parameters(
            read_clean(SLURM_NOTEBOOK), RECIPE="quickstart.py", RECIPE_ARGS=["--tiny"],
            TEMPLATE="cpu", NODES=2, TASKS_PER_NODE=1, CPUS_PER_TASK=1, TIME_LIMIT="00:10:00",
            RUNS_DIR=str(tmp_path), POLL_SECONDS=1, MAX_WAIT_MINUTES=10)
        client = NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": os.path.dirname(SLURM_NOTEBOOK)}})
        try:
            client.execute(env=dict(cluster_2_nodes.env, **RANK_ENV))
            ok = True
        except CellExecutionError:
            ok = False
        return ok, "".join(cell_text(c) for c in nb.cells if c.cell_type == "code")

    ok, text = retry_start(launch, "notebook's 2-node job")
    assert ok, text[-8000:]
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text, text[-5000:]
    assert ": COMPLETED, exit code 0:0" in text, text[-5000:]
    assert "2 node(s), 2 ranks" in text and "ranks=2 final val_accuracy=" in text, text[-5000:]
    assert not [line for line in text.splitlines() if TF_NOTICE.search(line)], text[-5000:]
    job_id = text.split("submitted job ", 1)[1].split(";")[0].strip()
    node_list = cluster_2_nodes.job(job_id)["NodeList"]
    nodes = cluster_2_nodes.nodes
    assert node_list in (f"{nodes[0][:-1]}[1-2]", ",".join(nodes)), node_list
