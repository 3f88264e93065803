"""TensorFlow settings kerashvd prefers, as environment defaults (standard library only).

- ``TF_CPU_ALLOCATOR_USE_BFC=true``: TensorFlow's pooling CPU allocator. Without it every large
  collective output is a fresh mmap that page-faults on first touch, which costs ~30% of a
  64 MiB allreduce. TensorFlow reads it when it creates its CPU allocator, as it starts (its
  eager context, at the first op).
- ``TF_CPP_MIN_LOG_LEVEL=1``: TensorFlow's C++ INFO lines (CPU features, devices created) left
  out. TensorFlow reads it at import.

TensorFlow reads each once, so a default set later changes nothing. Where they are applied:

- ranks started by ``kerashvdrun`` and ``kerashvd.run``: their supervisor (``launcher/_supervisor.py``, which loads this file by path)
  starts each rank's command with these defaults in its environment, so they hold whatever
  the script imports first;
- any other process: :func:`apply_unread`, at ``kerashvd.init()``, sets those TensorFlow has
  not read yet: both before ``import tensorflow``; the allocator's after it, until TensorFlow
  has started (``import tensorflow as tf; import kerashvd as hvd; hvd.init()``, Horovod's
  order, still gets the pooling allocator, but TensorFlow's INFO lines stay).

A variable that is set already, to anything, is kept: ``TF_CPU_ALLOCATOR_USE_BFC=false`` keeps
TensorFlow's default allocator, ``TF_CPP_MIN_LOG_LEVEL=0`` shows the INFO lines.
"""

import os

DEFAULTS = {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "1"}
# When TensorFlow reads each: at "import", or when it "start"s (creates its eager context).
_READ_AT = {"TF_CPU_ALLOCATOR_USE_BFC": "start", "TF_CPP_MIN_LOG_LEVEL": "import"}


def with_defaults(environ):
    """Returns a copy of ``environ`` with :data:`DEFAULTS` added where unset.

    Example:

    >>> with_defaults({"TF_CPP_MIN_LOG_LEVEL": "0"})["TF_CPP_MIN_LOG_LEVEL"]
    '0'
    """
    return {**DEFAULTS, **environ}


def apply_unread(tensorflow_imported, tensorflow_started):
    """Sets in ``os.environ`` each unset default that TensorFlow has not read yet.

    Args:
        tensorflow_imported: whether ``tensorflow`` is imported.
        tensorflow_started: whether TensorFlow has created its eager context (run an op).

    Returns:
        The names that were set.

    Example:

    >>> apply_unread(tensorflow_imported=True, tensorflow_started=True)
    []
    """
    unread = [name for name, when in _READ_AT.items()
              if not tensorflow_imported or (when == "start" and not tensorflow_started)]
    added = [name for name in unread if name not in os.environ]
    for name in added:
        os.environ[name] = DEFAULTS[name]
    return added
