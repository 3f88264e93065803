"""The loaded TensorFlow op library with the ops' gradients registered (see _op_library), and
the ``thread`` input of the collectives filled in: the calling thread, for an unnamed
collective of a traced function (``_names``, "Threads")."""

import functools

from . import _names
from . import gradients as _gradients  # noqa: F401  (registers the gradients)
from ..runtime._op_library import OPS as _RAW
from ..runtime._op_library import THREAD_TAGGED

__all__ = ["OPS"]


def _tagged(op):
    @functools.wraps(op)
    def run(*args, **kwargs):
        if "thread" not in kwargs:
            kwargs["thread"] = _names.thread_input(kwargs["tensor_name"])
        return op(*args, **kwargs)
    return run


class _Tagged:
    """:data:`~kerashvd.runtime._op_library.OPS`, with :func:`_tagged` ops."""

    def __getattr__(self, name):
        value = getattr(_RAW, name)
        if name in THREAD_TAGGED:
            value = _tagged(value)
        setattr(self, name, value)  # looked up once
        return value


OPS = _Tagged()
