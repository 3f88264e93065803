"""Files of the installed ``mpich`` wheel (libmpi, mpiexec), found from its package record."""

import importlib.metadata
import os


def mpich_file(suffix):
    """Returns the real path of the mpich wheel's file whose path ends with `suffix`, or None."""
    try:
        dist = importlib.metadata.distribution("mpich")
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or []:
        if str(entry).replace(os.sep, "/").endswith(suffix):
            return os.path.realpath(dist.locate_file(entry))
    return None
