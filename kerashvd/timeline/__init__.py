"""Timeline: a Chrome-trace record of where each collective's time goes.

Start it with ``KERASHVD_TIMELINE=path.json`` (from ``init()`` on) or
``kerashvd.start_timeline(path)``; open the file in https://ui.perfetto.dev or
chrome://tracing. Each tensor gets a row with its phases (NEGOTIATE, and inside it LAST_CYCLE,
the round trip of the negotiation that found it ready; QUEUE, MEMCPY_IN_FUSION_BUFFER,
ALLREDUCE or the other collective, MEMCPY_OUT_FUSION_BUFFER, COMPLETE: its op's completion);
row 0 shows the engine's working cycles (CYCLE) and its negotiations with work pending
(NEGOTIATION, with the polls and naps of their waits). The file is valid JSON at all times, also after a crash.

``python -m kerashvd.timeline path.json`` prints a table of time per phase.
"""

import collections
import json
import sys

from ..runtime._engine import core as _core, require_init as _require_init
from ..runtime.config import SETTINGS

# The engine's default for KERASHVD_TIMELINE_MAX_MB (ops/core/config.h).
DEFAULT_MAX_MB = float(SETTINGS["timeline_max_mb"]["default"])


def start_timeline(path, max_mb=DEFAULT_MAX_MB):
    """Starts writing a timeline to ``path`` (replacing a running one).

    Only rank 0 writes, unless ``path`` contains ``{rank}``, which each rank replaces with its
    number to write its own file.

    Args:
        path: the JSON file to write.
        max_mb: recording stops when the file reaches this size (MiB).

    Raises:
        ValueError: when the file cannot be opened.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.start_timeline("/tmp/timeline.json"); hvd.allreduce(tf.ones([4])); hvd.stop_timeline()
    """
    _require_init()
    if max_mb <= 0:
        raise ValueError(f"max_mb must be > 0; received max_mb={max_mb!r}")
    _core.start_timeline(str(path), int(max_mb * (1 << 20)))


def stop_timeline():
    """Stops the timeline and closes its file (a no-op when none is running)."""
    _core.stop_timeline()


def load(path):
    """Returns the list of events of a timeline file."""
    with open(path) as f:
        return json.load(f)


def phase_totals(events):
    """Returns {phase: (count, total microseconds)} over the complete ("X") events."""
    totals = collections.defaultdict(lambda: [0, 0])
    for e in events:
        if e.get("ph") == "X":
            totals[e["name"]][0] += 1
            totals[e["name"]][1] += e.get("dur", 0)
    return {k: tuple(v) for k, v in totals.items()}


def summarize(path, out=sys.stdout):
    """Prints time per phase, largest first, for a timeline file."""
    totals = phase_totals(load(path))
    # Row 0's events and LAST_CYCLE (inside NEGOTIATE) would count time twice.
    apart = ("CYCLE", "NEGOTIATION", "LAST_CYCLE")
    grand = sum(t for name, (_, t) in totals.items() if name not in apart) or 1
    print(f"{'phase':<26} {'events':>8} {'total ms':>10} {'share':>7}", file=out)
    for name, (count, total) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        share = "" if name in apart else f"{100.0 * total / grand:6.1f}%"
        print(f"{name:<26} {count:>8} {total / 1000:>10.3f} {share:>7}", file=out)

