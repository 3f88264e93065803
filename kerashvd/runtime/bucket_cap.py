"""The gradient bucket cap: how many MiB of gradients one collective of the optimizer carries.

``DistributedOptimizer`` and ``DistributedGradientTape`` reduce gradients in buckets, each one
collective that starts as soon as backprop has produced its gradients (see
``kerashvd/training/optimizer/buckets.py``). The cap is a Python-side setting (the engine never
sees it), given by, in this order of precedence:

- the ``bucket_cap_mb=`` keyword of ``DistributedOptimizer`` / ``DistributedGradientTape``;
- the variable ``KERASHVD_BUCKET_CAP_MB`` (``kerashvdrun --bucket-cap-mb`` sets it in every
  rank), checked by ``kerashvd.init()`` like every ``KERASHVD_*`` variable;
- the default, :data:`DEFAULT_MB`.

A value is a number of MiB >= 0 (fractions allowed); 0 means no cap: one collective per
dtype for all gradients, which starts only once the last gradient exists.

>>> from kerashvd.runtime import bucket_cap
>>> bucket_cap.cap_bytes(0.5)
524288
"""

import math
import numbers
import os

VARIABLE = "KERASHVD_BUCKET_CAP_MB"
FLAG = "--bucket-cap-mb"
DEFAULT_MB = 1.0
HELP = ("MiB of gradients per collective of DistributedOptimizer and DistributedGradientTape: "
        "buckets of consecutive gradients, in the order backprop produces them, each reduced "
        "as soon as its gradients exist; 0: one collective for all gradients")
EXPECTED = "a number of MiB >= 0"


def parse(text):
    """Returns the MiB in ``text`` (a variable's or flag's value).

    Raises:
        ValueError: naming what was expected, for anything but a finite number >= 0.
    """
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{EXPECTED} ({HELP}; default {DEFAULT_MB:g})")
    return value


def check_environment(environ=None):
    """Raises ValueError, naming the variable, when ``KERASHVD_BUCKET_CAP_MB`` is set wrong."""
    text = (os.environ if environ is None else environ).get(VARIABLE)
    if text is None:
        return
    try:
        parse(text)
    except ValueError as err:
        raise ValueError(f"{VARIABLE} must be {err}; received {text!r}") from None


def cap_bytes(bucket_cap_mb=None, environ=None):
    """The cap in bytes: ``bucket_cap_mb`` if given, else the variable, else the default.

    Args:
        bucket_cap_mb: the keyword's value (MiB), or None.
        environ: the environment to read (default ``os.environ``).

    Returns:
        An int >= 0; 0 means no cap.

    Raises:
        ValueError: for a bad keyword or variable value, naming it.
    """
    if bucket_cap_mb is None:
        check_environment(environ)
        text = (os.environ if environ is None else environ).get(VARIABLE)
        megabytes = DEFAULT_MB if text is None else parse(text)
    else:
        try:
            if isinstance(bucket_cap_mb, (bool, str)) or not isinstance(bucket_cap_mb,
                                                                       numbers.Real):
                raise ValueError(f"{EXPECTED} ({HELP}; default {DEFAULT_MB:g})")
            megabytes = parse(bucket_cap_mb)
        except ValueError as err:
            raise ValueError(f"bucket_cap_mb must be {err}; received "
                             f"bucket_cap_mb={bucket_cap_mb!r}") from None
    return int(round(megabytes * (1 << 20)))
