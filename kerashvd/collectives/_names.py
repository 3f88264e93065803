"""Names that key collectives in the engine.

Ranks match collectives by name, so a name must come from the caller's own structure, the
same on every rank: an explicit ``name=``, or an automatic one made of a call counter
advanced in call order (at trace time inside ``tf.function``). TF graph node names are never
used: they can differ between ranks.

The key holds no collective kind: an explicit ``name=`` is the key itself, and unnamed calls
of every kind share one counter (``noname.<n>``). So when ranks disagree on which collective a
name (or the n-th unnamed call) is, say an allreduce on one rank and an allgather on another,
their requests meet in the engine, which raises the mismatch on every rank naming both kinds,
as Horovod does; a kind in the key would have kept them apart, each waiting for ever.

Threads: two threads interleave their calls differently on each rank, so a counter shared
by them would pair one thread's call on rank 0 with the other thread's call on rank 1 and
silently reduce the wrong tensors together. Each thread therefore counts for itself. The
main thread's automatic names are ``noname.<n>``; another thread's are
``noname[<thread name>].<n>``, so such a thread must do the same work under the same
name on every rank. Where that cannot be known, an unnamed collective raises ValueError
asking for ``name=``, on every rank alike (each rank makes the same call from the same kind of
thread), instead of pairing different calls:
- from a thread pool's worker (``concurrent.futures.ThreadPoolExecutor``,
  ``multiprocessing.pool.ThreadPool``): a pool hands its tasks to its threads in a different
  order on each rank, whatever the threads are called;
- from a thread with Python's default name (``Thread-N``, ``Thread-N (target)``, or
  ``Dummy-N`` for a thread not started by ``threading``): N counts the threads the process
  started, so it names different threads on ranks that started them in another order;
- from one of two live threads with the same name: they cannot be told apart.
"""

import collections
import concurrent.futures.thread
import multiprocessing.pool
import os
import re
import sys
import threading

_lock = threading.Lock()
# (thread name, or None for the main thread; process set id) -> next call number.
_counters = collections.defaultdict(int)


def tensor_name(kind, name=None, process_set_id=0):
    """The key of a collective of ``kind`` (named in errors only). Counters are kept per
    thread and per process set: each set's members call its collectives in the same order,
    but only they do.

    Raises:
        ValueError: for a bad ``name``, or an unnamed call from a thread that shares its name
            with another live thread.
    """
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string; received name={name!r}")
        return name
    thread = threading.current_thread()
    owner = None if thread is threading.main_thread() else thread.name
    if owner is not None:
        _check_thread(thread, kind)
        _check_unique(thread, kind)
    with _lock:
        key = (owner, process_set_id)
        n = _counters[key]
        _counters[key] += 1
    return f"noname.{n}" if owner is None else f"noname[{owner}].{n}"


def derived(key, part):
    """The key of a collective that belongs to the one keyed ``key`` (its gradient, the
    size and data steps of an object broadcast): ``<key>.<part>``."""
    return f"{key}.{part}"


# Python's own names for threads it names: Thread-N, Thread-N (target), Dummy-N.
_DEFAULT_NAME = re.compile(r"(?:Thread|Dummy)-\d+(?: \(.*\))?")
_POOL_MODULES = {os.path.realpath(m.__file__) for m in (concurrent.futures.thread,
                                                        multiprocessing.pool)}
_THREADING = os.path.realpath(threading.__file__)
_pool_worker = threading.local()  # .value: whether this thread is a pool's worker (cached)


def _is_pool_worker():
    """Whether the calling thread's target (its outermost frame outside threading.py) is a
    thread pool's worker loop. The same for the thread's whole life, so cached per thread."""
    known = getattr(_pool_worker, "value", None)
    if known is None:
        frame, target = sys._getframe(1), None
        while frame is not None:
            if os.path.realpath(frame.f_code.co_filename) != _THREADING:
                target = frame
            frame = frame.f_back
        known = target is not None and os.path.realpath(target.f_code.co_filename) in _POOL_MODULES
        _pool_worker.value = known
    return known


def _check_thread(thread, kind):
    if _is_pool_worker():
        why = (f"thread {thread.name!r} is a worker of a thread pool. A pool hands its tasks "
               "to its threads in a different order on each rank")
    elif _DEFAULT_NAME.fullmatch(thread.name):
        why = (f"thread {thread.name!r} has Python's default name. Its number counts the "
               "threads this process started, so it can name a thread doing other work on "
               "another rank")
    else:
        return
    raise ValueError(
        f"Unnamed {kind} from a thread other than the main one, but {why}: ranks would pair "
        "different calls and silently combine the wrong tensors. Pass name= to each collective "
        "(unique to the call and the same on every rank, e.g. name=f'item.{i}' for task i), "
        "or issue unnamed collectives only from threads you start and name yourself, the same "
        "on every rank (threading.Thread(name=...)).")


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
