"""TensorFlow settings kerashvd prefers, as environment defaults (standard library only).

- ``TF_CPU_ALLOCATOR_USE_BFC=true``: TensorFlow's pooling CPU allocator. Without it every large
  collective output is a fresh mmap that page-faults on first touch, which costs ~30% of a
  64 MiB allreduce. TensorFlow reads it when it creates its CPU allocator (its first tensor).
- ``TF_CPP_MIN_LOG_LEVEL=1``: TensorFlow's C++ INFO lines (CPU features, devices created) left
  out. TensorFlow reads it once, at import.

Both are read by TensorFlow once, early, so a default set later changes nothing. Where they
are applied:

- ranks started by ``kerashvdrun`` and ``kerashvd.run``: their supervisor (``_supervisor.py``)
  starts each rank's command with these defaults in its environment, so they hold whatever
  the script imports first;
- any other process: :func:`apply_if_tensorflow_not_imported`, at ``kerashvd.init()``, sets
  them when TensorFlow is not imported yet (``import kerashvd as hvd; hvd.init()`` before
  ``import tensorflow``), and leaves the environment alone otherwise.

A variable that is set already, to anything, is kept: ``TF_CPU_ALLOCATOR_USE_BFC=false`` keeps
TensorFlow's default allocator, ``TF_CPP_MIN_LOG_LEVEL=0`` shows the INFO lines.
"""

import os
import sys

DEFAULTS = {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "1"}


def with_defaults(environ):
    """Returns a copy of ``environ`` with :data:`DEFAULTS` added where unset.

    Example:

    >>> with_defaults({"TF_CPP_MIN_LOG_LEVEL": "0"})["TF_CPP_MIN_LOG_LEVEL"]
    '0'
    """
    return {**DEFAULTS, **environ}


def apply_if_tensorflow_not_imported():
    """Sets :data:`DEFAULTS` in ``os.environ`` where unset, if TensorFlow is not imported.

    Returns:
        The names that were set (empty when TensorFlow was imported already).
    """
    if "tensorflow" in sys.modules:
        return []
    added = [name for name in DEFAULTS if name not in os.environ]
    for name in added:
        os.environ[name] = DEFAULTS[name]
    return added
