"""The compiled engine module, loaded after what it needs, and the check that it runs.

Loading ``_core`` is the first time kerashvd touches native code, so its prerequisites come
here, once, instead of at ``import kerashvd``:

1. the MPI library of the ``mpich`` wheel is loaded with RTLD_GLOBAL (``_loader.preload_mpi``),
   so the engine and mpi4py share one MPI in the process;
2. the installed TensorFlow's version is compared with the one the ops were built for
   (``_loader.check_tf_version``), so a mismatch is reported at ``init()``, before any op.

Every module that calls the engine imports ``core`` from here, never ``_core`` itself.
"""

import atexit

from . import _loader

_loader.preload_mpi()
_loader.check_tf_version()

from .. import _core as core  # noqa: E402  (after the MPI library is loaded)

atexit.register(core.shutdown)


class NotInitializedError(RuntimeError):
    """Raised when kerashvd is used before :func:`init` (or after :func:`shutdown`)."""


def require_init():
    """Raises :class:`NotInitializedError` unless the engine runs."""
    if not core.is_initialized():
        raise NotInitializedError(
            "kerashvd has not been initialized: call kerashvd.init() first "
            "(after kerashvd.shutdown(), call init() again).")
