"""Reduction operators for allreduce and reducescatter (``kerashvd.Average`` etc.).

``Min`` and ``Max`` of floats propagate NaN as numpy's ``np.minimum``/``np.maximum`` do: an
element that is NaN on any rank is NaN on every rank. They also order -0.0 below +0.0 (Max
of -0.0 and +0.0 is +0.0, Min is -0.0), so every rank gets the same bits, whatever order the
ranks' values are combined in. float16 and bfloat16 Min and Max are taken in float32 (the
same values) and follow the same rule; their Sum and Product are computed in their own type,
each step rounded to it. Integer Min and Max are exact.

The names and numbers are the engine's (``kerashvd._core.REDUCE_OPS``, from
ops/core/types.cc): ``Average``, ``Sum``, ``Min``, ``Max``, ``Product``, and ``Adasum``,
Horovod's adaptive summation. ``Adasum`` is defined so that scripts which name it still import
and run; kerashvd does not implement it, and every collective refuses it with
NotImplementedError (Horovod's type for an operation it lacks).
"""

from ..runtime._engine import core as _core

_VALUES = {row["name"]: row["value"] for row in _core.REDUCE_OPS}
Average = _VALUES["Average"]
"""``op=`` of the mean over the ranks (the sum divided by the set's size): the default."""
Sum = _VALUES["Sum"]
"""``op=`` of the element-wise sum over the ranks."""
Min = _VALUES["Min"]
"""``op=`` of the element-wise minimum (allreduce only); NaN on any rank gives NaN, and -0.0
is below +0.0."""
Max = _VALUES["Max"]
"""``op=`` of the element-wise maximum (allreduce only); NaN on any rank gives NaN, and +0.0
is above -0.0."""
Product = _VALUES["Product"]
"""``op=`` of the element-wise product over the ranks (allreduce only)."""
Adasum = _VALUES["Adasum"]
"""Horovod's adaptive summation, not implemented: every collective given it raises
NotImplementedError. Defined so that scripts which name it import."""

_NAMES = {row["value"]: row["name"] for row in _core.REDUCE_OPS if row["implemented"]}
# The ops reducescatter takes as well as allreduce.
SCATTER_OPS = tuple(row["value"] for row in _core.REDUCE_OPS if row["scatter"])
_ADASUM_MESSAGE = ("kerashvd does not implement Adasum (Horovod's adaptive summation); use "
                   "op=kerashvd.Average, with the learning rate scaled by size(), or "
                   "op=kerashvd.Sum")


def resolve_op(op, average, allowed=tuple(_NAMES)):
    """Returns the reduce op from Horovod-style ``op`` / deprecated ``average`` arguments."""
    if op is not None and average is not None:
        raise ValueError("Pass either op= or the deprecated average=, not both; received "
                         f"op={op!r}, average={average!r}")
    if op is None:
        op = Sum if average is False else Average
    check_not_adasum(op)
    if op not in allowed:
        names = ", ".join(f"kerashvd.{_NAMES[a]}" for a in allowed)
        raise ValueError(f"op must be one of {names}; received op={op!r}")
    return op


def op_name(op):
    return _NAMES.get(op, "Adasum" if op == Adasum else repr(op))


def check_not_adasum(op):
    """Raises the Adasum NotImplementedError for ``op=Adasum`` (for APIs that validate ``op`` themselves)."""
    if op == Adasum and not isinstance(op, bool):
        raise NotImplementedError(_ADASUM_MESSAGE)
