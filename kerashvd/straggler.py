"""Which ranks and nodes keep the others waiting: :func:`straggler_report`.

What every rank records (ops/core/straggler_stats.h, in the engine's hot path, no
communication): for each of its last 4096 collectives (not broadcasts or join), its *wait*
(submission to end), its *entry lag* (from negotiation's "ready everywhere" to the start of the
data transfer, once per fused group) and when it ended.

How the report reads them, collective by collective (a collective has the same number on
every rank):

- **Late to submit** (compute, input pipeline, Python work between steps): a collective ends
  on every rank together, with the last rank's data, so a rank whose wait was shorter than
  the others' median wait submitted that much later: the others waited for it. The time is
  the union of those waits on the rank's own clock (ten tensors late together by 50 ms count
  50 ms, not 500).
- **Slow to communicate**: a rank that enters the data transfer later than the others' median
  entry keeps them waiting inside it (its engine thread starved of CPU, slow fusion copies,
  GPU inputs not ready). Delays of the network itself end every rank's wait alike: a slow
  link between two nodes makes both ends wait the same, so it is not pinned on either node
  (the ``transfer_seconds`` of every rank then grow together).

A rank is named in a category when the others waited for it at least ``threshold`` of the
time and in at least ``min_fraction`` of the collectives (one long pause, such as a
checkpoint written by rank 0 only, is reported in its numbers but does not name the rank).
A node is named when one of its ranks is.
"""

import dataclasses
import math
import socket

import numpy as np

from . import _core
from .runtime import _require_init

__all__ = ["RankStragglerStats", "StragglerReport", "straggler_report"]

# Differences smaller than this are timer and scheduling noise, not lateness.
_NOISE_SECONDS = 0.0005
# When deciding whom to name, a collective's lateness counts at most this many times the
# rank's median lateness (see analyze).
_CAP = 3.0


@dataclasses.dataclass(frozen=True)
class RankStragglerStats:
    """One rank's numbers in a :class:`StragglerReport` (times in seconds).

    ``late_*``: collectives this rank submitted after the others' median, and the time the
    others waited for it; ``comm_*``: the same for entering the data transfer late.
    ``*_share``: that time over the report's interval. ``median_wait_seconds``: this rank's
    median wait per collective; ``transfer_seconds``: its time inside MPI calls.
    """

    rank: int
    host: str
    late_collectives: int
    late_seconds: float
    late_share: float
    comm_collectives: int
    comm_seconds: float
    comm_share: float
    median_wait_seconds: float
    transfer_seconds: float


@dataclasses.dataclass(frozen=True)
class StragglerReport:
    """What :func:`straggler_report` returns; ``str(report)`` reads as a short summary.

    Attributes:
        ranks: a :class:`RankStragglerStats` per rank, in rank order.
        late_to_submit / slow_to_communicate: the ranks named in each category.
        nodes: the hosts of the named ranks, sorted.
        collectives: how many collectives were compared; ``complete``: False when more ran
            since the last report than the engine keeps (only the last ones were compared).
        elapsed_seconds: the interval the report covers (median over ranks).
        threshold, min_fraction: the naming rules used.
    """

    ranks: tuple
    late_to_submit: tuple
    slow_to_communicate: tuple
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
        if not self.late_to_submit and not self.slow_to_communicate:
            lines.append(f"  no rank kept the others waiting {self.threshold:.0%} of the time "
                         "or more")
            return "\n".join(lines)
        for title, named, kind in (("late to submit (compute or input)", self.late_to_submit, "late"),
                                   ("slow to communicate", self.slow_to_communicate, "comm")):
            if not named:
                continue
            lines.append(f"  {title}:")
            for r in named:
                count = getattr(r, f"{kind}_collectives")
                seconds = getattr(r, f"{kind}_seconds")
                share = getattr(r, f"{kind}_share")
                lines.append(f"    rank {r.rank} on {r.host}: late in {count} of "
                             f"{self.collectives} collectives, the others waited {seconds:.2f} s "
                             f"for it ({share:.0%} of the time)")
        lines.append("  nodes named: " + ", ".join(self.nodes))
        return "\n".join(lines)


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
    kerashvd straggler report: 4 rank(s) on 2 node(s), 120 collectives in 6.2 s
      late to submit (compute or input):
        rank 2 on node2: late in 118 of 120 collectives, the others waited 4.10 s for it (66% of the time)
        rank 3 on node2: late in 117 of 120 collectives, the others waited 4.05 s for it (65% of the time)
      nodes named: node2
    """
    _require_init()
    check_rules(threshold, min_fraction)
    from .functions import allgather_object

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

    wait, done = matrix("wait_seconds"), matrix("done_seconds")
    entry, completion = matrix("entry_lag_seconds"), matrix("completion_lag_seconds")
    elapsed = float(np.median([r["elapsed_seconds"] for r in records]))
    # More collectives ran than the engine keeps: only the last ones are compared.
    complete = all(r["dropped"] == 0 for r in records)
    ranks, typical = [], {}
    for rank, record in enumerate(records):
        span = elapsed if complete or count == 0 else max(
            float(np.nanmax(done[rank]) - np.nanmin(done[rank])), 1e-9)
        # Slow to communicate: entering the transfer, and finishing after it, later than the
        # others (the latter delays this rank's next submission: it is taken out of "late").
        entered, finished = _above_noise(-_behind(entry, rank)), _above_noise(-_behind(completion, rank))
        comm = entered + finished
        late = _above_noise(_behind(wait, rank))  # the others waited longer: it came later
        submitted = done[rank] - wait[rank]
        own = wait[rank][~np.isnan(wait[rank])]
        stats = {
            "late": (int(np.count_nonzero(late)),
                     max(0.0, _union_before(submitted, late) - float(finished.sum())),
                     max(0.0, _union_before(submitted, _capped(late)) - float(_capped(finished).sum()))),
            "comm": (int(np.count_nonzero(comm)), float(comm.sum()), float(_capped(comm).sum()))}
        ranks.append(RankStragglerStats(
            rank=rank, host=record["host"],
            late_collectives=stats["late"][0], late_seconds=stats["late"][1],
            late_share=_share(stats["late"][1], span),
            comm_collectives=stats["comm"][0], comm_seconds=stats["comm"][1],
            comm_share=_share(stats["comm"][1], span),
            median_wait_seconds=float(np.median(own)) if own.size else math.nan,
            transfer_seconds=float(record["transfer_seconds"])))
        # What names a rank: its typical lateness, each collective's capped at a few times
        # the rank's median one, so that one long pause does not count as a pattern.
        typical[rank] = {kind: _share(value[2], span) for kind, value in stats.items()}

    def named(kind):
        return tuple(r for r in ranks
                     if typical[r.rank][kind] >= threshold and count > 0
                     and getattr(r, f"{kind}_collectives") >= max(1, min_fraction * count))

    late_to_submit, slow_to_communicate = named("late"), named("comm")
    nodes = tuple(sorted({r.host for r in late_to_submit + slow_to_communicate}))
    return StragglerReport(
        ranks=tuple(ranks), late_to_submit=late_to_submit,
        slow_to_communicate=slow_to_communicate, nodes=nodes, collectives=count,
        complete=complete, elapsed_seconds=elapsed, threshold=float(threshold),
        min_fraction=float(min_fraction))


def _above_noise(values):
    """``values`` where they exceed the noise, 0 elsewhere (NaN included)."""
    return np.where(np.nan_to_num(values, nan=0.0) > _NOISE_SECONDS, values, 0.0)


def _behind(values, rank):
    """Per collective: the median of the other ranks' values minus this rank's value (NaN
    where this rank or all the others have none)."""
    others = np.delete(values, rank, axis=0)
    out = np.full(values.shape[1], np.nan)
    if others.shape[0] == 0:
        return out
    has_other = ~np.all(np.isnan(others), axis=0)
    with np.errstate(invalid="ignore"):
        out[has_other] = np.nanmedian(others[:, has_other], axis=0) - values[rank, has_other]
    return out


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
