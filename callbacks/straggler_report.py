"""Name the ranks and nodes that kept the others waiting, at the end of every epoch."""

import kerashvd as hvd

from ._callback import Callback

__all__ = ["StragglerReportCallback"]


class StragglerReportCallback(Callback):
    """Runs :func:`kerashvd.straggler_report` at the end of every epoch; rank 0 prints it.

    Each epoch's report covers that epoch (the interval starts again at the start of training
    and after every report): which ranks were late to submit their collectives (compute or
    input pipeline) and which were slow to communicate, how often and for how long the others
    waited for them, and their nodes. With no slow rank it names none (see ``threshold``).
    Every rank must use it (the report is a collective); it costs one small allgather per
    epoch.

    Args:
        threshold: name a rank when the others waited for it at least this share of the
            epoch (default 0.2).
        min_fraction: ...and it was late in at least this share of the collectives (default
            0.25), so that one long pause does not name it.
        verbose: 1 (default) prints every epoch's report on rank 0; 0 prints nothing.
        print_fn: where rank 0 prints (default ``print``).

    Attributes:
        reports: the :class:`kerashvd.straggler.StragglerReport` of every epoch so far (on
            every rank).

    Example:

    >>> import kerashvd as hvd
    >>> model.fit(x, y, epochs=3, callbacks=[
    ...     hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    ...     hvd.callbacks.StragglerReportCallback(),
    ... ])  # doctest: +SKIP
    Epoch 1: kerashvd straggler report: 4 rank(s) on 2 node(s), 12 collectives in 0.6 s
      no rank kept the others waiting 20% of the time or more
    """

    def __init__(self, threshold=0.2, min_fraction=0.25, verbose=1, print_fn=print):
        super().__init__()
        if verbose not in (0, 1):
            raise ValueError(f"StragglerReportCallback(verbose=...) must be 0 or 1. "
                             f"Received: verbose={verbose!r}")
        # Checked here, so that a bad value fails at once rather than after the first epoch.
        from kerashvd.straggler import check_rules  # lazy: loads the compiled engine

        check_rules(threshold, min_fraction)
        self.threshold = threshold
        self.min_fraction = min_fraction
        self.verbose = verbose
        self.print_fn = print_fn
        self.reports = []

    def on_train_begin(self, logs=None):
        # The first epoch's report starts here, not at init() (model building, broadcasts).
        hvd.straggler_report(self.threshold, self.min_fraction)

    def on_epoch_end(self, epoch, logs=None):
        report = hvd.straggler_report(self.threshold, self.min_fraction)
        self.reports.append(report)
        if self.verbose and hvd.rank() == 0:
            self.print_fn(f"Epoch {epoch + 1}: {report}")
