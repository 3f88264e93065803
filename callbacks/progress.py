"""Progress output from one rank only."""

import kerashvd as hvd

__all__ = ["verbose"]


def verbose(level=1, *, all_ranks=False, root_rank=0):
    """Returns ``level`` on ``root_rank`` and 0 on the other ranks, for ``fit(verbose=...)``.

    N ranks printing N progress bars into one terminal is noise; by default only rank 0
    talks. The kerashvd callbacks that print (``verbose=`` arguments) also print on rank 0
    only.

    Args:
        level: the verbosity ``root_rank`` should use (``0``, ``1``, ``2`` or ``"auto"``).
        all_ranks: return ``level`` on every rank (for debugging one rank's progress).
        root_rank: the rank that reports.

    Returns:
        ``level`` or ``0``.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> model.fit(x, y, epochs=2, verbose=hvd.callbacks.verbose(1))  # doctest: +SKIP
    """
    if level not in (0, 1, 2, "auto"):
        raise ValueError(f"level must be 0, 1, 2 or 'auto'; received level={level!r}")
    return level if all_ranks or hvd.rank() == root_rank else 0
