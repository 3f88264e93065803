"""Collectives refuse to be traced into an XLA-compiled function, with an error naming the fix.

How ``jit_compile`` is kept off for Keras models in the first place is the Keras layer's part
(:mod:`kerashvd.training._xla`); this check is where every collective ends up if it was not.
"""

from .. import _private_api


def check_not_xla(what):
    """Raises a clear error when called while tracing an XLA-compiled function.

    kerashvd's collectives are TensorFlow custom ops without an XLA kernel; XLA would reject
    them later with a message that names neither the cause nor the fix.
    """
    if _private_api.inside_xla_function():
        raise ValueError(
            f"{what} cannot run inside an XLA-compiled function: kerashvd's collectives have "
            "no XLA kernel. Pass jit_compile=False (or leave the default 'auto') to "
            "Model.compile() (a kerashvd callback in fit, e.g. "
            "hvd.callbacks.BroadcastGlobalVariablesCallback(0), also turns it off for you), "
            "or drop jit_compile=True from the tf.function that runs the training step.")
