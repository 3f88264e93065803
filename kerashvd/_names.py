"""Names that key collectives in the engine.

Ranks match collectives by name, so a name must come from the caller's own structure, the
same on every rank: an explicit ``name=``, or an automatic one made of the collective's kind
and a call counter advanced in call order (at trace time inside ``tf.function``). TF graph
node names are never used: they can differ between ranks.

Threads: two threads interleave their calls differently on each rank, so a counter shared
by them would pair one thread's call on rank 0 with the other thread's call on rank 1 and
silently reduce the wrong tensors together. Each thread therefore counts for itself. The
main thread's automatic names are ``<kind>.noname.<n>``; another thread's are
``<kind>.noname[<thread name>].<n>``, so such a thread must have the same name on every rank
(name the threads that issue unnamed collectives: Python's default names count every thread
the process started, which can differ between ranks). Two live threads with the same name
cannot be told apart: their unnamed collectives raise ValueError asking for ``name=``.
"""

import collections
import threading

_lock = threading.Lock()
# (thread name, or None for the main thread; kind; process set id) -> next call number.
_counters = collections.defaultdict(int)


def tensor_name(kind, name=None, process_set_id=0):
    """The key of a collective. Counters are kept per thread and per process set: each set's
    members call its collectives in the same order, but only they do.

    Raises:
        ValueError: for a bad ``name``, or an unnamed call from a thread that shares its name
            with another live thread.
    """
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string; received name={name!r}")
        return f"{kind}.{name}"
    thread = threading.current_thread()
    owner = None if thread is threading.main_thread() else thread.name
    if owner is not None:
        _check_unique(thread, kind)
    with _lock:
        key = (owner, kind, process_set_id)
        n = _counters[key]
        _counters[key] += 1
    return f"{kind}.noname.{n}" if owner is None else f"{kind}.noname[{owner}].{n}"


def _check_unique(thread, kind):
    twins = sum(1 for t in threading.enumerate() if t is not thread and t.name == thread.name)
    if twins:
        raise ValueError(
            f"Unnamed {kind} from thread {thread.name!r}, but {twins} other live thread(s) have "
            "the same name. Ranks match unnamed collectives by the calling thread's name and a "
            "call counter, and same-named threads interleave their calls differently on each "
            "rank, which would pair different tensors. Either pass name= to each collective "
            "(unique to the call and the same on every rank), or give every thread that calls "
            "collectives its own name, the same on every rank (threading.Thread(name=...)).")
