"""Which ranks and nodes keep the others waiting: :func:`straggler_report`.

What every rank records (ops/core/straggler_stats.h, in the engine's hot path, no
communication): for each of its last 4096 collectives (not broadcasts or join), its *wait*
(submission to the end of the data transfer), its *entry lag* (from negotiation's "ready
everywhere" to the start of the transfer) and *completion lag* (from the end of the transfer
to the ops' completion), both once per fused group, and when the transfer ended.

How the report reads them, collective by collective (a collective has the same number on
every rank), comparing a rank with the median of the others:

- **Late to submit** (compute, input pipeline, Python work between steps): a transfer ends on
  every rank together, with the last rank's data, so a rank whose wait was shorter than the
  others' median wait submitted that much later: the others waited for it. The time is the
  union of those waits on the rank's own clock (ten tensors late together by 50 ms count
  50 ms, not 500).
- **Slow to communicate**: a rank that enters the transfer later than the others keeps them
  waiting inside it (its engine thread starved of CPU, slow fusion copies, GPU inputs not
  ready); one that finishes its copies after the transfer later than the others submits its
  next collective late for that reason, and that time counts here, not as late to submit.
  Delays of the network itself, and a rank slow *inside* the transfer, end every rank's wait
  alike: a slow link between two nodes makes both ends wait the same, so it is not pinned
  on either node (the ``transfer_seconds`` of every rank then grow together).

A rank is named when the others waited for it at least ``threshold`` of the time (both kinds
together) and in at least ``min_fraction`` of the collectives, in each kind that reaches the
threshold alone, or else in the larger. The time is its typical lateness: each
collective's counts at most three times its median one, so one long pause (a checkpoint
written by rank 0 only) shows in its numbers but does not name it. With ranks on several
hosts, each node is also measured as one: how long the other nodes' ranks waited for the
last of its ranks; a node is named when it, or one of its ranks, is.
"""

import dataclasses
import math
import socket
import warnings

import numpy as np

from .runtime._engine import core as _core
from .runtime._engine import require_init as _require_init

__all__ = ["Lateness", "NodeStragglerStats", "RankStragglerStats", "StragglerReport",
           "straggler_report"]

# Differences smaller than this are timer and scheduling noise, not lateness.
_NOISE_SECONDS = 0.0005
# When deciding whom to name, a collective's lateness counts at most this many times the
# rank's median lateness (see analyze).
_CAP = 3.0


@dataclasses.dataclass(frozen=True)
class Lateness:
    """How long and how often the others waited for a rank or a node (times in seconds).

    ``late_*``: collectives it submitted after the others' median, and the time the others
    waited for it; ``comm_*``: the same for entering the data transfer (or finishing after
    it) later than the others. ``*_share``: that time over the report's interval.
    """

    late_collectives: int
    late_seconds: float
    late_share: float
    comm_collectives: int
    comm_seconds: float
    comm_share: float


@dataclasses.dataclass(frozen=True)
class RankStragglerStats(Lateness):
    """One rank's numbers in a :class:`StragglerReport` (see :class:`Lateness`), with its
    ``rank`` and ``host``, its median wait per collective and its time inside MPI calls."""

    rank: int
    host: str
    median_wait_seconds: float
    transfer_seconds: float


@dataclasses.dataclass(frozen=True)
class NodeStragglerStats(Lateness):
    """One node's numbers (see :class:`Lateness`): how long the ranks of the other nodes
    waited for the last of its ``ranks``."""

    host: str
    ranks: tuple


@dataclasses.dataclass(frozen=True)
class StragglerReport:
    """What :func:`straggler_report` returns; ``str(report)`` reads as a short summary.

    Attributes:
        ranks: a :class:`RankStragglerStats` per rank, in rank order.
        late_to_submit / slow_to_communicate: the ranks named in each category.
        node_stats: a :class:`NodeStragglerStats` per host, when the ranks run on several.
        nodes: the hosts named: those of the named ranks, and those whose ranks together
            kept the other nodes waiting (the ranks of a slow node also wait for each other,
            so each of them alone may stay below the threshold).
        collectives: how many collectives were compared; ``complete``: False when more ran
            since the last report than the engine keeps (only the last ones were compared).
        elapsed_seconds: the interval the report covers (median over ranks).
        threshold, min_fraction: the naming rules used.
    """

    ranks: tuple
    late_to_submit: tuple
    slow_to_communicate: tuple
    node_stats: tuple
    nodes: tuple
    collectives: int
    complete: bool
    elapsed_seconds: float
    threshold: float
    min_fraction: float

    def to_dict(self):
        """The report as plain Python types (for logs and JSON)."""
        return dataclasses.asdict(self)

    def __str__(self):
        hosts = sorted({r.host for r in self.ranks})
        scope = "" if self.complete else " (the last ones only)"
        lines = [f"kerashvd straggler report: {len(self.ranks)} rank(s) on {len(hosts)} "
                 f"node(s), {self.collectives} collectives{scope} in {self.elapsed_seconds:.1f} s"]
        if not self.nodes:
            lines.append(f"  no rank kept the others waiting {self.threshold:.0%} of the time "
                         "or more")
            return "\n".join(lines)
        for title, named, kind in (
                ("late to submit (compute or input)", self.late_to_submit, "late"),
                ("slow to communicate", self.slow_to_communicate, "comm")):
            if named:
                lines.append(f"  {title}:")
                lines += [f"    rank {r.rank} on {r.host}: {_describe(r, kind, self.collectives)}"
                          for r in named]
        lines.append("  nodes named: " + ", ".join(self.nodes))
        for node in self.node_stats:
            if node.host in self.nodes:
                kind = "late" if node.late_seconds >= node.comm_seconds else "comm"
                what = "late to submit" if kind == "late" else "slow to communicate"
                lines.append(f"    {node.host} (ranks {', '.join(map(str, node.ranks))}), "
                             f"{what}: {_describe(node, kind, self.collectives)}")
        return "\n".join(lines)


def _describe(stats, kind, collectives):
    count, seconds, share = (getattr(stats, f"{kind}_{k}")
                             for k in ("collectives", "seconds", "share"))
    return (f"late in {count} of {collectives} collectives, the others waited {seconds:.2f} s "
            f"for it ({share:.0%} of the time)")


def straggler_report(threshold=0.2, min_fraction=0.25, reset=True):
    """Names the ranks and nodes that kept the others waiting. A collective: every rank calls it.

    Each rank hands over the records its engine kept since the last report (or since
    ``init()``); one allgather brings them to every rank, and every rank computes the same
    report. The report's own allgather is not recorded.

    Args:
        threshold: name a rank when the others waited for it at least this share of the time
            (0 to 1).
        min_fraction: ...and it was late in at least this share of the collectives (0 to 1).
        reset: start the next report's interval now (False: the next report covers this one's
            interval too).

    Returns:
        A :class:`StragglerReport`; the same on every rank.

    Raises:
        ValueError: for a threshold or min_fraction outside [0, 1].

    Example:

    >>> import kerashvd as hvd
    >>> report = hvd.straggler_report()
    >>> print(report)  # doctest: +SKIP
    kerashvd straggler report: 4 rank(s) on 2 node(s), 12 collectives in 2.9 s
      late to submit (compute or input):
        rank 2 on node2: late in 9 of 12 collectives, the others waited 0.91 s for it (32% ...)
      nodes named: node2
        node2 (ranks 2, 3), late to submit: late in 10 of 12 collectives, the others waited ...
    """
    _require_init()
    check_rules(threshold, min_fraction)
    from .collectives.functions import allgather_object  # lazy: imports TensorFlow

    mine = dict(_core.straggler_records(bool(reset)), host=socket.gethostname())
    everyone = allgather_object(mine, name=None)
    if reset:
        _core.straggler_records(True)  # leave the report's own collectives out of the next
    return analyze(everyone, threshold, min_fraction)


def check_rules(threshold, min_fraction):
    """Raises ValueError unless both are numbers in [0, 1]."""
    for arg, value in (("threshold", threshold), ("min_fraction", min_fraction)):
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 <= value <= 1):
            raise ValueError(f"{arg} must be a number in [0, 1] (a share of the time, or of "
                             f"the collectives). Received: {arg}={value!r}")


def analyze(records, threshold=0.2, min_fraction=0.25):
    """The report for every rank's records (the dicts of ``_core.straggler_records`` with a
    ``host``), in rank order. Pure: no communication."""
    first = max(r["first_seq"] for r in records)
    end = min(r["first_seq"] + len(r["wait_seconds"]) for r in records)
    count = max(0, end - first)

    def matrix(key):  # row = rank, column = collective, lined up by collective number
        return np.array([r[key][first - r["first_seq"]:end - r["first_seq"]] for r in records],
                        dtype=np.float64).reshape(len(records), count)

    m = {key: matrix(f"{key}_seconds") for key in ("wait", "done", "entry_lag", "completion_lag")}
    elapsed = float(np.median([r["elapsed_seconds"] for r in records]))
    # More collectives ran than the engine keeps: only the last ones are compared.
    complete = all(r["dropped"] == 0 for r in records)

    def rule_and_numbers(rows):
        # Named when both kinds together reach the threshold (a CPU-starved node is late to
        # submit and slow to communicate, maybe each below it), in the kind(s) that reach it
        # alone, or else in the larger one.
        numbers, typical, late_somehow = _lateness(m, rows, elapsed if complete else None)
        if not count or typical["late"] + typical["comm"] < threshold or \
                late_somehow < max(1, min_fraction * count):
            return numbers, set()
        named = {kind for kind in typical if typical[kind] >= threshold}
        return numbers, named or {max(typical, key=typical.get)}

    ranks, named_ranks = [], {"late": [], "comm": []}
    for rank, record in enumerate(records):
        numbers, named = rule_and_numbers([rank])
        own = m["wait"][rank][~np.isnan(m["wait"][rank])]
        stats = RankStragglerStats(
            rank=rank, host=record["host"], **numbers,
            median_wait_seconds=float(np.median(own)) if own.size else math.nan,
            transfer_seconds=float(record["transfer_seconds"]))
        ranks.append(stats)
        for kind in named:
            named_ranks[kind].append(stats)
    hosts = sorted({r["host"] for r in records})
    node_stats, named_nodes = [], {r.host for kind in named_ranks for r in named_ranks[kind]}
    for host in hosts if len(hosts) > 1 else ():
        rows = [i for i, r in enumerate(records) if r["host"] == host]
        numbers, named = rule_and_numbers(rows)
        node_stats.append(NodeStragglerStats(host=host, ranks=tuple(rows), **numbers))
        if named:
            named_nodes.add(host)
    return StragglerReport(
        ranks=tuple(ranks), late_to_submit=tuple(named_ranks["late"]),
        slow_to_communicate=tuple(named_ranks["comm"]), node_stats=tuple(node_stats),
        nodes=tuple(sorted(named_nodes)), collectives=count, complete=complete,
        elapsed_seconds=elapsed, threshold=float(threshold), min_fraction=float(min_fraction))


def _lateness(m, rows, elapsed):
    """The :class:`Lateness` numbers (a dict) of the ranks ``rows`` taken together, the
    shares that decide whether they are named ({"late": share, "comm": share}), and in how
    many collectives they were late either way.

    Per collective, the others' median against the last of ``rows``: its wait (shorter: it
    submitted later), entry lag and completion lag (longer: it entered the transfer later, or
    finished after it later, which delays its next submission: that part counts as slow to
    communicate, not late to submit). What names them is their typical lateness: each
    collective's capped at a few times their median one, so that one long pause does not
    count as a pattern. ``elapsed``: the interval, or None when only the last collectives
    are known (the span of those is used).
    """
    mine = np.zeros(m["wait"].shape[0], bool)
    mine[rows] = True
    others = m["wait"][~mine]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no value there
        last = np.nanargmin(np.where(np.isnan(m["wait"][mine]), np.inf, m["wait"][mine]), axis=0)
        cols = np.arange(m["wait"].shape[1])
        wait = m["wait"][mine][last, cols]
        submitted = m["done"][mine][last, cols] - wait
        late = _above_noise(np.nanmedian(others, axis=0) - wait)
        finished = _above_noise(np.nanmax(m["completion_lag"][mine], axis=0)
                                - np.nanmedian(m["completion_lag"][~mine], axis=0))
        entered = _above_noise(np.nanmax(m["entry_lag"][mine], axis=0)
                               - np.nanmedian(m["entry_lag"][~mine], axis=0))
        done = m["done"][mine]
        span = elapsed if elapsed is not None else max(
            float(np.nanmax(done) - np.nanmin(done)) if done.size else 0.0, 1e-9)
    comm = entered + finished
    late_seconds = max(0.0, _union_before(submitted, late) - float(finished.sum()))
    typical_late = max(0.0, _union_before(submitted, _capped(late))
                       - float(_capped(finished).sum()))
    numbers = dict(late_collectives=int(np.count_nonzero(late)), late_seconds=late_seconds,
                   late_share=_share(late_seconds, span),
                   comm_collectives=int(np.count_nonzero(comm)), comm_seconds=float(comm.sum()),
                   comm_share=_share(float(comm.sum()), span))
    typical = {"late": _share(typical_late, span),
               "comm": _share(float(_capped(comm).sum()), span)}
    return numbers, typical, int(np.count_nonzero((late > 0) | (comm > 0)))


def _above_noise(values):
    """``values`` where they exceed the noise, 0 elsewhere (NaN included)."""
    return np.where(np.nan_to_num(values, nan=0.0) > _NOISE_SECONDS, values, 0.0)


def _capped(values):
    """``values`` (0 or above noise) with each capped at _CAP times the median of those above
    0."""
    above = values > 0
    if not np.any(above):
        return values
    return np.minimum(values, _CAP * np.median(values[above]))


def _union_before(submitted, late):
    """Total length of the union of the intervals [submitted - late, submitted] where
    late > 0: the time during which the others had submitted and this rank had not."""
    keep = late > 0
    intervals = sorted(zip(submitted[keep] - late[keep], submitted[keep]))
    total, reach = 0.0, -math.inf
    for start, stop in intervals:
        if stop > reach:
            total += stop - max(start, reach)
            reach = stop
    return float(total)


def _share(seconds, span):
    return float(seconds / span) if span > 0 else 0.0
