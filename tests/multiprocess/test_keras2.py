"""The Keras tests rerun with Keras 2 (tf_keras, ``TF_USE_LEGACY_KERAS=1``) at 2 ranks.

Every test under tests/parallel/ marked ``keras`` (callbacks, validation, checkpoints,
optimizer, mixed precision, saving, tape, uneven data, data) runs again in fresh processes
with ``TF_USE_LEGACY_KERAS=1``, which routes ``tf.keras`` and
``kerashvd.training.keras_compat.keras`` to tf_keras: the same test bodies, now with tf_keras
models, optimizers and callbacks. tests/parallel/test_keras_compat.py checks in that run that
tf_keras is what they got.
No Keras test runs only at 1 rank, so 2 ranks cover what 1 would (a 1-rank rerun took 44 s
of a CI run).
"""

import pytest

from conftest import run_parallel_tests


@pytest.mark.mpi
@pytest.mark.parametrize("np", [2])
def test_keras_tests_with_tf_keras(np):
    pytest.importorskip("tf_keras")
    output = run_parallel_tests(np, env={"TF_USE_LEGACY_KERAS": "1"}, pytest_args=["-m", "keras"])
    assert "deselected" in output, output[-3000:]  # the collective-only files are left out
