"""kerashvdrun's engine flags and the ``KERASHVD_*`` variables they become in every rank.

Each flag maps to one variable that :func:`kerashvd.init` reads (see ``kerashvd/config.py``);
values are checked here so that a typo fails before any process starts.
"""

import argparse
import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class EngineFlag:
    """One command-line flag that sets one ``KERASHVD_*`` variable."""

    flag: str
    variable: str
    kind: type       # float, int or str
    minimum: float   # ignored for str
    scale: float     # variable value = flag value * scale
    help: str
    switch: bool = False  # a flag without value: --NAME sets "on", --no-NAME "off"

    @property
    def dest(self):
        return self.flag.lstrip("-").replace("-", "_")


ENGINE_FLAGS = (
    EngineFlag("--fusion-threshold-mb", "KERASHVD_FUSION_THRESHOLD", float, 0, 1024 * 1024,
               "MiB of tensors fused into one collective (default 128; 0 disables fusion). "
               "Sets KERASHVD_FUSION_THRESHOLD, in bytes."),
    EngineFlag("--cycle-time-ms", "KERASHVD_CYCLE_TIME", float, 0.01, 1,
               "sleep of the engine's background thread between negotiation cycles while "
               "nothing is pending on this rank, in ms (default 50; a submission wakes it at "
               "once). Sets KERASHVD_CYCLE_TIME."),
    EngineFlag("--cache-capacity", "KERASHVD_CACHE_CAPACITY", int, 0, 1,
               "negotiated tensor signatures remembered (default 1024; 0 disables the response "
               "cache). Sets KERASHVD_CACHE_CAPACITY."),
    EngineFlag("--stall-check-time", "KERASHVD_STALL_CHECK_TIME", float, 0, 1,
               "seconds before a collective missing on some ranks is reported (default 60; "
               "0: never). Sets KERASHVD_STALL_CHECK_TIME."),
    EngineFlag("--stall-shutdown-time", "KERASHVD_STALL_SHUTDOWN_TIME", float, 0, 1,
               "seconds before a stalled collective fails on every rank (default 0: never). "
               "Sets KERASHVD_STALL_SHUTDOWN_TIME."),
    EngineFlag("--peer-timeout", "KERASHVD_PEER_TIMEOUT", float, 2, 1,
               "seconds without a heartbeat from a rank before it counts as frozen and every "
               "rank's collectives fail naming it (default 30; at least 2, as heartbeats come "
               "every second; it cannot be turned off: use e.g. 86400 to pause a rank in a "
               "debugger). Sets KERASHVD_PEER_TIMEOUT."),
    EngineFlag("--hierarchical-allreduce", "KERASHVD_HIERARCHICAL_ALLREDUCE", str, 0, 1,
               "allreduce node by node wherever the layout allows it: within each node over "
               "shared memory, across nodes once per node (horovodrun's flag); "
               "--no-hierarchical-allreduce: never. Without either, where there are several "
               "nodes and a node runs several ranks. Sets KERASHVD_HIERARCHICAL_ALLREDUCE.",
               switch=True),
    EngineFlag("--hierarchical-allgather", "KERASHVD_HIERARCHICAL_ALLGATHER", str, 0, 1,
               "allgather node by node, likewise (horovodrun's flag); "
               "--no-hierarchical-allgather: never. Sets KERASHVD_HIERARCHICAL_ALLGATHER.",
               switch=True),
    EngineFlag("--timeline-filename", "KERASHVD_TIMELINE", str, 0, 1,
               "path of the Chrome-trace timeline of the collectives, written by rank 0 (by every "
               "rank if the path contains {rank}). Sets KERASHVD_TIMELINE."),
)


def _number_type(flag):
    def convert(text):
        try:
            value = flag.kind(text)
        except ValueError:
            kind = "an integer" if flag.kind is int else "a number"
            raise argparse.ArgumentTypeError(
                f"expected {kind} >= {flag.minimum:g}, received {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(
                f"expected a finite number >= {flag.minimum:g}, received {text!r}")
        if value < flag.minimum:
            raise argparse.ArgumentTypeError(
                f"expected a value >= {flag.minimum:g}, received {text!r}")
        return value
    return convert


def add_engine_flags(parser):
    """Adds every flag of :data:`ENGINE_FLAGS` to ``parser`` (an argument group is fine).

    Example:

    >>> parser = argparse.ArgumentParser()
    >>> add_engine_flags(parser)
    >>> engine_environment(parser.parse_args(["--cycle-time-ms", "5"]))
    {'KERASHVD_CYCLE_TIME': '5'}
    """
    for flag in ENGINE_FLAGS:
        if flag.switch:
            parser.add_argument(flag.flag, dest=flag.dest, action=argparse.BooleanOptionalAction,
                                help=flag.help)
            continue
        convert = str if flag.kind is str else _number_type(flag)
        metavar = "PATH" if flag.kind is str else flag.kind.__name__.upper()
        parser.add_argument(flag.flag, dest=flag.dest, type=convert, metavar=metavar,
                            help=flag.help)


def _format(value):
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def engine_environment(namespace):
    """Returns ``{variable: value}`` for the engine flags set in an argparse ``namespace``.

    Args:
        namespace: the result of ``parse_args`` on a parser given :func:`add_engine_flags`.

    Returns:
        A dict of ``KERASHVD_*`` names to string values, only for flags that were given.
    """
    env = {}
    for flag in ENGINE_FLAGS:
        value = getattr(namespace, flag.dest, None)
        if value is None:
            continue
        if flag.switch:
            value = "on" if value else "off"
        elif flag.kind is not str and flag.scale != 1:
            value = int(round(value * flag.scale))
        env[flag.variable] = _format(value)
    return env
