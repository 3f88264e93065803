"""Engine settings: read once at init() from KERASHVD_* variables and keyword arguments.

The settings are the engine's table (``kerashvd._core.SETTINGS``, ops/core/settings.cc): each
has one :func:`kerashvd.init` keyword, one ``KERASHVD_*`` variable (some also Horovod's
``HOROVOD_*`` one) and one ``kerashvdrun`` flag, and the engine parses and checks every value
(``_core.apply_setting``). This module picks each value's source and words the errors. An
unknown ``KERASHVD_*`` variable or keyword is an error (a typo must not silently fall back to
a default).

>>> from kerashvd.runtime import config
>>> config.SETTINGS["cycle_time_ms"]["variable"]
'KERASHVD_CYCLE_TIME'
"""

import os

from . import bucket_cap, gpu_pinning, tf_threads
from ._engine import core as _core

# Variables kerashvd reads or sets itself besides the engine settings; KERASHVD_RESTART_COUNT
# is the attempt number kerashvdrun gives every rank (launcher/restarts.py), for the script;
# KERASHVD_ELASTIC, where the ranks of an elastic job reach kerashvdrun (elastic/launcher_link.py);
# KERASHVD_MAX_REQUEUES, how often the SLURM templates (recipes/slurm/) requeue a job, which a
# job's ranks inherit from its environment; KERASHVD_BUCKET_CAP_MB, the gradient bucket cap
# (bucket_cap.py), read by the optimizers.
_OTHER_VARIABLES = {tf_threads.VARIABLE, gpu_pinning.VARIABLE, bucket_cap.VARIABLE,
                    "KERASHVD_RESTART_COUNT", "KERASHVD_ELASTIC", "KERASHVD_MAX_REQUEUES"}

# init() keyword -> the engine's row for it: variable, horovod_variable, flag, kind, minimum,
# unit, help, default, expected (what a value must be), ...
SETTINGS = {row["key"]: row for row in _core.SETTINGS}


def describe(row):
    """``row``'s help with its unit and default, as errors and docs show it."""
    unit = f"in {row['unit']}; " if row["unit"] else ""
    default = row["default"] or "none"
    return f"{unit}{row['help']}; default {default}"


def _keyword_text(row, value):
    """An init() keyword's value as the variable would spell it (True -> "1" or "on")."""
    if isinstance(value, bool):
        return row.get("on", "1") if value else row.get("off", "0")
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)  # also for numpy's numbers, whose repr() is "np.float64(2.5)"


def _apply(config, row, name, text, received):
    """Stores ``text`` in ``config``; raises ValueError naming ``name`` and ``received``."""
    expected = _core.apply_setting(config, row["key"], text)
    if expected is not None:
        raise ValueError(f"{name} must be {expected} ({describe(row)}); received {received}")


def _from_environment(row):
    """(variable, text) of the setting's variable, else Horovod's, else (None, None). The two
    variables must agree when both are set."""
    names = [n for n in (row["variable"], row["horovod_variable"]) if n and n in os.environ]
    values = {}
    for name in names:
        scratch = _core.Config()
        _apply(scratch, row, name, os.environ[name], repr(os.environ[name]))
        values[name] = _core.setting_text(scratch, row["key"])
    if len(set(values.values())) > 1:
        ours, horovods = names
        raise ValueError(f"{ours}={os.environ[ours]!r} and {horovods}={os.environ[horovods]!r} "
                         "disagree; set one of them")
    return (names[0], os.environ[names[0]]) if names else (None, None)


def build_config(overrides):
    """Returns a validated ``_core.Config`` from the environment and ``overrides``.

    Args:
        overrides: init()'s keyword arguments; None stands for "not given".

    Raises:
        ValueError: for an unknown ``KERASHVD_*`` variable or keyword, or a bad value.
    """
    known = {row["variable"] for row in SETTINGS.values()} | _OTHER_VARIABLES
    unknown = sorted(k for k in os.environ if k.startswith("KERASHVD_") and k not in known)
    if unknown:
        raise ValueError(
            f"Unknown kerashvd setting(s) in the environment: {', '.join(unknown)}. "
            f"Known: {', '.join(sorted(known))}.")
    tf_threads.spinning_setting()  # raises for a bad value
    bucket_cap.check_environment()  # likewise
    bad = sorted(set(overrides) - set(SETTINGS))
    if bad:
        raise ValueError(f"init() got unknown setting(s) {bad}; known: {sorted(SETTINGS)}")

    config = _core.Config()
    for key, row in SETTINGS.items():
        if overrides.get(key) is not None:
            value = overrides[key]
            _apply(config, row, key, _keyword_text(row, value), repr(value))
            continue
        name, text = _from_environment(row)
        if name is not None:
            _apply(config, row, name, text, repr(text))
    return config
