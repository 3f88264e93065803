"""The oldest TensorFlow and Keras kerashvd supports (docs/getting-started.md, "Supported
releases"), tested.

The rest of the suite runs on the newest pair (the one ``pip install`` picks). ``.ci/run``
also builds kerashvd in a second virtual environment holding the oldest pair (TensorFlow
2.16.2, Keras 3.3.3), compiled against that TensorFlow, and names its Python in
``KHVD_OLDEST_PYTHON``; these tests run the collectives and Keras tests there, at one and two
ranks. Without that environment they are skipped (see ``.ci/run`` to make one by hand).
A kerashvd whose ops were compiled against another TensorFlow than the one installed is
refused at import (tests/unit/test_single_process.py).
"""

import os
import subprocess

import pytest

from conftest import REPO

OLDEST = os.environ.get("KHVD_OLDEST_PYTHON")
OLDEST_PAIR = ("2.16.2", "3.3.3")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not OLDEST, reason="KHVD_OLDEST_PYTHON is not set (.ci/run builds the oldest "
                       "TensorFlow/Keras environment and sets it)")]

COLLECTIVES = ["test_allreduce.py", "test_allgather.py", "test_broadcast.py", "test_alltoall.py",
               "test_reducescatter.py", "test_process_sets.py"]
KERAS = ["test_optimizer.py", "test_callbacks.py", "test_callbacks_fit.py", "test_saving.py",
         "test_checkpoint.py",
         "test_resume.py", "test_uneven_data.py", "test_sync_batch_norm.py"]
ENV = {"KERASHVD_STALL_CHECK_TIME": "20", "KERASHVD_STALL_SHUTDOWN_TIME": "60",
       "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}


def _run(argv, timeout=900, **env):
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **ENV, **env))
    return proc.returncode, proc.stdout + proc.stderr


def test_the_environment_holds_the_oldest_pair():
    code, out = _run([OLDEST, "-c", "import tensorflow as tf, keras, kerashvd; "
                      "print(tf.__version__, keras.__version__, kerashvd.build_info()['tensorflow_version'])"])
    assert code == 0, out[-3000:]
    tf_version, keras_version, built_for = out.strip().splitlines()[-1].split()
    assert (tf_version, keras_version) == OLDEST_PAIR
    assert built_for == tf_version  # its ops were compiled against this TensorFlow


def test_collectives_and_keras_at_one_rank():
    files = [os.path.join("tests", "parallel", f) for f in COLLECTIVES + KERAS]
    files.append(os.path.join("tests", "unit", "test_private_api.py"))  # the internals kerashvd uses
    code, out = _run([OLDEST, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider",
                      "-m", "not slow"])
    assert code == 0, out[-6000:]


def test_collectives_and_keras_at_two_ranks():
    mpiexec = os.path.join(os.path.dirname(OLDEST), "mpiexec")
    files = [os.path.join("tests", "parallel", f) for f in ("test_allreduce.py", "test_optimizer.py")]
    code, out = _run([mpiexec, "-n", "2", OLDEST, "-m", "pytest", *files, "-q",
                      "-p", "no:cacheprovider", "-m", "not slow"], KHVD_TEST_WORLD="2")
    assert code == 0, out[-6000:]

