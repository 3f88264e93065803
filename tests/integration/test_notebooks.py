"""Notebooks are tested code: each one in notebooks/ runs top to bottom in a fresh kernel.

They are stored without outputs (checked here too). The quickstart and timeline notebooks
start their own MPI processes with kerashvd.run, so the kernel itself stays a single process.
The SLURM front-end notebook submits a job to the test's own SLURM cluster (the
``slurm_cluster`` fixture; skipped where SLURM is not installed) with its parameters set by a
cell added after its ``parameters`` cell, as papermill does; a request the cluster can never
satisfy must end the notebook at once, saying what to change.
"""

import csv
import glob
import os
import re
import time

import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from conftest import REPO, TF_NOTICE
from fixtures.notebooks import SLURM_NOTEBOOK, cell_text, read_clean, with_parameters

NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")))
LOCAL_NOTEBOOKS = [p for p in NOTEBOOKS if p != SLURM_NOTEBOOK]


@pytest.mark.mpi
@pytest.mark.parametrize("path", LOCAL_NOTEBOOKS, ids=[os.path.basename(p) for p in LOCAL_NOTEBOOKS])
def test_notebook_runs(path):
    nb = read_clean(path)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(path)}}).execute()


@pytest.mark.mpi
@pytest.mark.slow
def test_slurm_frontend_notebook(slurm_cluster, mnist_data_dir, tmp_path):
    """The front-end notebook trains tiny MNIST as a 2-rank SLURM job and plots its CSV log."""
    nb = with_parameters(
        read_clean(SLURM_NOTEBOOK), RECIPE="mnist.py",
        RECIPE_ARGS=["--tiny", "--data-dir", mnist_data_dir], TEMPLATE="cpu", NODES=1,
        TASKS_PER_NODE=2, CPUS_PER_TASK=1, TIME_LIMIT="00:10:00", RUNS_DIR=str(tmp_path),
        POLL_SECONDS=1, MAX_WAIT_MINUTES=10)
    env = dict(slurm_cluster.env, KERASHVD_STALL_CHECK_TIME="20",
               KERASHVD_STALL_SHUTDOWN_TIME="60", OMP_NUM_THREADS="1")
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(SLURM_NOTEBOOK)}}).execute(env=env)
    text = "".join(cell_text(c) for c in nb.cells if c.cell_type == "code")
    assert "#SBATCH --ntasks-per-node=2" in text and "#SBATCH --cpus-per-task=1" in text, text[-5000:]
    assert "submitted job" in text, text[-5000:]
    assert "RUNNING" in text and ": COMPLETED, exit code 0:0" in text, text[-5000:]
    # The job's log, followed while it ran: the recipe's own last line.
    assert "ranks=2 epochs=2 final val_accuracy=" in text, text[-5000:]
    assert [line for line in text.splitlines() if TF_NOTICE.search(line)] == [], text[-5000:]
    plots = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(plots) == 1, text[-5000:]
    (run_dir,) = tmp_path.iterdir()
    with open(run_dir / "log.csv", newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["1", "2"]
    assert (run_dir / "training.png").stat().st_size > 0
    assert (run_dir / "job.sbatch").read_text().startswith("#!/bin/bash")


@pytest.mark.mpi
def test_slurm_frontend_notebook_stops_when_the_job_can_never_start(slurm_cluster, tmp_path):
    """More CPUs per task than the node has: SLURM keeps the job PENDING (PartitionConfig) for
    ever; the notebook must say so and what to change, cancel it, and stop, well before its
    default MAX_WAIT_MINUTES."""
    cpus = slurm_cluster.cpus * 2
    nb = with_parameters(
        read_clean(SLURM_NOTEBOOK), RECIPE="quickstart.py", RECIPE_ARGS=["--tiny"],
        TEMPLATE="cpu", NODES=1, TASKS_PER_NODE=1, CPUS_PER_TASK=cpus, TIME_LIMIT="00:10:00",
        RUNS_DIR=str(tmp_path), POLL_SECONDS=1)
    start = time.monotonic()
    with pytest.raises(CellExecutionError):
        NotebookClient(nb, timeout=120, kernel_name="python3",  # a cell: seconds, not hours
                       resources={"metadata": {"path": os.path.dirname(SLURM_NOTEBOOK)}}
                       ).execute(env=slurm_cluster.env)
    elapsed = time.monotonic() - start
    text = "".join(cell_text(c) for c in nb.cells if c.cell_type == "code")
    job_id = int(re.search(r"submitted job (\d+)", text).group(1))
    assert "can never start as submitted: it is PENDING with reason PartitionConfig" in text, text
    assert (f"it asks for 1 task(s) x {cpus} CPUs = {cpus} CPUs per node, nodes of partition "
            f"debug have {slurm_cluster.cpus}: lower CPUS_PER_TASK or TASKS_PER_NODE") in text, text
    assert f"Cancelled job {job_id}" in text, text
    assert slurm_cluster.wait(job_id, timeout=60) == "CANCELLED"
    assert elapsed < 120, (elapsed, text)
