"""Exit statuses as ``subprocess`` reports them (negative for a signal), in words and as codes."""

import signal


def shell_code(returncode):
    """Returns the code a shell would show: ``returncode``, or ``128 + N`` for signal ``N``.

    Args:
        returncode: a ``subprocess`` return code; ``-N`` means killed by signal ``N``.

    Returns:
        An int in ``[0, 255]`` for ordinary codes.

    Example:

    >>> shell_code(7), shell_code(-9)
    (7, 137)
    """
    return 128 - returncode if returncode < 0 else returncode


def describe(returncode):
    """Returns ``returncode`` in words: "exited with code 7", "was killed by signal 9 (SIGKILL)".

    Args:
        returncode: a ``subprocess`` return code; ``-N`` means killed by signal ``N``.

    Returns:
        A phrase to follow a subject ("rank 1 ...").

    Example:

    >>> describe(-9)
    'was killed by signal 9 (SIGKILL)'
    """
    if returncode >= 0:
        return f"exited with code {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "unknown signal"
    return f"was killed by signal {number} ({name})"
