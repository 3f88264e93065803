"""The error of a collective called with a wrong argument.

Bad alltoall splits and a call from outside the process set raise :class:`InvalidArgumentError`,
which is both ``tf.errors.InvalidArgumentError`` (the type Horovod raises for them, and the type
the other ranks and the kernels raise for the same mistake) and ``ValueError`` (so that handlers
written for a ``ValueError`` catch it too). It lives in the runtime because the runtime's
process-set check raises it for every collective; ``kerashvd.collectives._local_errors``
explains how such an error reaches the other ranks.

Importing this module imports TensorFlow.
"""

import tensorflow as tf


class InvalidArgumentError(tf.errors.InvalidArgumentError, ValueError):
    """A collective's argument is wrong: ``tf.errors.InvalidArgumentError`` as in Horovod, and
    a ``ValueError`` for code that catches that.

    Args:
        message: what was expected, what was received, and how to fix it.

    Example:

    >>> from kerashvd.runtime.invalid_argument import InvalidArgumentError
    >>> issubclass(InvalidArgumentError, ValueError)
    True
    """

    def __init__(self, message):
        super().__init__(None, None, message)
        self.args = (message,)

    def __reduce__(self):
        return type(self), (self.message,)
