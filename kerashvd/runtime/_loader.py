"""Loads kerashvd's native libraries in the right order, with errors that say how to fix them.

1. libmpi.so.12 from the `mpich` wheel is loaded first with RTLD_GLOBAL, so the engine and
   mpi4py (whichever comes first) share one MPI library in the process.
2. The TensorFlow version is checked against the one the ops were compiled for, before the
   op library is loaded: a mismatch is an ImportError naming both versions and the rebuild
   command, never a bare "undefined symbol".
"""

import ctypes
import importlib.metadata
import os

# What the build compiled (CMake generates it beside the compiled modules, so a source checkout
# has none). The runtime's modules read it from here.
from .. import _build_info as build_record
from ._mpich import mpich_file

_REBUILD_HINT = (
    "Rebuild kerashvd against the installed TensorFlow: "
    "pip install --no-build-isolation --no-cache-dir --force-reinstall --no-deps kerashvd "
    "(or the path of your kerashvd checkout)."
)


def preload_mpi():
    """Loads the MPI library kerashvd was built against into the global symbol namespace."""
    path = mpich_file("libmpi.so.12")
    if path is None:
        return  # built against another MPI (KERASHVD_MPI_HOME); the loader's path finds it
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def installed_tf_version():
    """The installed TensorFlow's version, read from package metadata (no import)."""
    for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-intel"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_tf_version(installed=None):
    """Raises ImportError when the installed TensorFlow is not the one the ops were built for."""
    installed = installed or installed_tf_version()
    if installed is not None and installed != build_record.TF_VERSION:
        raise ImportError(
            f"kerashvd was compiled against TensorFlow {build_record.TF_VERSION}, but TensorFlow "
            f"{installed} is installed; its C++ ops cannot load into a different version. "
            + _REBUILD_HINT
        )


def load_tf_ops():
    """Returns the module of kerashvd's TensorFlow ops after checking the TF version."""
    import tensorflow as tf  # lazy: this module is imported before TensorFlow is needed

    check_tf_version(tf.__version__)
    # Beside the build record, which is also where an editable install keeps the compiled files.
    path = os.path.join(os.path.dirname(build_record.__file__), "libkerashvd_tf_ops.so")
    try:
        return tf.load_op_library(path)
    except tf.errors.NotFoundError as err:
        raise ImportError(f"Could not load kerashvd's TensorFlow ops ({err}). " + _REBUILD_HINT) from err
