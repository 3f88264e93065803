"""The loaded TensorFlow op library (see _loader)."""

from ._loader import load_tf_ops

OPS = load_tf_ops()
