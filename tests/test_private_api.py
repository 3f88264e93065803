"""Every private Keras/TensorFlow internal kerashvd relies on, one test each.

Keras and TensorFlow change their internals between releases without notice. Where kerashvd
has no public way to do its job it uses an internal; each test here fails with a message that
names the internal and the kerashvd module that needs it, so a release that moves one is
found here (and by tests/test_release_matrix.py on the oldest release), never by a silent
change of behaviour. Keep this list in step with the hooks (README, "How it works").
"""

import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.keras
KERAS_3_ONLY = pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True"),
                                  reason="a Keras 3 internal (tf_keras has its own path)")


def _hook(condition, internal, user, why):
    assert condition, (f"private API changed: {internal} is gone or different in this "
                       f"Keras/TensorFlow; {user} needs it to {why}")


@KERAS_3_ONLY
def test_trainer_resolve_auto_jit_compile():
    from keras.src.trainers.trainer import Trainer

    import kerashvd.optimizer  # noqa: F401  (installs the wrapper)

    resolve = getattr(Trainer, "_resolve_auto_jit_compile", None)
    _hook(callable(resolve), "keras.src.trainers.trainer.Trainer._resolve_auto_jit_compile",
          "kerashvd/_xla.py", "make compile(jit_compile='auto') resolve to False")
    _hook(getattr(resolve, "kerashvd_wrapped", False),
          "Trainer._resolve_auto_jit_compile (not wrapped)", "kerashvd/_xla.py",
          "make compile(jit_compile='auto') resolve to False")


def test_tf_internal_get_enclosing_xla_context():
    import tensorflow as tf

    get = getattr(getattr(tf, "__internal__", None), "get_enclosing_xla_context", None)
    _hook(callable(get), "tf.__internal__.get_enclosing_xla_context",
          "kerashvd/_xla.py check_not_xla", "refuse collectives traced inside XLA")
    assert get() is None


def test_batch_normalization_moments_hook():
    from kerashvd.keras_compat import USES_TF_KERAS, keras

    hook = "_calculate_mean_and_var" if USES_TF_KERAS else "_moments"
    _hook(callable(getattr(keras.layers.BatchNormalization, hook, None)),
          f"BatchNormalization.{hook}", "kerashvd/sync_batch_norm.py",
          "compute the statistics over the global batch")
    if not USES_TF_KERAS:
        layer = keras.layers.BatchNormalization()
        layer.build((None, 3))
        _hook(hasattr(layer, "_reduction_axes"), "BatchNormalization._reduction_axes",
              "kerashvd/sync_batch_norm.py", "know which axes to reduce")


def test_model_test_step_function_and_metrics_result():
    from kerashvd.keras_compat import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.make_test_function()
    for name in ("get_metrics_result", "test_step", "test_function"):
        _hook(callable(getattr(model, name, None)), f"Model.{name}",
              "callbacks/distributed_validation.py",
              "reduce the validation metric states across ranks")


def test_eager_context_config():
    import tensorflow as tf  # noqa: F401
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context

    ctx = context.context()
    for name in ("_config", "_context_handle"):
        _hook(hasattr(ctx, name), f"tensorflow.python.eager.context.Context.{name}",
              "kerashvd/tf_threads.py", "turn TensorFlow's thread spinning off")
    _hook(hasattr(config_pb2.ConfigProto().experimental, "disable_thread_spinning"),
          "ConfigProto.experimental.disable_thread_spinning", "kerashvd/tf_threads.py",
          "turn TensorFlow's thread spinning off")


def test_loss_scale_optimizer_calls_apply_from_its_own_method():
    """loss_scale_order finds a wrapping LossScaleOptimizer among apply's callers' frames."""
    import numpy as np
    import tensorflow as tf

    import kerashvd as hvd
    from kerashvd.keras_compat import USES_TF_KERAS, keras

    hvd.init()
    if USES_TF_KERAS:
        pytest.skip("tf_keras' order check is a type check (kerashvd/optimizer/keras2.py)")
    wrapped = keras.optimizers.LossScaleOptimizer(
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)))
    variable = keras.Variable(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="LossScaleOptimizer wraps this DistributedOptimizer"):
        wrapped.apply([tf.ones(2)], [variable])


@KERAS_3_ONLY
def test_keras_saving_walks_dir():
    """kerashvd/optimizer/keras3.py hides inner_optimizer from dir() so Keras' saving stores
    the optimizer's state once (tests/parallel/test_saving.py checks the file's layout)."""
    from keras.src.saving import saving_lib

    _hook(callable(getattr(saving_lib, "_walk_saveable", None)),
          "keras.src.saving.saving_lib._walk_saveable", "kerashvd/optimizer/keras3.py __dir__",
          "keep a DistributedOptimizer checkpoint in the plain optimizer's layout")


@KERAS_3_ONLY
def test_keras_import_hook_registers_the_classes_in_a_fresh_process():
    """kerashvd/_keras_hook.py wraps the loaders of keras and tensorflow through sys.meta_path
    so that importing them registers kerashvd's serializables."""
    code = ("import kerashvd, keras, sys; "
            "from keras.saving import get_registered_object as g; "
            "print(g('kerashvd>DistributedOptimizer') is not None, "
            "g('kerashvd>SyncBatchNormalization') is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    _hook(out.returncode == 0 and out.stdout.split()[-2:] == ["True", "True"],
          "importlib loaders of keras/tensorflow (sys.meta_path)", "kerashvd/_keras_hook.py",
          f"register kerashvd's classes when Keras is imported ({out.stdout[-300:]}"
          f"{out.stderr[-1500:]})")
