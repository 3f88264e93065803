"""Which Keras ``tf.keras`` uses, read without importing anything (see keras_compat)."""

import os

_TRUE = ("1", "true", "True")


def uses_tf_keras():
    """Whether ``tf.keras`` is Keras 2 (``tf_keras``): TensorFlow's own rule, read from
    ``TF_USE_LEGACY_KERAS`` without importing anything."""
    return os.environ.get("TF_USE_LEGACY_KERAS") in _TRUE


def keras_module_name():
    """``"tf_keras"`` or ``"keras"``: the package ``tf.keras`` uses."""
    return "tf_keras" if uses_tf_keras() else "keras"
