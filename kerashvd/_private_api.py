"""Every private Keras/TensorFlow internal kerashvd touches, each behind one small function.

Keras and TensorFlow change their internals between releases without notice, so kerashvd
reaches them only here: each function's docstring names the internal, the versions it was
checked on and the public alternative that was considered, and fails loudly (an error that
names the internal) where it is gone. ``tests/unit/test_private_api.py`` has one test per
function. Checked on TensorFlow 2.21, Keras 3.15 and tf_keras 2.21 unless said otherwise.

TensorFlow is imported by the functions that need it, never by this module (``tf_threads``
and ``_names`` run before TensorFlow is imported).
"""

import functools
import sys


class PrivateApiError(RuntimeError):
    """A Keras/TensorFlow internal that kerashvd relies on is gone or changed."""


def _missing(internal, user, why):
    return PrivateApiError(
        f"private API changed: {internal} is gone or different in this Keras/TensorFlow; "
        f"{user} needs it to {why}. Install a TensorFlow/Keras that kerashvd supports "
        "(docs/getting-started.md, 'Supported releases'), or report this to kerashvd.")


# -- XLA ---------------------------------------------------------------------------------

def wrap_resolve_auto_jit_compile(decide):
    """Makes Keras 3 resolve ``compile(jit_compile="auto")`` through ``decide(model, resolved)``.

    Internal: ``keras.src.trainers.trainer.Trainer._resolve_auto_jit_compile``, which
    ``compile()`` calls after setting ``model.optimizer``; wrapped once per process.
    Public alternative considered: ``Layer.supports_jit = False`` (Keras' own knob) works
    for layers only; nothing an optimizer can set is read by ``compile()``, and asking every
    user to pass ``jit_compile=False`` is the documented fallback.

    Args:
        decide: ``decide(model, resolved) -> bool``, the value ``compile()`` then uses.

    Raises:
        PrivateApiError: when the method is gone.
    """
    from keras.src.trainers.trainer import Trainer  # lazy: imports Keras

    resolve = getattr(Trainer, "_resolve_auto_jit_compile", None)
    if not callable(resolve):
        raise _missing("keras.src.trainers.trainer.Trainer._resolve_auto_jit_compile",
                       "kerashvd/training/_xla.py",
                       "make compile(jit_compile='auto') resolve to False")
    if getattr(resolve, "kerashvd_wrapped", False):
        return

    @functools.wraps(resolve)
    def resolve_for_kerashvd(self):
        return decide(self, resolve(self))

    resolve_for_kerashvd.kerashvd_wrapped = True
    Trainer._resolve_auto_jit_compile = resolve_for_kerashvd


def resolve_auto_jit_compile_wrapped():
    """Whether :func:`wrap_resolve_auto_jit_compile` has wrapped Keras' method."""
    from keras.src.trainers.trainer import Trainer  # lazy: imports Keras

    return getattr(getattr(Trainer, "_resolve_auto_jit_compile", None), "kerashvd_wrapped",
                   False)


def inside_xla_function():
    """Whether the caller is being traced inside an XLA-compiled function.

    Internal: ``tf.__internal__.get_enclosing_xla_context``. Public alternative considered:
    ``tf.config.optimizer.get_jit()`` reports global auto-clustering only, not a
    ``tf.function(jit_compile=True)`` being traced.

    Raises:
        PrivateApiError: when the function is gone.
    """
    import tensorflow as tf  # lazy: imports TensorFlow

    get_context = getattr(getattr(tf, "__internal__", None), "get_enclosing_xla_context", None)
    if not callable(get_context):
        raise _missing("tf.__internal__.get_enclosing_xla_context",
                       "kerashvd/collectives/_xla_guard.py",
                       "refuse collectives traced inside XLA with an error that names the fix")
    return get_context() is not None


# -- names of unnamed collectives --------------------------------------------------------

# tf.cond / tf.switch_case branches and tf.while_loop's condition and body are traced into
# graphs of their own inside the function's graph; their names carry a process-wide number.
_CONTROL_FLOW_GRAPHS = ("CondBranchFuncGraph", "WhileCondFuncGraph", "WhileBodyFuncGraph")


def traced_function():
    """The ``tf.function`` being traced here: ``(graph, name)``, or None eagerly and in a TF1
    graph. ``graph`` is the function's graph (one per trace; branches and loop bodies of
    ``tf.cond`` and ``tf.while_loop`` are skipped up to it) and ``name`` the traced Python
    function's ``__name__``, the same on every rank.

    Internal: ``tensorflow.python.framework.func_graph.FuncGraph``: its ``name`` (the Python
    function's ``__name__``; the concrete function's name adds a process-wide number) and
    ``outer_graph`` attributes, and the class names of control flow's subclasses. Public
    alternative considered: ``tf.function``'s ``python_function`` is on the Function object,
    which code being traced cannot reach.

    Raises:
        PrivateApiError: when a function graph lacks ``name`` or ``outer_graph``.
    """
    import tensorflow as tf  # lazy: imports TensorFlow

    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    if not hasattr(graph, "outer_graph") and type(graph) is tf.Graph:
        return None  # a TF1 graph
    while type(graph).__name__ in _CONTROL_FLOW_GRAPHS:
        graph = getattr(graph, "outer_graph", None)
    name = getattr(graph, "name", None)
    if not isinstance(name, str) or not hasattr(graph, "outer_graph"):
        raise _missing("tensorflow.python.framework.func_graph.FuncGraph.name / .outer_graph",
                       "kerashvd/collectives/_names.py",
                       "name unnamed collectives by the tf.function being traced")
    return graph, name


def call_time_value(graph, closure, key):
    """A scalar string tensor of ``graph`` (a function being traced) whose value ``closure()``
    computes at each call of the function, in the calling thread; ``""`` while the function
    is saved. Calls of one ``key`` in one graph share one tensor; a nested function's value is
    computed at each call of the outermost function.

    Internal: ``tensorflow.python.framework.func_graph.FuncGraph.capture_call_time_value``
    (what ``tf.distribute``'s parameter-server strategy uses for per-worker resources).
    Public alternative considered: an argument of the traced function, which kerashvd cannot
    add to the user's functions; ``tf.py_function`` runs on TensorFlow's executor threads,
    not the caller's.

    Args:
        graph: the function graph (:func:`traced_function`'s).
        closure: called with no argument; returns a scalar ``tf.string`` tensor.
        key: the capture's key in ``graph``.

    Raises:
        PrivateApiError: when the method is gone.
    """
    import tensorflow as tf  # lazy: imports TensorFlow

    capture = getattr(graph, "capture_call_time_value", None)
    if not callable(capture):
        raise _missing("tensorflow.python.framework.func_graph.FuncGraph.capture_call_time_value",
                       "kerashvd/collectives/_names.py",
                       "tell a traced function's collectives which thread called it")
    with tf.init_scope():
        empty = tf.constant("")  # eager: valid wherever the function is saved
    with graph.as_default():
        return capture(closure, tf.TensorSpec([], tf.string), key=key, default_value=empty)


# -- collectives in tf.function ----------------------------------------------------------

def register_async_collectives(op_types):
    """Lets ``tf.function`` start the stateful ops ``op_types`` in any order, as TensorFlow's
    own collectives (ops/tf/kernels.h says why kerashvd's are stateful).

    Internal: ``tensorflow.python.framework.auto_control_deps.ASYNC_STATEFUL_OPS``, the op
    types that automatic control dependencies neither order nor add to a function's control
    outputs (TensorFlow's ``CollectiveReduce``, ``NcclAllReduce``, ...). Public alternative
    considered: none; an op that is not stateful is constant-folded and pruned by TensorFlow.

    Raises:
        PrivateApiError: when the set is gone.
    """
    from tensorflow.python.framework import auto_control_deps  # lazy: imports TensorFlow

    known = getattr(auto_control_deps, "ASYNC_STATEFUL_OPS", None)
    if not isinstance(known, frozenset):
        raise _missing("tensorflow.python.framework.auto_control_deps.ASYNC_STATEFUL_OPS",
                       "kerashvd/runtime/_op_library.py",
                       "let tf.function run independent collectives at the same time")
    auto_control_deps.ASYNC_STATEFUL_OPS = known | frozenset(op_types)


def async_collectives():
    """The op types :func:`register_async_collectives` has registered so far (and TF's)."""
    from tensorflow.python.framework import auto_control_deps  # lazy: imports TensorFlow

    return getattr(auto_control_deps, "ASYNC_STATEFUL_OPS", frozenset())


# -- SyncBatchNormalization --------------------------------------------------------------

def batch_norm_statistics_method(keras, uses_tf_keras):
    """The name of the ``BatchNormalization`` method that computes the batch statistics.

    Internals: Keras 3 ``BatchNormalization._moments(inputs, mask)`` (reading
    ``self._reduction_axes``, see :func:`batch_norm_reduction_axes`); tf_keras
    ``BatchNormalization._calculate_mean_and_var(inputs, axes, keep_dims, mask)``.
    ``SyncBatchNormalization`` overrides it. Public alternative considered: a layer that
    holds its own weights and reimplements normalization (composition) would duplicate
    Keras' moving statistics, masking and serialization; ``synchronized=True`` reduces only
    under a ``tf.distribute`` strategy.

    Raises:
        PrivateApiError: when the method is gone.
    """
    name = "_calculate_mean_and_var" if uses_tf_keras else "_moments"
    if not callable(getattr(keras.layers.BatchNormalization, name, None)):
        raise _missing(f"BatchNormalization.{name} ({keras.__name__} {keras.__version__})",
                       "kerashvd/training/sync_batch_norm.py",
                       "compute the statistics over the global batch")
    return name


def batch_norm_reduction_axes(layer):
    """The axes a built Keras 3 ``BatchNormalization`` reduces over.

    Internal: ``BatchNormalization._reduction_axes`` (set in ``build``). Public alternative
    considered: recomputing them from ``layer.axis`` and the input rank, which repeats
    Keras' rule and drifts with it.

    Raises:
        PrivateApiError: when the attribute is gone.
    """
    axes = getattr(layer, "_reduction_axes", None)
    if axes is None:
        raise _missing("BatchNormalization._reduction_axes", "kerashvd/training/sync_batch_norm.py",
                       "know which axes to reduce")
    return axes


# -- DistributedValidationCallback -------------------------------------------------------

MODEL_EVALUATION_METHODS = ("get_metrics_result", "test_function", "test_step")


def patch_model_methods(model, wrappers):
    """Replaces methods of one model instance; returns the function that undoes it.

    Internals: ``Model.test_function`` (the attribute ``evaluate`` calls per batch; Keras 3
    takes it after ``on_test_begin``, tf_keras before), ``Model.test_step`` and
    ``Model.get_metrics_result`` (public and overridable, but replaced here on an instance
    from a callback, and relied on to be what ``evaluate`` calls after its loop). Public
    alternative considered: a model mixin overriding ``test_step``/``get_metrics_result``,
    which every user would have to put in their model class.

    Args:
        model: the model.
        wrappers: ``{attribute: function}``, attributes among
            :data:`MODEL_EVALUATION_METHODS`.

    Returns:
        ``restore()``: puts back each attribute that still holds its wrapper (one replaced
        meanwhile, e.g. by ``compile()``, is left alone).

    Raises:
        PrivateApiError: when the model lacks ``get_metrics_result``.
    """
    if not callable(getattr(model, "get_metrics_result", None)):
        raise _missing("Model.get_metrics_result", "callbacks/distributed_validation.py",
                       "reduce the validation metric states across ranks")
    unset = object()
    originals = {name: model.__dict__.get(name, unset) for name in wrappers}
    for name, wrapper in wrappers.items():
        setattr(model, name, wrapper)

    def restore():
        for name, wrapper in wrappers.items():
            if model.__dict__.get(name) is not wrapper:
                continue
            if originals[name] is unset:
                delattr(model, name)
            else:
                setattr(model, name, originals[name])

    return restore


# -- TensorFlow's thread pools -----------------------------------------------------------

def eager_context_started():
    """Whether TensorFlow's eager context (and its thread pools) exists already.

    Internal: ``tensorflow.python.eager.context.context()._context_handle``. Public
    alternative considered: ``tf.config.threading`` sets pool sizes, not spinning, and has
    no "already initialized" query other than the RuntimeError of its setters.

    Raises:
        PrivateApiError: when the attribute is gone.
    """
    from tensorflow.python.eager import context  # lazy: imports TensorFlow

    ctx = context.context()
    if not hasattr(ctx, "_context_handle"):
        raise _missing("tensorflow.python.eager.context.Context._context_handle",
                       "kerashvd/runtime/tf_threads.py", "turn TensorFlow's thread spinning off")
    return ctx._context_handle is not None


def eager_context_config():
    """The ``ConfigProto`` TensorFlow's eager context will be created with (a copy).

    Internal: ``tensorflow.python.eager.context.context()._config``. Public alternative
    considered: none sets ``ConfigProto.experimental.disable_thread_spinning``.

    Raises:
        PrivateApiError: when the attribute or the option is gone.
    """
    from tensorflow.core.protobuf import config_pb2  # lazy: imports TensorFlow
    from tensorflow.python.eager import context  # lazy: imports TensorFlow

    ctx = context.context()
    if not hasattr(ctx, "_config"):
        raise _missing("tensorflow.python.eager.context.Context._config",
                       "kerashvd/runtime/tf_threads.py", "turn TensorFlow's thread spinning off")
    config = config_pb2.ConfigProto()
    if not hasattr(config.experimental, "disable_thread_spinning"):
        raise _missing("ConfigProto.experimental.disable_thread_spinning",
                       "kerashvd/runtime/tf_threads.py", "turn TensorFlow's thread spinning off")
    if ctx._config is not None:
        config.CopyFrom(ctx._config)
    return config


def set_eager_context_config(config):
    """Sets the ``ConfigProto`` of the not yet created eager context (see
    :func:`eager_context_config`; same internal)."""
    from tensorflow.python.eager import context  # lazy: imports TensorFlow

    context.context()._config = config


# -- mixed precision order ---------------------------------------------------------------

def wrapped_by_loss_scaling(optimizer, loss_scale_class):
    """Whether a ``loss_scale_class`` instance up the call stack wraps ``optimizer``.

    Call it from the method that ``apply`` calls directly: the search starts at ``apply``'s
    caller and looks at most 40 frames up.

    Internal: the call chain of Keras 3's ``LossScaleOptimizer.apply`` (and tf_keras'
    ``apply_gradients``): the outer optimizer calls the wrapper's ``apply`` from one of its
    own methods, so a calling frame holds ``self`` whose ``inner_optimizer`` is the wrapper
    (CPython's ``sys._getframe``). Public alternative considered: checking
    ``model.optimizer`` at ``compile()``/``fit`` time, which needs the model and misses
    custom training loops.
    """
    frame = sys._getframe(3)  # 0: here, 1: the check, 2: apply, 3: apply's caller
    for _ in range(40):
        if frame is None:
            return False
        owner = frame.f_locals.get("self")
        if (owner is not optimizer and isinstance(owner, loss_scale_class)
                and getattr(owner, "inner_optimizer", None) is optimizer):
            return True
        frame = frame.f_back
    return False


# -- saving and tracking -----------------------------------------------------------------

def keras_saving_walk_exists():
    """Whether Keras 3's saving still walks ``dir()`` to find what to save.

    Internal: ``keras.src.saving.saving_lib._walk_saveable``; the DistributedOptimizers'
    ``__dir__`` hides ``inner_optimizer`` from it so the optimizer's state is saved once, in
    the plain optimizer's layout. Public alternative considered: none (Keras' saving has no
    per-object "skip this attribute" option).
    """
    from keras.src.saving import saving_lib  # lazy: imports Keras

    return callable(getattr(saving_lib, "_walk_saveable", None))


def tf_keras_optimizer_built(optimizer):
    """Whether a tf_keras optimizer has created its state.

    Internal: ``tf_keras.optimizers.Optimizer._built`` (tf_keras has no public ``built``;
    tf_keras reads the flag the same way). Public alternative considered: checking
    ``optimizer.variables`` for slots, which an optimizer without slots (SGD) never has.
    """
    return bool(getattr(optimizer, "_built", False))
