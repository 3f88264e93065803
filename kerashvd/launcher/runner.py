"""Runs ``kerashvdrun``'s jobs on the chosen backend: a fixed job with its restarts, or one
world of the elastic mode.

For each job: a report server (``reports.py``) where the backend's launch says the ranks can
reach it, the backend's command with every rank under its supervisor, ``job.run_job`` until
every rank has ended, and the backend's clean-up. The loops around the jobs are
``restarts.py`` (``--max-restarts``) and ``elastic_driver.py`` (the elastic mode).
"""

import os
import queue
import shlex
import sys

from . import keepalive
from .backends import Supervision
from .handover import VARIABLE as ELASTIC_VARIABLE
from .job import JobOutcome, run_job
from .reports import ReportServer
from .restarts import VARIABLE as RESTART_VARIABLE, run_with_restarts


class Runner:
    """Starts the jobs of one ``kerashvdrun`` command.

    Args:
        backend: the :class:`~kerashvd.launcher.backends.base.Backend` (its program found).
        command: the argv every rank runs.
        env: ``{name: value}`` for every rank (engine flags and ``-x``).
        mpi_args: the user's options for the backend's program (``--mpi-args``).
        prefix_output: prefix every output line of a rank with ``[rank] ``.
        verbose: print each job's command (and how other hosts are reached).
        dry_run: print the command instead of running it.
        log: called with the launcher's messages.
    """

    def __init__(self, backend, command, env, *, mpi_args=(), prefix_output=False,
                 verbose=False, dry_run=False, log=None):
        self.backend = backend
        self.command = list(command)
        self.env = dict(env)
        self.mpi_args = list(mpi_args)
        self.prefix_output = prefix_output
        self.verbose = verbose
        self.dry_run = dry_run
        self.log = log or (lambda message: None)

    def run_fixed(self, np, hosts, max_restarts=0, restart_delay=0.0):
        """Runs ``np`` ranks on ``hosts`` (``None``: the backend's placement), again after a
        failure up to ``max_restarts`` times; returns the last attempt's
        :class:`~kerashvd.launcher.job.JobOutcome`."""
        with self.backend.prepare(hosts, log=self.log) as launch:
            described = launch.describe()
            if described and (self.verbose or self.dry_run):
                self.log(described)
            outcome, _ = run_with_restarts(
                lambda number, signals: self._job(launch, np, self.mpi_args, number, signals),
                max_restarts, restart_delay, log=self.log, launcher=self.backend.name)
        return outcome

    def run_world(self, world, signals):
        """Runs one elastic world (an :class:`~kerashvd.launcher.elastic_driver.World`) until
        every rank has ended; returns its :class:`~kerashvd.launcher.job.JobOutcome`."""
        args = [*self.backend.elastic_args(world.ranks), *self.mpi_args]
        with self.backend.prepare(world.plan, log=self.log) as launch:
            return self._job(launch, world.np, args, world.number, signals, world)

    def _job(self, launch, np, args, restart_count, signals, world=None):
        events = queue.Queue()
        rank_env = dict(self.env, **{RESTART_VARIABLE: str(restart_count)})
        options = {}
        if world is not None:  # elastic mode: see elastic_driver.py
            options = dict(failure_grace=world.failure_grace, is_failure=world.is_failure,
                           on_tick=world.on_tick)
        timeout = keepalive.link_timeout({**os.environ, **rank_env})  # the ranks' own
        with ReportServer(events, local=launch.local, address=launch.address,  # a new token
                          name_hosts=launch.names_hosts, link_timeout=timeout,
                          handlers=world.channel.handlers if world else None) as server:
            if world is not None:
                rank_env[ELASTIC_VARIABLE] = f"{server.address} {server.token}"
            supervision = Supervision(server.address, server.token, self.prefix_output)
            argv = launch.command(np, self.command, env=rank_env, args=args,
                                  supervision=supervision)
            if self.verbose or self.dry_run:
                print(f"kerashvdrun: {shlex.join(argv)}", file=sys.stderr, flush=True)
            if self.dry_run:
                return JobOutcome(returncode=0)
            outcome = run_job(argv, events, log=self.log, signals=signals, **options)
            if world is not None:  # ranks that outlived the launcher's program may hand over
                world.channel.wait_for_members(world.failure_grace)
        launch.finish(self.log, unreachable={e.host for e in outcome.lost if e.unreachable})
        return outcome
