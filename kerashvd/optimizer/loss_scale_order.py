"""Finds a LossScaleOptimizer wrapped *around* a DistributedOptimizer, for both Keras versions.

The outer optimizer calls the wrapper's ``apply`` from one of its own methods, so one of the
calling frames holds ``self`` with ``inner_optimizer is`` the wrapper.
"""

import sys


def wrapped_by_loss_scaling(optimizer, loss_scale_class):
    """Whether a ``loss_scale_class`` instance up the call stack wraps ``optimizer``.

    Call it from the method that ``apply`` calls directly: the search starts at ``apply``'s
    caller and looks at most 40 frames up.
    """
    frame = sys._getframe(3)  # 0: here, 1: the check, 2: apply, 3: apply's caller
    for _ in range(40):
        if frame is None:
            return False
        owner = frame.f_locals.get("self")
        if (owner is not optimizer and isinstance(owner, loss_scale_class)
                and getattr(owner, "inner_optimizer", None) is optimizer):
            return True
        frame = frame.f_back
    return False
