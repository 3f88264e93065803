"""Actions that run at the start of a DistributedOptimizer's ``apply``, for both Keras versions.

Why: a model without ``keras.Input`` (or a subclassed model) creates its weights inside the
first traced training step of ``fit``, so there is no moment before that step where they can
be broadcast. ``apply`` is traced after the forward pass, when the weights exist, and its
trace runs before the step executes: values assigned then (eagerly, under ``tf.init_scope``)
are the values the step reads. With Keras 3 the weights are created uninitialized in a first
trace that TensorFlow then discards: it initializes them (lifting the initializers out) and
traces the step again. So an action waits for the first ``apply`` that sees its variables
initialized -- the second trace with Keras 3, the first with tf_keras (whose layers create
weights under ``tf.init_scope``). ``BroadcastGlobalVariablesCallback`` broadcasts there, and
the first update of a lazily built model is the one of a model built with ``keras.Input``.
"""

import tensorflow as tf


def variables_initialized(variables):
    """Whether every variable holds a value (eagerly; a Keras 3 variable traced in a
    ``tf.function`` before TensorFlow has run its initializer holds none)."""
    with tf.init_scope():
        for variable in variables:
            check = getattr(variable, "is_initialized", None)  # a tf.Variable (tf_keras)
            if check is None:  # Keras 3 keeps its tf.Variable in `value`
                check = getattr(getattr(variable, "value", None), "is_initialized", None)
            if check is not None and not bool(check()):
                return False
    return True


class ApplyHooks:
    """Mixin of the DistributedOptimizers: :meth:`call_before_apply` and the hook that runs it.

    The pending actions live in the instance's ``__dict__``, outside Keras' variable tracking
    and tf_keras' checkpoint dependencies.
    """

    def call_before_apply(self, action):
        """Calls ``action()`` at the start of each ``apply`` until it returns True.

        ``apply`` (``apply_gradients``) calls it eagerly under ``tf.init_scope``, after the
        optimizer is built and before any collective: inside a traced step that is before
        the step executes. An action that returns False (e.g. variables not initialized
        yet) is called again at the next ``apply`` or trace.

        Args:
            action: a function without arguments returning a bool.
        """
        pending = self.__dict__.get("_before_apply", ())
        object.__setattr__(self, "_before_apply", pending + (action,))

    def _run_before_apply(self):
        """Runs the pending actions, keeping those that are not done."""
        pending = self.__dict__.get("_before_apply", ())
        if not pending:
            return
        with tf.init_scope():
            left = tuple(action for action in pending if not action())
        object.__setattr__(self, "_before_apply", left)
