"""Engine settings: read once at init() from KERASHVD_* variables and keyword arguments.

Each setting has one environment variable and one keyword of :func:`kerashvd.init`. Values are
validated here; an unknown ``KERASHVD_*`` variable is an error (a typo must not silently fall
back to a default).
"""

import dataclasses
import math
import os

from . import gpu_pinning, tf_threads
from ._engine import core as _core

# Variables kerashvd reads or sets itself besides the engine settings; KERASHVD_RESTART_COUNT
# is the attempt number kerashvdrun gives every rank (launcher/restarts.py), for the script;
# KERASHVD_ELASTIC, where the ranks of an elastic job reach kerashvdrun (elastic/launcher_link.py).
_OTHER_VARIABLES = {tf_threads.VARIABLE, gpu_pinning.VARIABLE, "KERASHVD_RESTART_COUNT",
                    "KERASHVD_ELASTIC"}
# String settings: variable -> init() keyword.
_PATH_SETTINGS = {"KERASHVD_TIMELINE": "timeline"}
# Hierarchical collectives (ops/core/backend/mpi/mpi_hierarchical.h): init() keyword -> its
# variable and Horovod's name for it, which is accepted too.
HIERARCHICAL_SETTINGS = {
    "hierarchical_allreduce": ("KERASHVD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE"),
    "hierarchical_allgather": ("KERASHVD_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER"),
}
_HIERARCHICAL_VALUES = {"auto": "auto", "on": "on", "1": "on", "true": "on", "yes": "on",
                        "off": "off", "0": "off", "false": "off", "no": "off"}


@dataclasses.dataclass(frozen=True)
class _Setting:
    variable: str
    field: str      # attribute of _core.Config
    unit: float     # multiply the variable's value by this to get the field's unit
    minimum: float
    doc: str


SETTINGS = {
    "fusion_threshold_bytes": _Setting(
        "KERASHVD_FUSION_THRESHOLD", "fusion_threshold_bytes", 1, 0,
        "bytes of tensors fused into one collective (default 128 MiB)"),
    "cycle_time_ms": _Setting(
        "KERASHVD_CYCLE_TIME", "cycle_time_ms", 1, 0.01,
        "sleep of the background thread between negotiation cycles while nothing is pending "
        "on this rank, in milliseconds (default 50; a submission wakes it at once)"),
    "cache_capacity": _Setting(
        "KERASHVD_CACHE_CAPACITY", "cache_capacity", 1, 0,
        "negotiated signatures remembered (default 1024; 0 disables the response cache)"),
    "stall_check_seconds": _Setting(
        "KERASHVD_STALL_CHECK_TIME", "stall_check_seconds", 1, 0,
        "seconds before a collective missing on some ranks is reported (default 60; 0: never)"),
    "stall_shutdown_seconds": _Setting(
        "KERASHVD_STALL_SHUTDOWN_TIME", "stall_shutdown_seconds", 1, 0,
        "seconds before a stalled collective fails on every rank (default 0: never)"),
    "peer_timeout_seconds": _Setting(
        "KERASHVD_PEER_TIMEOUT", "peer_timeout_seconds", 1, 2,
        "seconds without a heartbeat from a rank before it counts as frozen, which fails every "
        "rank's collectives naming it (default 30). Ranks send heartbeats every second, so it "
        "must be >= 2; dead-rank detection cannot be turned off (0 is refused): to pause a rank "
        "in a debugger, set a large value such as 86400"),
    "huge_pages": _Setting(
        "KERASHVD_HUGE_PAGES", "huge_pages", 1, 0,
        "1 (default): back large CPU buffers of collectives with transparent huge pages, which "
        "speeds MPI's shared-memory copies; 0: leave memory as TensorFlow allocated it"),
    "timeline_max_mb": _Setting(
        "KERASHVD_TIMELINE_MAX_MB", "timeline_max_bytes", 1 << 20, 0.001,
        "largest timeline file in MiB; recording stops there (default 256)"),
}


def _parse(setting, text):
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"{setting.variable} must be a number ({setting.doc}); received {text!r}") from None
    return value


def _hierarchical_mode(text, source):
    """'auto', 'on' or 'off' for a hierarchical setting's value (str, bool or None)."""
    if text is None:
        return "auto"
    if isinstance(text, bool):
        return "on" if text else "off"
    mode = _HIERARCHICAL_VALUES.get(str(text).strip().lower())
    if mode is None:
        raise ValueError(f"{source} must be 'auto' (node by node where there are several nodes "
                         f"and several ranks on a node), 'on' (1) or 'off' (0); received "
                         f"{text!r}")
    return mode


def _hierarchical(key, overrides):
    """The mode of one hierarchical setting: the keyword, else kerashvd's variable, else
    Horovod's; the two variables must agree when both are set."""
    if overrides.get(key) is not None:
        return _hierarchical_mode(overrides[key], f"{key}")
    ours, horovods = HIERARCHICAL_SETTINGS[key]
    modes = {name: _hierarchical_mode(os.environ[name], name)
             for name in (ours, horovods) if name in os.environ}
    if len(set(modes.values())) > 1:
        raise ValueError(f"{ours}={os.environ[ours]!r} and {horovods}={os.environ[horovods]!r} "
                         "disagree; set one of them")
    return next(iter(modes.values()), "auto")


def build_config(overrides):
    """Returns a validated ``_core.Config`` from the environment and ``overrides``.

    Raises:
        ValueError: for an unknown ``KERASHVD_*`` variable or keyword, or a bad value.
    """
    known = ({s.variable for s in SETTINGS.values()} | _OTHER_VARIABLES | set(_PATH_SETTINGS)
             | {ours for ours, _ in HIERARCHICAL_SETTINGS.values()})
    unknown = sorted(k for k in os.environ if k.startswith("KERASHVD_") and k not in known)
    if unknown:
        raise ValueError(
            f"Unknown kerashvd setting(s) in the environment: {', '.join(unknown)}. "
            f"Known: {', '.join(sorted(known))}.")
    tf_threads.spinning_setting()  # raises for a bad value
    keywords = set(SETTINGS) | set(_PATH_SETTINGS.values()) | set(HIERARCHICAL_SETTINGS)
    bad = sorted(set(overrides) - keywords)
    if bad:
        raise ValueError(f"init() got unknown setting(s) {bad}; known: {sorted(keywords)}")

    config = _core.Config()
    for key, setting in SETTINGS.items():
        if key in overrides and overrides[key] is not None:
            try:
                value = float(overrides[key]) * setting.unit
            except (TypeError, ValueError):
                raise ValueError(f"{key} must be a number ({setting.doc}); received "
                                 f"{key}={overrides[key]!r}") from None
            source = f"{key}={overrides[key]!r}"
        elif setting.variable in os.environ:
            value = _parse(setting, os.environ[setting.variable]) * setting.unit
            source = f"{setting.variable}={os.environ[setting.variable]!r}"
        else:
            continue
        if not math.isfinite(value):
            # inf/nan pass float() but are no value at all: say so, not ">= minimum".
            raise ValueError(f"{key} must be a finite number >= {setting.minimum:g} "
                             f"({setting.doc}); received {source}")
        if value < setting.minimum:
            raise ValueError(f"{key} must be >= {setting.minimum:g} ({setting.doc}); "
                             f"received {source}")
        current = getattr(config, setting.field)
        setattr(config, setting.field, type(current)(value))
    for key in HIERARCHICAL_SETTINGS:
        setattr(config, key, getattr(_core.Hierarchical, _hierarchical(key, overrides)))
    for variable, key in _PATH_SETTINGS.items():
        path = overrides.get(key) or os.environ.get(variable, "")
        if path:
            setattr(config, key + "_path", os.fspath(path))
    return config
