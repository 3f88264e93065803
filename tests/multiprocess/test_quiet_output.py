"""Ranks' output without TensorFlow's startup notices, and the switch that brings them back.

TensorFlow writes a few lines at import and device setup on every rank (``WARNING: All log
messages before absl::InitializeLog() ...``, ``cudart_stub.cc ... Could not find cuda
drivers``, ``failed call to cuInit ... (303)``, ``cpu_feature_guard.cc ...``), partly before
it reads ``TF_CPP_MIN_LOG_LEVEL``. ``kerashvdrun`` and ``kerashvd.run`` leave them out
(kerashvd/launcher/_supervisor.py) unless ``TF_CPP_MIN_LOG_LEVEL=0``.
"""

import os
import subprocess
import sys

import pytest

from conftest import REPO, TF_NOTICE as NOTICE

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
KERASHVDRUN = os.path.join(os.path.dirname(sys.executable), "kerashvdrun")


def _kerashvdrun(*args, **env):
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("KERASHVD_", "PMI_")) and k != "TF_CPP_MIN_LOG_LEVEL"}
    full.update({"OMP_NUM_THREADS": "1", **env})
    proc = subprocess.run([KERASHVDRUN, "-np", "2", *args], env=full, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    return output


def test_quickstart_output_has_no_tensorflow_startup_notices():
    output = _kerashvdrun(sys.executable, "recipes/quickstart.py", "--tiny")
    assert "ranks=2 final val_accuracy=" in output, output[-3000:]
    assert not [line for line in output.splitlines() if NOTICE.search(line)], output[-5000:]


def test_tf_cpp_min_log_level_0_shows_them():
    code = "import tensorflow as tf; tf.constant(1.0).numpy(); print('done')"
    loud = _kerashvdrun(sys.executable, "-c", code, TF_CPP_MIN_LOG_LEVEL="0")
    notices = [line for line in loud.splitlines() if NOTICE.search(line)]
    if not notices:
        pytest.skip("TensorFlow printed no startup notices on this machine")
    assert loud.count("done") == 2  # (the quickstart test above runs without the switch)
