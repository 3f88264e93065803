"""The loaded TensorFlow op library with the ops' gradients registered (see _op_library)."""

from . import gradients as _gradients  # noqa: F401  (registers the gradients)
from ..runtime._op_library import OPS

__all__ = ["OPS"]
