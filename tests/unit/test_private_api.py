"""Every private Keras/TensorFlow internal kerashvd relies on, one test each.

kerashvd reaches them only through ``kerashvd/_private_api.py``, one function per internal;
each test here calls that function (or checks what it needs) and fails with a message that
names the internal and the kerashvd module that needs it, so a release that moves one is
found here (and by tests/multiprocess/test_release_matrix.py on the oldest release), never by a silent
change of behaviour. Keep this list in step with _private_api's functions (docs/how-it-works.md).
"""

import os
import types

import pytest

from kerashvd import _private_api

pytestmark = pytest.mark.keras
KERAS_3_ONLY = pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True"),
                                  reason="a Keras 3 internal (tf_keras has its own path)")


def _hook(condition, internal, user, why):
    assert condition, (f"private API changed: {internal} is gone or different in this "
                       f"Keras/TensorFlow; {user} needs it to {why}")


def _call(function, *args):
    """Calls a _private_api function; its PrivateApiError names the internal."""
    try:
        return function(*args)
    except _private_api.PrivateApiError as err:
        pytest.fail(str(err))


@KERAS_3_ONLY
def test_wrap_resolve_auto_jit_compile():
    import kerashvd.training.optimizer.keras3  # noqa: F401  (wraps at import)

    _hook(_call(_private_api.resolve_auto_jit_compile_wrapped),
          "keras.src.trainers.trainer.Trainer._resolve_auto_jit_compile (not wrapped)",
          "kerashvd/training/_xla.py", "make compile(jit_compile='auto') resolve to False")


def test_inside_xla_function():
    import tensorflow as tf

    assert _call(_private_api.inside_xla_function) is False
    seen = []

    @tf.function(jit_compile=True)
    def compiled(x):
        seen.append(_private_api.inside_xla_function())
        return x + 1

    compiled(tf.constant(1.0))
    _hook(seen == [True], "tf.__internal__.get_enclosing_xla_context",
          "kerashvd/collectives/_xla_guard.py check_not_xla",
          "refuse collectives traced inside XLA")


def test_register_async_collectives():
    """kerashvd's collectives are stateful (never constant-folded nor pruned) and registered
    as asynchronous: tf.function puts no control edge between two of them."""
    import tensorflow as tf
    from kerashvd.runtime._op_library import COLLECTIVE_OPS, OPS

    _hook(set(COLLECTIVE_OPS) <= _call(_private_api.async_collectives),
          "tensorflow.python.framework.auto_control_deps.ASYNC_STATEFUL_OPS",
          "kerashvd/runtime/_op_library.py", "let tf.function run collectives concurrently")

    @tf.function
    def two(x):
        a = OPS.kerashvd_allreduce(x, reduce_op=1, tensor_name="a")
        b = OPS.kerashvd_allgather(x, tensor_name="b")
        return a, b

    graph = two.get_concrete_function(tf.TensorSpec([2], tf.float32)).graph
    ops = [op for op in graph.get_operations() if op.type.startswith("Kerashvd")]
    assert [op.type for op in ops] == ["KerashvdAllreduce", "KerashvdAllgather"]
    assert all(op.op_def.is_stateful for op in ops)
    _hook(not ops[1].control_inputs, "auto_control_deps.ASYNC_STATEFUL_OPS",
          "kerashvd/runtime/_op_library.py", "keep tf.function from ordering collectives")


def test_traced_function():
    import tensorflow as tf

    assert _call(_private_api.traced_function) is None  # eagerly
    seen = []

    def record():
        graph, name = _call(_private_api.traced_function)
        seen.append((name, graph))
        return tf.constant(0.0)

    @tf.function
    def outer(x):
        record()
        tf.cond(x > 0, record, record)
        for _ in tf.range(2):
            record()
        return inner(x)

    @tf.function
    def inner(x):
        record()
        return x

    outer(tf.constant(1.0))
    _hook([name for name, _ in seen] == ["outer"] * 4 + ["inner"],
          "FuncGraph.name / .outer_graph and the control flow graphs' class names",
          "kerashvd/collectives/_names.py", "name unnamed collectives by their tf.function")
    assert len({id(graph) for _, graph in seen[:4]}) == 1 and seen[4][1] is not seen[0][1]
    with tf.Graph().as_default():
        assert _call(_private_api.traced_function) is None  # a TF1 graph


def test_call_time_value():
    """The value is computed at each call, in the calling thread, also for a nested function
    and inside a tf.cond branch; one key in one graph is one tensor."""
    import threading

    import tensorflow as tf

    def thread_name():
        return tf.constant(threading.current_thread().name)

    def value():
        graph, _ = _call(_private_api.traced_function)
        return _call(_private_api.call_time_value, graph, thread_name, "test.thread")

    @tf.function
    def inner(x):
        return value()

    @tf.function
    def outer(x):
        same = tf.cond(x > 0, value, value)
        return tf.strings.join([value(), "/", same, "/", inner(x)])

    got = {}
    for name in ("test.a", "test.b"):
        thread = threading.Thread(target=lambda: got.update(
            {threading.current_thread().name: outer(tf.constant(1.0)).numpy().decode()}),
            name=name)
        thread.start()
        thread.join()
    _hook(got == {n: f"{n}/{n}/{n}" for n in ("test.a", "test.b")},
          "FuncGraph.capture_call_time_value (value per call, lifted from nested functions)",
          "kerashvd/collectives/_names.py", "tell a traced function's collectives which "
          "thread called it")
    assert outer.experimental_get_tracing_count() == 1
    assert outer(tf.constant(-1.0)).numpy().decode() == "MainThread/MainThread/MainThread"


def test_batch_norm_statistics_method_and_reduction_axes():
    from kerashvd.training.keras_compat import USES_TF_KERAS, keras

    name = _call(_private_api.batch_norm_statistics_method, keras, USES_TF_KERAS)
    assert name == ("_calculate_mean_and_var" if USES_TF_KERAS else "_moments")
    if not USES_TF_KERAS:
        layer = keras.layers.BatchNormalization()
        layer.build((None, 3))
        assert list(_call(_private_api.batch_norm_reduction_axes, layer)) == [0]


def test_patch_model_methods():
    from kerashvd.training.keras_compat import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.make_test_function()
    for name in _private_api.MODEL_EVALUATION_METHODS:
        _hook(callable(getattr(model, name, None)), f"Model.{name}",
              "callbacks/distributed_validation.py",
              "reduce the validation metric states across ranks")
    original = model.test_function
    restore = _call(_private_api.patch_model_methods, model, {"test_function": len})
    assert model.test_function is len
    restore()
    assert model.test_function is original


def test_eager_context_config():
    _call(_private_api.eager_context_started)
    config = _call(_private_api.eager_context_config)
    _hook(hasattr(config.experimental, "disable_thread_spinning"),
          "ConfigProto.experimental.disable_thread_spinning", "kerashvd/runtime/tf_threads.py",
          "turn TensorFlow's thread spinning off")


def test_wrapped_by_loss_scaling_finds_the_outer_optimizer_in_the_frames():
    """_private_api.wrapped_by_loss_scaling finds a wrapping LossScaleOptimizer among
    apply's callers' frames."""
    import numpy as np
    import tensorflow as tf

    import kerashvd as hvd
    from kerashvd.training.keras_compat import USES_TF_KERAS, keras

    hvd.init()
    if USES_TF_KERAS:
        pytest.skip("tf_keras' order check is a type check (kerashvd/training/optimizer/keras2.py)")
    wrapped = keras.optimizers.LossScaleOptimizer(
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)))
    variable = keras.Variable(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="LossScaleOptimizer wraps this DistributedOptimizer"):
        wrapped.apply([tf.ones(2)], [variable])


@KERAS_3_ONLY
def test_keras_saving_walks_dir():
    """kerashvd/training/optimizer/keras3.py hides inner_optimizer from dir() so Keras' saving
    stores the optimizer's state once (tests/parallel/test_saving.py checks the file's layout)."""
    _hook(_private_api.keras_saving_walk_exists(), "keras.src.saving.saving_lib._walk_saveable",
          "kerashvd/training/optimizer/keras3.py __dir__",
          "keep a DistributedOptimizer checkpoint in the plain optimizer's layout")


def test_tf_keras_optimizer_built():
    tf_keras = pytest.importorskip("tf_keras")

    optimizer = tf_keras.optimizers.SGD(0.1)
    assert _private_api.tf_keras_optimizer_built(optimizer) is False
    optimizer.build([tf_keras.backend.variable(1.0)])
    _hook(_private_api.tf_keras_optimizer_built(optimizer), "tf_keras Optimizer._built",
          "kerashvd/training/keras_compat.py optimizer_built",
          "tell whether a tf_keras optimizer is built")


def test_a_missing_internal_is_an_error_naming_it():
    class BatchNormalization:
        pass

    keras = types.SimpleNamespace(__name__="fake_keras", __version__="0",
                                  layers=types.SimpleNamespace(BatchNormalization=BatchNormalization))
    with pytest.raises(_private_api.PrivateApiError, match=r"BatchNormalization\._moments"):
        _private_api.batch_norm_statistics_method(keras, False)
