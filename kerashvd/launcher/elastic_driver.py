"""kerashvdrun's elastic mode (``--min-np``, ``--max-np``, ``--host-discovery-script``): a
job whose world shrinks when ranks or hosts are lost and grows when hosts come.

An MPI world keeps its size for life, so the driver runs a sequence of *worlds*, each one
``mpiexec`` (or ``srun``) job, and carries training from one to the next through the ranks'
last commit (``handover.py`` explains that protocol). The loop, in the launcher's main thread:

1. Wait until the usable hosts (discovery's list minus what failures took, ``host_pool.py``)
   have enough slots: ``-np`` for the first world, ``--min-np`` for the later ones; at most
   ``--elastic-timeout`` seconds (not at all after a failure with fixed hosts, which cannot
   change), then give up naming the hosts and every world's end.
2. Start world ``W`` on them (hosts in order, up to ``--max-np`` ranks), every rank with
   ``KERASHVD_RESTART_COUNT=W`` and ``KERASHVD_ELASTIC`` (this world's report server).
3. While it runs, a thread runs discovery about once a second. When it gives hosts for another
   world of at least ``--min-np`` ranks, the world is told (rank 0 reads it at its next commit;
   every rank then hands its commit over and ends). When a rank fails, the others see it
   in their next collective (the engine names the dead rank within ~0.1 s, or after
   ``KERASHVD_PEER_TIMEOUT`` for a frozen one) and hand over; they get ``handover_grace``
   seconds to end before they are stopped.
   A host that stops answering (its ranks' connections to kerashvdrun time out: a cut link,
   a host that went down) is lost: the world is stopped once its other ranks have handed over,
   whatever discovery lists.
4. When every rank has ended: if they finished training, the job ends with 0. If every rank
   failed by itself (each exited with an error of its own: the script's, which another world
   would meet again), the job ends with that error. Otherwise the failed ranks are charged to
   their hosts, the reset is counted (more than ``--reset-limit`` resets end the job) and the
   loop goes on at 1 with the next world. Hosts lost because they stopped answering are asked
   every few seconds whether they answer again (the backend's ``reachable``); those that do
   are used again at the next commit, as hosts that discovery adds.

Ranks are started with hydra's ``-disable-auto-cleanup`` (srun: ``--kill-on-bad-exit=0``):
without it hydra kills every rank ~0.1 s after one dies, before the survivors can hand their
commit over. kerashvdrun itself stops whatever does not end.
"""

import dataclasses
import threading
import time

from . import exit_status
from .discovery import DiscoveryError
from .errors import LaunchError
from .handover import RESET_EXIT_CODE, CommitStore, WorldChannel
from .host_pool import HostPool, change_kind, describe, layout
from .job import SignalCatcher
from .watches import RankLost

DEFAULT_TIMEOUT = 600.0  # --elastic-timeout (Horovod's default)
DISCOVERY_INTERVAL = 1.0  # seconds between two runs of discovery (Horovod's)
PROBE_INTERVAL = 3.0  # seconds between two asks whether cut-off hosts answer again
HANDOVER_GRACE = 30.0  # seconds survivors get to hand over and end after a failure
# Once every rank has ended, mpiexec/srun gets this long to end too before it is stopped:
# srun waits for ever for a task whose node's slurmstepd was killed.
LAUNCHER_GRACE = 5.0


@dataclasses.dataclass
class ElasticSettings:
    """What the elastic driver needs from the command line.

    Attributes:
        discovery: a host source (``discovery.py``): ``find()`` and ``describe()``.
        np: ranks the first world needs.
        min_np: ranks every later world needs.
        max_np: the most ranks a world may have (``None``: every usable slot).
        timeout: seconds to wait for enough slots (``--elastic-timeout``).
        reset_limit: the most resets (worlds after the first) allowed; ``None``: no limit.
    """

    discovery: object
    np: int
    min_np: int
    max_np: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    reset_limit: int | None = None
    interval: float = DISCOVERY_INTERVAL
    handover_grace: float = HANDOVER_GRACE
    probe_interval: float = PROBE_INTERVAL


class World:
    """One world: its number (0 first), hosts, channel and the reports of its ranks.

    The launch function gives ``channel.handlers`` to the report server, ``is_failure``,
    ``on_tick`` and ``failure_grace`` to :func:`~kerashvd.launcher.job.run_job`.
    """

    def __init__(self, number, plan, channel, failure_grace, previous_end, log):
        self.number = number
        self.plan = plan
        self.ranks = layout(plan)
        self.np = len(self.ranks)
        self.channel = channel
        self.failure_grace = failure_grace
        self.reports = {}
        self.lost = {}  # rank -> RankLost
        self._previous_end = previous_end
        self._log = log
        self._synced_logged = False

    def is_failure(self, event):
        """Records a rank's report or loss (a
        :class:`~kerashvd.launcher.watches.RankLost`); a rank that ended for a reset, or
        whose training was over, is no failure."""
        if isinstance(event, RankLost):
            self.lost.setdefault(event.rank, event)
            return not (self.channel.is_survivor(event.rank) or event.rank in self.channel.done)
        self.reports.setdefault(event.rank, event)
        return not (event.returncode == RESET_EXIT_CODE and
                    self.channel.is_survivor(event.rank))

    def on_tick(self):
        """Logs, once, that the world has synchronized its state; asks to stop the launcher
        when every rank has ended but the launcher did not (a message, else None)."""
        left = self.channel.all_left_for()
        if left is not None and left > LAUNCHER_GRACE:
            return (f"elastic: every rank of world {self.number + 1} has ended, but "
                    f"{LAUNCHER_GRACE:g} s later its launcher still waits (for the ranks of "
                    "a lost host); stopping it.")
        synced = self.channel.synced
        if synced is not None and not self._synced_logged:
            self._synced_logged = True
            since = (f", {synced[1] - self._previous_end:.1f} s after world {self.number} "
                     "ended" if self._previous_end is not None else "")
            start = f"commit {synced[0]}" if synced[0] > 0 else "its initial state"
            self._log(f"elastic: world {self.number + 1} trains from {start}{since}.")
        return None

    def failed_ranks(self):
        """Ranks that neither finished (``done``) nor handed over: they failed, were killed
        with their supervisor (a node that died sends no report), or were stopped."""
        keep = self.channel.done | set(self.channel.survivors)
        return [r for r in range(self.np) if r not in keep]

    def unreachable_ranks(self):
        """Ranks whose host stopped answering."""
        return {rank for rank, event in self.lost.items() if event.unreachable}

    def own_failure(self):
        """When every rank failed by itself, a line naming the errors, else ``None``.

        By itself: the rank exited with a code of its own (not killed by a signal, not for a
        reset), and its supervisor reported it, so its host was there; no rank finished or
        handed over. Such a failure is the script's: another world would meet it again.
        """
        reports = [self.reports.get(rank) for rank in range(self.np)]
        if self.channel.done or self.channel.survivors or not all(
                r is not None and 0 < r.returncode != RESET_EXIT_CODE for r in reports):
            return None
        errors = {}
        for rank in range(self.np):
            error = self.channel.errors.get(rank) or exit_status.describe(reports[rank].returncode)
            errors.setdefault(error, []).append(rank)
        return "; ".join(f"{_ranks(ranks)}: {error}" for error, ranks in errors.items())

    def describe_end(self, failed, store):
        """One line on how the world ended."""
        parts = []
        for rank in failed:
            report, lost = self.reports.get(rank), self.lost.get(rank)
            if report:
                what = report.describe()
            elif lost and lost.unreachable:
                what = (f"rank {rank} stopped answering (nothing came back for "
                        f"{lost.timeout:g} s)")
            else:
                what = (f"rank {rank} ended without a word (killed with its supervisor, or "
                        "stopped by kerashvdrun)")
            parts.append(f"{what} (on {self.ranks[rank]})" if report and not report.host
                         else what)
        survivors = sorted(self.channel.survivors)
        if survivors:
            numbers = sorted(set(self.channel.survivors.values()))
            held = (f"; kerashvdrun holds commit {store.number} ({_size(store.size)})"
                    if store.number >= 0 else "")
            parts.append(f"{_ranks(survivors)} handed over (commit "
                         f"{'/'.join(map(str, numbers))}){held}")
        if self.channel.hosts_update:
            parts.insert(0, f"hosts {self.channel.hosts_update}")
        return f"world {self.number + 1} ({_count(self.np)} on {describe(self.plan)}) " \
            "ended: " + "; ".join(parts or ["every rank ended without a report"])


def _ranks(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _count(np):
    return f"{np} rank{'s' if np != 1 else ''}"


def _size(size):
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


class _GiveUp(Exception):
    """The job cannot go on; the message says why."""


class ElasticDriver:
    """Runs the loop of the module docstring.

    Args:
        settings: :class:`ElasticSettings`.
        launch: ``launch(world, signals)`` starts ``world`` (a :class:`World`) and returns its
            :class:`~kerashvd.launcher.job.JobOutcome` once every rank has ended. It may raise
            ``LaunchError``; one with a ``hosts`` attribute names hosts that cannot run ranks
            (they are left out until discovery lists them again).
        log: called with the launcher's messages.

    Example (a launch that finishes at once)::

        >>> from kerashvd.launcher.discovery import FixedHosts
        >>> from kerashvd.launcher.hosts import Host
        >>> from kerashvd.launcher.job import JobOutcome
        >>> settings = ElasticSettings(FixedHosts([Host("localhost", 2)]), np=2, min_np=1)
        >>> ElasticDriver(settings, lambda world, signals: JobOutcome(0), print).run()
        elastic: hosts +localhost (-H lists localhost:2).
        elastic: world 1: 2 ranks on localhost:2.
        0
    """

    def __init__(self, settings, launch, log, reachable=None):
        self.settings = settings
        self._launch = launch
        self._log = log
        self._reachable = reachable
        self._lock = threading.Lock()
        self._pool = HostPool()
        self._world = None
        self._last_error = None
        self._stop = threading.Event()

    def run(self):
        """Runs worlds until training is over or the job cannot go on; returns the exit code
        (0, the failure's code, 1 when giving up without one, or 128 + N for a signal N)."""
        with CommitStore() as store, SignalCatcher() as signals:
            self._discover()
            threads = [threading.Thread(target=self._discover_forever, daemon=True,
                                        name="kerashvd-discovery")]
            if self._reachable is not None:
                threads.append(threading.Thread(target=self._probe_forever, daemon=True,
                                                name="kerashvd-probe"))
            for thread in threads:
                thread.start()
            try:
                return self._loop(store, signals)
            except _GiveUp as err:
                message, code = err.args
                self._log(f"elastic: {message}")
                return code
            finally:
                self._stop.set()
                for thread in threads:
                    thread.join()

    # -- discovery ------------------------------------------------------------------------

    def _discover_forever(self):
        while not self._stop.wait(self.settings.interval):
            self._discover()

    def _probe_forever(self):
        while not self._stop.wait(self.settings.probe_interval):
            with self._lock:
                names = self._pool.cut_off()
            if not names:
                continue
            back = self._reachable(names)
            if back:
                with self._lock:
                    self._pool.answering_again(back)
                self._log(f"elastic: {', '.join(back)} "
                          f"{'answers' if len(back) == 1 else 'answer'} again: ranks may run "
                          "there again.")

    def _discover(self):
        try:
            hosts = self.settings.discovery.find()
        except DiscoveryError as err:
            if str(err) != self._last_error:
                self._log(f"elastic: {err}; keeping the hosts found before "
                          f"({describe(self._pool.listed)}).")
            self._last_error = str(err)
            return
        self._last_error = None
        with self._lock:
            added, removed = self._pool.update(hosts)
            world, plan = self._world, self._pool.plan(self.settings.max_np)
        if added or removed:
            change = [f"+{name}" for name in added] + [f"-{name}" for name in removed]
            self._log(f"elastic: hosts {' '.join(change)} ({self.settings.discovery.describe()}"
                      f" lists {describe(hosts)}).")
        kind = change_kind(world.plan, plan) if world is not None else None
        if kind and world.channel.hosts_update is None:
            if sum(h.slots for h in plan) < self.settings.min_np:
                return  # a world of fewer than --min-np ranks could not start: keep this one
            self._log(f"elastic: world {world.number + 1} ends at its next commit; the next "
                      f"runs {_count(sum(h.slots for h in plan))} on {describe(plan)}.")
            world.channel.announce_hosts_update(kind)

    def _wait_for_slots(self, needed, signals, flag, ends):
        """The next world's plan once it has ``needed`` ranks; None on a signal."""
        fixed = getattr(self.settings.discovery, "fixed", False)
        timeout = 0.0 if fixed and ends else self.settings.timeout  # no host can come
        deadline = time.monotonic() + timeout
        told = False
        while True:
            with self._lock:
                plan, usable, lost = (self._pool.plan(self.settings.max_np),
                                      self._pool.usable(), self._pool.lost())
            if sum(h.slots for h in plan) >= needed:
                return plan
            if signals.received is not None:
                return None
            have = (f"usable now: {describe(usable)}" +
                    (f"; left out after failures: {', '.join(lost)}" if lost else ""))
            if time.monotonic() > deadline:
                history = "".join(f"\n  {line}" for line in ends)
                waited = (f"and {self.settings.discovery.describe()} lists the same hosts "
                          "for ever" if not timeout else
                          f"for --elastic-timeout {timeout:g} s")
                raise _GiveUp(
                    f"fewer than {flag} {needed} slot{'s' if needed != 1 else ''} {waited} "
                    f"({have}; from {self.settings.discovery.describe()}); giving up."
                    f"{history}", self._last_code)
            if not told:
                self._log(f"elastic: waiting up to {timeout:g} s for {needed} "
                          f"slot{'s' if needed != 1 else ''} ({flag}); {have}.")
                told = True
            time.sleep(0.1)

    # -- worlds ---------------------------------------------------------------------------

    _last_code = 1

    def _loop(self, store, signals):
        number, resets, ended_at, ends = 0, 0, None, []
        needed, flag = self.settings.np, "-np"
        while True:
            plan = self._wait_for_slots(needed, signals, flag, ends)
            if plan is None:
                return 128 + signals.received
            world = World(number, plan, WorldChannel(store), self.settings.handover_grace,
                          ended_at, self._log)
            start = f", from commit {store.number}" if store.number > 0 else ""
            self._log(f"elastic: world {number + 1}: {_count(world.np)} on {describe(plan)}"
                      f"{start}.")
            with self._lock:
                self._world = world
            try:
                outcome = self._launch(world, signals)
            except LaunchError as err:
                if not getattr(err, "hosts", None):
                    raise
                self._log(f"elastic: {err}\nelastic: leaving out {', '.join(err.hosts)} until "
                          "discovery lists them again.")
                with self._lock:
                    self._pool.lose(err.hosts)
                continue
            finally:
                with self._lock:
                    self._world = None
                world.channel.close()
            ended_at = time.monotonic()
            if outcome.interrupted is not None:
                return outcome.exit_code
            channel = world.channel
            if len(channel.done) == world.np or \
                    outcome.returncode == 0 and not world.reports and not channel.survivors:
                if number:
                    self._log(f"elastic: training finished in world {number + 1}, after "
                              f"{resets} reset{'s' if resets != 1 else ''}.")
                return 0
            failed = world.failed_ranks()
            if failed and world.reports.get(failed[0]):
                self._last_code = world.reports[failed[0]].exit_code
            ends.append(world.describe_end(failed, store))
            if channel.done and not channel.survivors:
                self._log(f"elastic: {ends[-1]}; training had finished on "
                          f"{_ranks(sorted(channel.done))}: not starting another world.")
                return self._last_code if failed else outcome.exit_code
            own = world.own_failure()
            if own is not None:
                raise _GiveUp(f"{ends[-1]}.\nEvery rank failed by itself ({own}): an error "
                              "of the training script, which another world would meet again; "
                              "not starting one.", self._last_code)
            with self._lock:
                self._pool.record_failures(world.ranks, set(failed),
                                           world.unreachable_ranks())
            resets += 1
            limit = self.settings.reset_limit
            if limit is not None and resets > limit:
                raise _GiveUp(f"{ends[-1]}.\nThe job was reset {limit} time(s), the "
                              "--reset-limit; giving up.", self._last_code)
            self._log(f"elastic: {ends[-1]}. Reset {resets}"
                      f"{f' of {limit}' if limit is not None else ''}.")
            number += 1
            needed, flag = self.settings.min_np, "--min-np"

