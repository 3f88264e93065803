"""Finds the ``mpiexec`` (MPICH hydra) that starts kerashvd's processes."""

import importlib.metadata
import os
import shutil

from .errors import LaunchError


def _from_mpich_wheel():
    try:
        dist = importlib.metadata.distribution("mpich")
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or []:
        if str(entry).replace(os.sep, "/").endswith("bin/mpiexec"):
            path = os.path.realpath(dist.locate_file(entry))
            if os.access(path, os.X_OK):
                return path
    return None


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
