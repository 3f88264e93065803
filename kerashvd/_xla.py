"""Refusing XLA with a clear message (kerashvd's ops have no XLA kernel)."""

import tensorflow as tf


def check_not_xla(what):
    """Raises a clear error when called while tracing an XLA-compiled function.

    kerashvd's collectives are TensorFlow custom ops without an XLA kernel; XLA would reject
    them later with a message that names neither the cause nor the fix.
    """
    get_context = getattr(getattr(tf, "__internal__", None), "get_enclosing_xla_context", None)
    if get_context is not None and get_context() is not None:
        raise ValueError(
            f"{what} cannot run inside an XLA-compiled function: kerashvd's collectives have "
            "no XLA kernel. Pass jit_compile=False to Model.compile() (Keras turns XLA on by "
            "default when a GPU is present, jit_compile='auto'), or drop jit_compile=True "
            "from the tf.function that runs the training step.")
