"""Reduction operators for allreduce and reducescatter (``kerashvd.Average`` etc.)."""

Average = 0
Sum = 1
Min = 2
Max = 3
Product = 4

_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}


def resolve_op(op, average, allowed=tuple(_NAMES)):
    """Returns the reduce op from Horovod-style ``op`` / deprecated ``average`` arguments."""
    if op is not None and average is not None:
        raise ValueError("Pass either op= or the deprecated average=, not both; received "
                         f"op={op!r}, average={average!r}")
    if op is None:
        op = Sum if average is False else Average
    if op not in allowed:
        names = ", ".join(f"kerashvd.{_NAMES[a]}" for a in allowed)
        raise ValueError(f"op must be one of {names}; received op={op!r}")
    return op


def op_name(op):
    return _NAMES.get(op, repr(op))
