"""kerashvdrun's setting flags and the ``KERASHVD_*`` variables they become in every rank.

There is one flag per engine setting of the engine's table (``kerashvd._core.SETTINGS``,
ops/core/settings.cc), which also gives its help, unit and default; :func:`kerashvd.init` reads
the variable (``kerashvd/runtime/config.py``). Values are checked by the engine's own rule
(``_core.flag_to_variable``), so that a typo fails before any process starts. ``_core`` is a
small module that loads neither TensorFlow nor a running MPI.

One setting is Python's, not the engine's: ``--bucket-cap-mb`` (``KERASHVD_BUCKET_CAP_MB``,
the optimizers' gradient buckets; ``kerashvd/runtime/bucket_cap.py``), checked by that
module's rule.
"""

import argparse

from ..runtime import bucket_cap
from ..runtime._engine import core as _core


def _dest(row):
    return row["flag"].lstrip("-").replace("-", "_")


def _is_switch(row):
    return "on" in row  # --NAME sets "on", --no-NAME "off"


def _flag_default(row):
    if not row["default"]:
        return "none"
    if row["flag_scale"] == 1:
        return row["default"]
    return f"{float(row['default']) / row['flag_scale']:g}"


def _help(row):
    if _is_switch(row):
        name = row["flag"].lstrip("-")
        return (f"{row['help']}. --{name}: {row['on']}, --no-{name}: {row['off']}; neither: "
                f"default {row['default']}. Sets {row['variable']}.")
    unit = f"in {row['flag_unit']}; " if row["flag_unit"] else ""
    sets = f"Sets {row['variable']}"
    if row["flag_scale"] != 1:
        sets += f", in {row['unit']}"
    return f"{row['help']} ({unit}default {_flag_default(row)}). {sets}."


def _metavar(row):
    return (row["flag_unit"] or ("PATH" if row["kind"] == "path" else "N")).upper()


def _flag_type(row):
    """argparse type of ``row``'s flag: returns the variable's text for the flag's value."""

    def convert(text):
        value, expected = _core.flag_to_variable(row["key"], text)
        if expected is not None:
            raise argparse.ArgumentTypeError(f"expected {expected}, received {text!r}")
        return value

    return convert


def add_engine_flags(parser):
    """Adds a flag for every engine setting to ``parser`` (an argument group is fine).

    Example:

    >>> parser = argparse.ArgumentParser()
    >>> add_engine_flags(parser)
    >>> engine_environment(parser.parse_args(["--cycle-time-ms", "5"]))
    {'KERASHVD_CYCLE_TIME': '5'}
    """
    for row in _core.SETTINGS:
        if _is_switch(row):
            parser.add_argument(row["flag"], dest=_dest(row),
                                action=argparse.BooleanOptionalAction, help=_help(row))
        else:
            parser.add_argument(row["flag"], dest=_dest(row), type=_flag_type(row),
                                metavar=_metavar(row), help=_help(row))
    parser.add_argument(bucket_cap.FLAG, dest="bucket_cap_mb", type=_bucket_cap, metavar="MIB",
                        help=f"{bucket_cap.HELP} (in MiB; default {bucket_cap.DEFAULT_MB:g}). "
                             f"Sets {bucket_cap.VARIABLE}.")


def _bucket_cap(text):
    try:
        bucket_cap.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected {bucket_cap.EXPECTED}, received "
                                         f"{text!r}") from err
    return text


def engine_environment(namespace):
    """Returns ``{variable: value}`` for the engine flags set in an argparse ``namespace``.

    Args:
        namespace: the result of ``parse_args`` on a parser given :func:`add_engine_flags`.

    Returns:
        A dict of ``KERASHVD_*`` names to string values, only for flags that were given.
    """
    env = {}
    for row in _core.SETTINGS:
        value = getattr(namespace, _dest(row), None)
        if value is None:
            continue
        if _is_switch(row):
            value = row["on"] if value else row["off"]
        env[row["variable"]] = value
    if getattr(namespace, "bucket_cap_mb", None) is not None:
        env[bucket_cap.VARIABLE] = namespace.bucket_cap_mb
    return env
