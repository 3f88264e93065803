"""Horovod scripts with only the import changed, run for real under kerashvdrun at 2 ranks.

tests/scripts/horovod/ holds a Keras ``fit`` script and a TF2 custom loop written the way
Horovod's examples are (lazily built ``Sequential`` models, the GPU pinning lines, the
broadcast inside the first traced step, the warmup callback, checkpoints on rank 0), each
run with Keras 3 and with Keras 2 (tf_keras, ``TF_USE_LEGACY_KERAS=1``). Every rank must end
with the same weights, and the loss must fall.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

SCRIPTS = os.path.join(REPO, "tests", "scripts", "horovod")
KERAS = {"keras3": {}, "tf_keras": {"TF_USE_LEGACY_KERAS": "1"}}


def run_script(script, keras, *args):
    """Runs a script of tests/scripts/horovod/ on 2 ranks; returns each rank's JSON result."""
    env = dict(os.environ, KERASHVD_STALL_CHECK_TIME="20", KERASHVD_STALL_SHUTDOWN_TIME="60",
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **KERAS[keras])
    cmd = [os.path.join(os.path.dirname(sys.executable), "kerashvdrun"), "-np", "2",
           sys.executable, os.path.join(SCRIPTS, script), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{output[-6000:]}"
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"rank"')]
    assert sorted(r["rank"] for r in results) == [0, 1], output[-4000:]
    return results, output


def assert_trained_alike(results, last):
    """Same weights on every rank, and a mean loss over the ``last`` entries (epochs or steps)
    far below chance's ln(10) = 2.3."""
    weights = {r["weights"] for r in results}
    assert len(weights) == 1, f"ranks ended with different weights: {results}"
    for r in results:
        losses = r["losses"]
        assert np.mean(losses[-last:]) < 0.5, f"rank {r['rank']} did not learn the task: losses {losses}"


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("keras", sorted(KERAS))
def test_keras_fit_script(keras, tmp_path):
    results, output = run_script("keras_fit.py", keras, tmp_path)
    assert_trained_alike(results, last=1)  # the last epoch's mean
    assert [r["lr"] for r in results] == [pytest.approx(0.004)] * 2  # warmed up to 0.002 * 2
    assert "finished gradual learning rate warmup" in output
    extension = ".h5" if keras == "tf_keras" else ".keras"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"checkpoint-{epoch}{extension}" for epoch in range(1, 5)]


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("keras", sorted(KERAS))
def test_custom_loop_script(keras):
    results, output = run_script("custom_loop.py", keras)
    assert_trained_alike(results, last=5)  # the last five steps
    assert "Step #20\tLoss:" in output
