"""kerashvd/training/optimizer/select.py picks the DistributedOptimizer of the optimizer's Keras.

``hvd.DistributedOptimizer`` is the class of the Keras ``tf.keras`` uses; given an optimizer
of the other Keras it returns the other class. The two implementations do not import each
other; optimizer/chain.py is the one walk down ``inner_optimizer``.
"""

import ast
import os

import pytest

import kerashvd as hvd
from kerashvd.training.keras_compat import USES_TF_KERAS
from kerashvd.training.optimizer import chain, select

pytestmark = pytest.mark.keras


def test_each_keras_gets_its_own_class():
    keras = pytest.importorskip("keras")
    tf_keras = pytest.importorskip("tf_keras")
    from kerashvd.training.optimizer import keras2, keras3

    three = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    two = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1))
    assert type(three) is keras3.DistributedOptimizer
    assert type(two) is keras2.DistributedOptimizer
    assert isinstance(two if USES_TF_KERAS else three, hvd.DistributedOptimizer)
    assert select.keras_of(three) == "keras" and select.keras_of(two) == "tf_keras"
    scaled = hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()))
    assert type(scaled) is keras3.DistributedLossScaleOptimizer


def test_neither_keras_is_the_called_class_type_error():
    with pytest.raises(TypeError, match="received optimizer='sgd'"):
        hvd.DistributedOptimizer("sgd")


def test_implementations_do_not_import_each_other():
    folder = os.path.dirname(select.__file__)
    for name, other in (("keras3", "keras2"), ("keras2", "keras3")):
        tree = ast.parse(open(os.path.join(folder, name + ".py")).read())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     for alias in node.names}
        assert other not in imported, (name, imported)


def test_optimizer_chain_walks_wrappers_once():
    keras = pytest.importorskip("keras")

    inner = keras.optimizers.SGD(0.1)
    wrapped = keras.optimizers.LossScaleOptimizer(hvd.DistributedOptimizer(inner))
    links = list(chain.optimizer_chain(wrapped))
    assert links[0] is wrapped and links[-1] is inner and len(links) == 3
    assert chain.uses_distributed_optimizer(wrapped)
    assert not chain.uses_distributed_optimizer(inner)
    assert list(chain.optimizer_chain(None)) == []
