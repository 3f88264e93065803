"""The launcher's exceptions: one for a job that could not start, one for a rank that failed."""


class LaunchError(RuntimeError):
    """Raised when a job cannot be started at all (no ``mpiexec``, bad settings).

    Example:

    >>> from kerashvd.launcher import LaunchError
    >>> issubclass(LaunchError, RuntimeError)
    True
    """


class RankError(RuntimeError):
    """Raised by :func:`kerashvd.run` in the caller when a rank failed.

    The message names the failing rank and holds its full formatted traceback (when the rank
    raised an exception) or its exit status (when it died without a result).

    Attributes:
        rank: the rank that failed first.
        exit_code: that rank's exit code (``128 + N`` for a rank killed by signal ``N``),
            or ``None`` when it is unknown.
        remote_traceback: the rank's formatted traceback, or ``None`` if it died without one.

    Example:

    >>> import kerashvd as hvd
    >>> def fn():
    ...     hvd.init()
    ...     if hvd.rank() == 1:
    ...         raise ValueError("bad input")
    >>> try:
    ...     hvd.run(fn, np=2)
    ... except hvd.launcher.RankError as err:
    ...     print(err.rank, "ValueError: bad input" in str(err))
    1 True
    """

    def __init__(self, message, rank=None, exit_code=None, remote_traceback=None):
        super().__init__(message)
        self.rank = rank
        self.exit_code = exit_code
        self.remote_traceback = remote_traceback
