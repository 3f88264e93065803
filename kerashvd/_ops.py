"""The loaded TensorFlow op library (see _loader)."""

from ._loader import load_tf_ops

OPS = load_tf_ops()

# The ops' gradients are registered as soon as the ops exist.
from . import gradients as _gradients  # noqa: E402,F401
