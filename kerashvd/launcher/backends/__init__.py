"""Launcher backends: the ways ``kerashvdrun`` and ``kerashvd.run`` start a job's ranks, one
module each, picked in one place (:func:`select`).

- ``srun``: inside a SLURM allocation, every rank a SLURM task (``srun --mpi=pmi2``);
- ``hydra_ssh``: hydra's ``mpiexec`` with ranks on other hosts, started over ssh;
- ``hydra_local``: hydra's ``mpiexec`` forking every rank on this machine.

Each is a :class:`~kerashvd.launcher.backends.base.Backend`; ``base.py`` says what one
implements and in which order the launcher calls it, and the contributor guide
(``docs/contributing.md``, "Adding a launcher backend") how to add one.
"""

from .base import Backend, Launch, Request, Supervision
from .hydra_local import LocalHydra
from .hydra_ssh import SshHydra
from .srun import Srun

# Asked in this order; the first whose detect() says yes starts the ranks. A scheduler's
# backend comes first (inside its allocation it wins unless hosts are named), this machine
# last (it takes whatever names no other host).
BACKENDS = (Srun, SshHydra, LocalHydra)


def select(request, backends=BACKENDS):
    """The backend that starts the ranks of ``request``.

    Args:
        request: a :class:`~kerashvd.launcher.backends.base.Request`.
        backends: the backend classes to ask, in order.

    Returns:
        An instance of the first class in ``backends`` whose ``detect(request)`` is true.

    Raises:
        LookupError: none of them starts such a job (cannot happen with :data:`BACKENDS`,
            whose last one takes every request without other hosts).

    Example:

    >>> select(Request(np=2, environ={})).name
    'mpiexec'
    """
    for backend in backends:
        if backend.detect(request):
            return backend(request)
    raise LookupError(f"no launcher backend of {[b.__name__ for b in backends]} starts this "
                      "job")


__all__ = ["BACKENDS", "Backend", "Launch", "LocalHydra", "Request", "Srun", "SshHydra",
           "Supervision", "select"]
