"""kerashvd's TensorFlow op library, loaded once (see :func:`kerashvd.runtime._loader.load_tf_ops`).

Imported by the modules that build ops. Use :mod:`kerashvd.collectives._ops` instead where the ops'
gradients must be registered too (it is this library plus ``gradients``).
"""

import tensorflow as tf  # noqa: F401  (the library loads into this TensorFlow)

from . import tf_threads
from ._engine import core
from ._loader import load_tf_ops

if core.is_initialized():
    # Before TensorFlow creates its thread pools, which running an op does (see tf_threads).
    tf_threads.apply(core.local_size())

OPS = load_tf_ops()
