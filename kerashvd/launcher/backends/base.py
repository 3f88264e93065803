"""What every launcher backend implements: :class:`Backend` (one way of starting a job's ranks),
the :class:`Launch` it prepares for each job, and the :class:`Request` it is chosen from.

A backend is asked, in this order (``kerashvdrun``: ``cli.py``, ``runner.py``; ``kerashvd.run``:
``run_fn.py``):

1. :meth:`Backend.detect` (on the class): whether it starts the ranks of this request. The
   first backend of :data:`kerashvd.launcher.backends.BACKENDS` that says yes is used.
2. :meth:`Backend.default_np` when the command line gave no rank count, and
   :meth:`Backend.default_hosts` when an elastic job named no hosts.
3. :meth:`Backend.find_program`, once: the program that starts the ranks (``mpiexec``,
   ``srun``); an error here ends ``kerashvdrun`` with exit code 2.
4. For every job (each attempt of ``--max-restarts``, each world of the elastic mode):
   :meth:`Backend.prepare` on the job's hosts yields a :class:`Launch`; the launcher opens its
   report server where the launch says (``local``, ``address``), runs
   :meth:`Launch.command` through ``job.run_job`` (which stops it by signals, the same for
   every backend), then calls :meth:`Launch.finish` to clean up. An elastic world's options
   come first from :meth:`Backend.elastic_args`.

Every rank runs under kerashvd's supervisor (``command.supervised``): a backend only decides
how those supervised commands are started, never what they do.
"""

import abc
import dataclasses
import os

from .. import command as _command
from ..hosts import Host


@dataclasses.dataclass(frozen=True)
class Request:
    """What the caller asked for, before any backend is chosen.

    Attributes:
        np: the rank count given (``-np``, or ``--min-np`` in elastic mode), or ``None``.
        hosts: the hosts given (``-H``, ``--hostfile``: a list of
            :class:`~kerashvd.launcher.hosts.Host`), or ``None``.
        discovery_script: the elastic mode's ``--host-discovery-script``, or ``None`` (its
            hosts are known only while the job runs, and may be other machines).
        ssh: the :class:`~kerashvd.launcher.ssh.SshSettings` for other hosts.
        dry_run: only print commands: look nothing up and contact no host.
        scheduler: whether a scheduler's allocation (``SLURM_JOB_ID``) may choose the backend;
            ``kerashvd.run`` sets False (its ranks are started with hydra, on this machine
            or over ssh).
        environ: the environment to read (``os.environ`` when ``None``).
    """

    np: int | None = None
    hosts: list | None = None
    discovery_script: str | None = None
    ssh: object = None
    dry_run: bool = False
    scheduler: bool = True
    environ: dict | None = None

    @property
    def env(self):
        """The environment the backends read: ``environ``, or ``os.environ``."""
        return os.environ if self.environ is None else self.environ


@dataclasses.dataclass(frozen=True)
class Supervision:
    """How every rank's supervisor reaches the launcher (``command.supervised``).

    Attributes:
        report_address: ``"host:port"`` of the job's report server, or ``None``.
        token: the report server's token.
        prefix_output: prefix every output line of a rank with ``[rank] ``.
        python: the interpreter that runs the supervisor (default: this one).
    """

    report_address: str | None = None
    token: str | None = None
    prefix_output: bool = False
    python: str | None = None

    def wrap(self, rank_command):
        """``rank_command`` run under the supervisor, as a list of strings."""
        return _command.supervised(rank_command, self.report_address, self.token,
                                   self.prefix_output, self.python)


class Launch:
    """One job prepared by a backend: where its ranks reach the launcher, the command that
    starts them, and the clean-up after it. This base class is a launch on this machine only.

    Attributes:
        local: every rank runs on this machine, so the report server listens on loopback.
        address: the host or address ranks on other machines connect to (``None``: this
            machine's host name); unused when ``local``.
        names_hosts: the job's ranks run on several hosts, so failures name the rank's host.
    """

    local = True
    address = None
    names_hosts = False

    def command(self, np, rank_command, *, env, args, supervision):
        """The argv that starts ``rank_command`` on ``np`` supervised ranks.

        Args:
            np: the number of ranks, >= 1.
            rank_command: argv every rank runs, e.g. ``["python", "train.py"]``.
            env: ``{name: value}`` to set in every rank.
            args: options for the backend's program (``--mpi-args``, elastic options).
            supervision: a :class:`Supervision`.

        Returns:
            A list of strings for ``subprocess``.
        """
        raise NotImplementedError

    def describe(self):
        """A line for ``--verbose`` on how other hosts are reached, or ``None``."""
        return None

    def finish(self, log=None, unreachable=()):
        """Cleans up after a job whose ranks have all ended.

        Args:
            log: called with messages, or ``None``.
            unreachable: hosts that stopped answering during the job (nothing to clean
                there now).
        """


class Backend(abc.ABC):
    """One way of starting a job's ranks (hydra on this machine, hydra over ssh, ``srun``).

    A subclass sets :attr:`name` and implements :meth:`detect`, :meth:`find_program` and
    :meth:`prepare`; the other methods have defaults that suit a backend that runs ranks on
    this machine.

    Args:
        request: the :class:`Request` it was chosen for.

    Attributes:
        name: the program that starts the ranks, as messages name it (``"mpiexec"``).
        elastic: whether it can run the elastic mode's worlds (:meth:`elastic_args`).
        program: its path, once :meth:`find_program` has run.
        request: the :class:`Request`.
    """

    name = ""
    elastic = True

    def __init__(self, request):
        self.request = request
        self.program = None

    @classmethod
    @abc.abstractmethod
    def detect(cls, request):
        """Whether this backend starts the ranks of ``request`` (a :class:`Request`)."""

    def default_np(self):
        """The rank count when the command line gives none (e.g. the allocation's tasks), or
        ``None`` to require ``-np``."""
        return None

    def default_hosts(self, np, max_np, slots_per_host):
        """Where an elastic job may run ranks when the command line names no hosts.

        Args:
            np: the first world's rank count.
            max_np: ``--max-np``, or ``None``.
            slots_per_host: ``--slots-per-host``, or ``None``.

        Returns:
            ``(hosts, description)``: a list of :class:`~kerashvd.launcher.hosts.Host` and
            the words that name where they came from in messages.

        Raises:
            DiscoveryError: the hosts cannot be found (the message says why).
        """
        return [Host("localhost", max_np or np)], "this machine"

    @abc.abstractmethod
    def find_program(self):
        """Finds the program that starts the ranks; stores and returns its path.

        Raises:
            LaunchError: it cannot be found (the message says how to get it).
        """

    def several_hosts(self):
        """Whether the job's ranks may run on several hosts, so that failures name the host."""
        return False

    @abc.abstractmethod
    def prepare(self, hosts, log=None):
        """A context manager that prepares one job on ``hosts`` and yields its :class:`Launch`;
        what it set up (files, checks) lasts until the block ends.

        Args:
            hosts: the job's hosts (a list of :class:`~kerashvd.launcher.hosts.Host`, in
                rank order), or ``None`` for the backend's own placement.
            log: called with messages, or ``None``.

        Raises:
            LaunchError: the hosts cannot run ranks. One with a ``hosts`` attribute names
                those hosts (the elastic mode leaves them out until discovery lists them
                again).
        """

    def reachable(self, names):
        """Which of the hosts ``names``, left out of an elastic job because they stopped
        answering, can run ranks again: the job uses those again without waiting for
        discovery to drop and list them. Called from a background thread, every few seconds
        while such hosts are left out; it may take up to a connection timeout.

        Returns:
            A list of names. Default: none (such hosts come back through discovery only).
        """
        return []

    def elastic_args(self, ranks):
        """Options for the program that keep an elastic world's survivors alive when a rank or
        host is lost, so that they can hand their commit over.

        Args:
            ranks: the world's layout, one host name per rank.
        """
        return []
