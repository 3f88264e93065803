"""Backend: every rank on this machine, started by hydra's ``mpiexec`` with its fork launcher.

Chosen when no host other than this machine is named (no ``-H``/``--hostfile``, or only
``localhost`` and this machine's names there) and no scheduler's allocation takes the ranks.
``-launcher fork -rmk user`` keep hydra from asking a resource manager for hosts: inside a SLURM
or PBS allocation it would otherwise start its proxy with ``srun`` (which waits for ever inside
an ``srun`` step).
"""

import contextlib

from ..ssh import remote_hosts
from .hydra import HydraBackend, LocalLaunch


class LocalHydra(HydraBackend):
    """Ranks forked on this machine by hydra (see the module docstring).

    Example:

    >>> from kerashvd.launcher.backends.base import Request
    >>> LocalHydra.detect(Request(np=2))
    True
    """

    @classmethod
    def detect(cls, request):
        return request.discovery_script is None and not remote_hosts(request.hosts)

    def prepare(self, hosts, log=None):
        return contextlib.nullcontext(LocalLaunch(self.program))
