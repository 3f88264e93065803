"""Names that key collectives in the engine.

Ranks match collectives by name, so a name must come from the caller's own structure, the
same on every rank: an explicit ``name=``, or a per-kind counter advanced in call order (at
trace time inside ``tf.function``). TF graph node names are never used: they can differ
between ranks.
"""

import collections
import threading

_lock = threading.Lock()
_counters = collections.defaultdict(int)


def tensor_name(kind, name=None, process_set_id=0):
    """The key of a collective. Counters are kept per process set: each set's members call its
    collectives in the same order, but only they do."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string; received name={name!r}")
        return f"{kind}.{name}"
    with _lock:
        n = _counters[kind, process_set_id]
        _counters[kind, process_set_id] += 1
    return f"{kind}.noname.{n}"
