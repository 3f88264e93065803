"""Starting kerashvd jobs: the ``kerashvdrun`` command and :func:`kerashvd.run`.

Modules, one concept each (none imports TensorFlow):

- ``cli``: the ``kerashvdrun`` command line; ``runner``: its jobs, on the chosen backend.
- ``backends/``: the ways of starting ranks, one module each (hydra on this machine, hydra
  over ssh, ``srun``), picked in one place (``backends.select``); ``ssh``: ssh options and
  the check of remote hosts.
- ``run_fn``: :func:`run`, a Python function on N processes (notebooks).
- ``command``: the supervised command every rank runs.
- ``hosts``: ``-H`` host lists; ``engine_flags``: flags that become ``KERASHVD_*`` variables.
- ``job``: running one job to its end and stopping it; ``restarts``: starting a failed job
  again (``kerashvdrun --max-restarts``); ``reports``: the ranks' failure reports;
  ``watches``: ranks lost without a report (killed supervisors, hosts that stopped
  answering); ``keepalive``: the time limit on silence of every launcher connection;
  ``exit_status``: exit codes in words.
- Elastic mode (``--min-np``/``--max-np``/``--host-discovery-script``): ``elastic_options``
  (its flags), ``elastic_driver`` (worlds of changing size), ``discovery`` (where ranks may
  run), ``host_pool`` (what failures took, the next world's layout), ``handover`` (the
  launcher's end of the protocol that carries a commit from one world to the next; the
  ranks' end is ``kerashvd.elastic``).
- ``arg_types``: the flags' argparse types.
- ``_supervisor.py`` and ``_worker.py``: scripts each rank runs (standard library only, and
  cloudpickle for the worker). The supervisor gives each rank the TensorFlow environment
  defaults of ``kerashvd/runtime/tf_defaults.py`` (which ``kerashvd.init()`` also sets before
  TensorFlow is imported).
"""

from .errors import LaunchError, RankError
from .run_fn import run

__all__ = ["LaunchError", "RankError", "run"]
