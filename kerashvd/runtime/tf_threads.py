"""TensorFlow's thread pools stop spinning when several ranks share a host.

TensorFlow's inter-op and intra-op thread pools spin for a while when they run out of work,
looking for more, before they sleep. With one process per machine that trades idle CPU for
latency. With several ranks on one host, the spinning threads of one rank take the cores
that the other ranks (and kerashvd's engine thread) need: on 2 ranks sharing 2 cores, a
chain of small allreduces ran at 88 us per collective with spinning and 37 us without, and
a trivial ``tf.function`` call took 307 us against 248 us.

So, when ``local_size() > 1``, kerashvd sets TensorFlow's
``ConfigProto.experimental.disable_thread_spinning`` (TensorFlow has no public setter; the
option takes effect only before TensorFlow runs its first op). It is applied at ``init()``
when TensorFlow is already imported, else when kerashvd's TensorFlow ops load. If TensorFlow
has run an op by then, its pools keep their setting: call ``kerashvd.init()`` early, as
Horovod's examples do. ``KERASHVD_TF_THREAD_SPINNING=1`` keeps TensorFlow's spinning (the
default for a single rank per host); ``0`` turns it off whatever the rank count.
"""

import os
import sys

from .. import _private_api

VARIABLE = "KERASHVD_TF_THREAD_SPINNING"


def spinning_setting():
    """The user's choice: True (spin), False (do not spin) or None (kerashvd decides)."""
    text = os.environ.get(VARIABLE)
    if text is None or text == "":
        return None
    if text not in ("0", "1"):
        raise ValueError(f"{VARIABLE} must be 0 (TensorFlow's thread pools do not spin) or 1 "
                         f"(they spin, TensorFlow's default); received {text!r}")
    return text == "1"


def apply(local_size):
    """Turns spinning off in TensorFlow's pools when they are not created yet and it is wanted.

    Returns True when the option was set, False when it was not wanted or too late, and
    None when TensorFlow is not imported yet (the ops' loader calls again later).
    """
    wanted = spinning_setting()
    if wanted is None:
        wanted = local_size <= 1
    if wanted:
        return False
    if "tensorflow" not in sys.modules:
        return None
    # TensorFlow internals (no public setter): see kerashvd/_private_api.py.
    if _private_api.eager_context_started():
        return False  # TensorFlow's pools exist already
    config = _private_api.eager_context_config()
    config.experimental.disable_thread_spinning = True
    _private_api.set_eager_context_config(config)
    return True


def spinning_disabled():
    """Whether TensorFlow's context in this process was configured without spinning."""
    return bool(_private_api.eager_context_config().experimental.disable_thread_spinning)
