"""The Keras that kerashvd works with: the one TensorFlow's ``tf.keras`` routes to.

TensorFlow 2.16+ sends ``tf.keras`` to Keras 3 (the ``keras`` package), or to Keras 2 (the
``tf_keras`` package) when the environment variable ``TF_USE_LEGACY_KERAS`` is ``1``,
``true`` or ``True`` (TensorFlow's exact rule, mirrored here so both always agree). The two
are separate class hierarchies: tf_keras' ``Model.fit`` rejects Keras 3 callbacks, and the
other way round. kerashvd's callbacks and helpers subclass and call :data:`keras` from this
module, chosen once, at first import; set the variable before starting Python.

The helpers below hide the API differences the callbacks meet (optimizer variables, building,
metric state aggregation). Everything else is the same spelling in both.

Example:

>>> import kerashvd as hvd
>>> from kerashvd.training.keras_compat import keras, KERAS_NAME
>>> issubclass(hvd.callbacks.MetricAverageCallback, keras.callbacks.Callback)
True
"""

import tensorflow as tf

from .. import _private_api
from ._keras_choice import uses_tf_keras

__all__ = ["KERAS_NAME", "USES_TF_KERAS", "keras", "build_optimizer", "model_built",
           "optimizer_built", "optimizer_variables", "variable_aggregation"]

USES_TF_KERAS = uses_tf_keras()
KERAS_NAME = "Keras 2 (tf_keras)" if USES_TF_KERAS else "Keras 3"

if USES_TF_KERAS:
    try:
        import tf_keras as keras
    except ImportError as err:
        raise ImportError(
            "TF_USE_LEGACY_KERAS is set, which selects Keras 2, but the tf_keras package is not "
            "installed: pip install tf-keras (or kerashvd[keras2]), or unset TF_USE_LEGACY_KERAS "
            "to use Keras 3.") from err
else:
    import keras

    if not keras.__version__.startswith("3."):
        raise ImportError(f"kerashvd needs Keras 3 (or tf_keras with TF_USE_LEGACY_KERAS=1); "
                          f"keras {keras.__version__} is installed: pip install 'keras>=3'")


def optimizer_variables(optimizer):
    """The optimizer's state variables, in a fixed order, learning rate included.

    Keras 3 lists the learning rate among ``optimizer.variables``; tf_keras keeps it apart, and
    its legacy optimizers have a ``variables()`` method instead of a property.
    """
    variables = optimizer.variables
    variables = list(variables() if callable(variables) and not isinstance(variables, list)
                     else variables)
    learning_rate = getattr(optimizer, "learning_rate", None)
    if isinstance(learning_rate, tf.Variable) and all(v is not learning_rate for v in variables):
        variables.append(learning_rate)
    return variables


def model_built(model):
    """Whether the model's weights exist.

    A ``Sequential`` without ``keras.Input`` and a subclassed model create their weights at
    their first call, which ``fit`` makes inside its first (traced) training step; until
    then ``model.trainable_variables`` is empty (Keras 3) and ``model.variables`` raises
    (tf_keras). Both Keras versions keep the flag in ``built``.
    """
    return bool(getattr(model, "built", False))


def optimizer_built(optimizer):
    """Whether the optimizer has created its state (slots such as momentum buffers).

    Keras 3 has a public ``built``; tf_keras optimizers keep the flag in ``_built`` (read the
    same way by tf_keras itself); legacy tf_keras optimizers have neither (False).
    """
    built = getattr(optimizer, "built", None)
    if built is None:
        return _private_api.tf_keras_optimizer_built(optimizer)
    return bool(built)


def build_optimizer(optimizer, variables):
    """Creates the optimizer's state for ``variables`` unless it exists already.

    ``fit`` builds the optimizer at the first step (Keras 3 earlier only under a
    ``tf.distribute`` strategy), so a callback that needs the state first builds it here,
    for the variables of a built model (see :func:`model_built`). Legacy tf_keras optimizers
    have no ``build`` and are left alone (their state appears at their first step).
    """
    if not optimizer_built(optimizer) and hasattr(optimizer, "build"):
        optimizer.build(variables)


def variable_aggregation(variable):
    """How a (metric state) variable combines over replicas: 'sum', 'mean', ... or 'none'.

    Keras 3 stores a string; tf_keras a ``tf.VariableAggregation``.
    """
    aggregation = getattr(variable, "aggregation", "sum")
    if aggregation is not None and not isinstance(aggregation, str):
        aggregation = aggregation.name.lower()  # e.g. VariableAggregation.ONLY_FIRST_REPLICA
    return aggregation or "none"

