"""Finds the ``mpiexec`` (MPICH hydra) that starts kerashvd's processes."""

import os
import shutil

from ..runtime._mpich import mpich_file
from .errors import LaunchError


def _from_mpich_wheel():
    path = mpich_file("bin/mpiexec")
    return path if path and os.access(path, os.X_OK) else None


def find_mpiexec():
    """Returns the path of ``mpiexec``: the ``mpich`` wheel's, else the first on ``PATH``.

    kerashvd is built against the ``mpich`` wheel's MPI, so its hydra ``mpiexec`` is preferred
    to whatever else ``PATH`` holds.

    Returns:
        An absolute path.

    Raises:
        LaunchError: when neither the ``mpich`` package nor ``PATH`` provides ``mpiexec``.

    Example:

    >>> find_mpiexec().endswith("mpiexec")
    True
    """
    path = _from_mpich_wheel() or shutil.which("mpiexec")
    if path is None:
        raise LaunchError(
            "Could not find mpiexec: expected the `mpich` Python package (which ships "
            "bin/mpiexec) or an mpiexec on PATH; found neither. Install it with "
            "`pip install mpich`, or put an MPICH (hydra) mpiexec on PATH.")
    return path
