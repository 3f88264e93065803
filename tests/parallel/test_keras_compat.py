"""kerashvd.training.keras_compat: kerashvd uses the Keras that tf.keras routes to, in every layer.

The ``keras``-marked tests of tests/parallel/ run with Keras 3 and again with
``TF_USE_LEGACY_KERAS=1`` (tests/multiprocess/test_keras2.py); this file checks that each run really
uses the Keras it claims to.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training import keras_compat
from kerashvd.training.keras_compat import USES_TF_KERAS, keras
from model_styles import STYLES, sequential

pytestmark = pytest.mark.keras


def test_selection_follows_tensorflow(hvd):
    assert USES_TF_KERAS == (os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True"))
    assert keras.__name__ == ("tf_keras" if USES_TF_KERAS else "keras")
    assert keras_compat.KERAS_NAME == ("Keras 2 (tf_keras)" if USES_TF_KERAS else "Keras 3")
    # tf.keras is TensorFlow's own choice: the same classes.
    assert tf.keras.Model is keras.Model and tf.keras.callbacks.Callback is keras.callbacks.Callback


def test_every_layer_uses_the_selected_keras(hvd):
    for name in ["BroadcastGlobalVariablesCallback", "DistributedValidationCallback",
                 "JoinCallback", "LearningRateScheduleCallback", "LearningRateWarmupCallback",
                 "MetricAverageCallback", "ModelCheckpoint"]:
        assert issubclass(getattr(hvd.callbacks, name), keras.callbacks.Callback), name
    assert issubclass(hvd.DistributedOptimizer, keras.optimizers.Optimizer)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    assert isinstance(opt, hvd.DistributedOptimizer)
    assert type(opt).__module__ == ("kerashvd.training.optimizer.keras2" if USES_TF_KERAS
                                    else "kerashvd.training.optimizer.keras3")


def test_optimizer_helpers(hvd):
    optimizer = keras.optimizers.SGD(0.25, momentum=0.5)
    w = tf.Variable(np.ones(3, np.float32))
    assert not keras_compat.optimizer_built(optimizer)
    keras_compat.build_optimizer(optimizer, [w])
    assert keras_compat.optimizer_built(optimizer)
    keras_compat.build_optimizer(optimizer, [w])  # a second call changes nothing
    variables = keras_compat.optimizer_variables(optimizer)
    # The learning rate is listed once (Keras 3 lists it; tf_keras keeps it apart).
    assert sum(v is optimizer.learning_rate for v in variables) == 1
    assert any(v is optimizer.iterations for v in variables)
    assert len(variables) == len({id(v) for v in variables})


@pytest.mark.parametrize("style", STYLES)
def test_model_built_follows_the_first_call(hvd, style):
    model = sequential(style, (3,), [keras.layers.Dense(2)])
    assert keras_compat.model_built(model) == (style == "input")
    model(np.ones((1, 3), np.float32))
    assert keras_compat.model_built(model) and len(model.trainable_variables) == 2


def test_metric_state_aggregation_names(hvd):
    names = [keras_compat.variable_aggregation(v) for v in keras.metrics.AUC().variables]
    assert names and set(names) == {"sum"}
    assert keras_compat.variable_aggregation(
        tf.Variable(0.0, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)) == "only_first_replica"


def test_a_model_of_the_other_keras_is_refused_by_name(hvd):
    """fit of the other Keras' model with kerashvd callbacks: our TypeError, not theirs."""
    if hvd.size() > 1:
        pytest.skip("a local check: once is enough (and spares each rank the other Keras' import)")
    if USES_TF_KERAS:
        import keras as other
    else:
        other = pytest.importorskip("tf_keras")
    model = other.Sequential([other.Input((2,)), other.layers.Dense(1)])
    model.compile(optimizer=other.optimizers.SGD(0.1), loss="mse")
    x = np.ones((4, 2), np.float32)
    # Refused when fit hands the model to the callback, before any collective runs.
    with pytest.raises(TypeError, match=r"MetricAverageCallback is a .* callback .*"
                                        r"TF_USE_LEGACY_KERAS=1"):
        model.fit(x, x[:, :1], verbose=0, callbacks=[hvd.callbacks.MetricAverageCallback()])
    # The optimizer is the one exception: each DistributedOptimizer class hands the other
    # Keras' optimizers to the other class.
    opt = hvd.DistributedOptimizer(other.optimizers.SGD(0.1))
    assert isinstance(opt, other.optimizers.Optimizer)
    assert not isinstance(opt, hvd.DistributedOptimizer)
