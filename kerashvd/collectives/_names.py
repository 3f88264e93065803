"""Names that key collectives in the engine.

Ranks match collectives by name, so a name must come from the caller's own structure, the
same on every rank: an explicit ``name=``, or an automatic one. TF graph node names are
never used: they can differ between ranks.

Automatic names (for collectives called without ``name=``):
- Inside a ``tf.function``: the function being traced and the call's place in that trace,
  ``<function>.noname.<k>``, k counting the unnamed collectives of one trace (and process
  set), branches and loop bodies included. A retrace (a partial last batch changes the input
  shape on one rank only) gives the same names, whatever else this rank traced or ran
  eagerly, and so does a nested function's trace. ``<function>`` is the Python function's
  ``__name__``, so functions of one name (methods of several instances, two ``tf.function``
  wrappers of one function) share names: fine one after the other, an error on every rank
  if their calls overlap (below).
- Eagerly: a call counter, advanced in call order, ``noname.<n>``. ``join()`` restarts the
  counters on every rank: a rank inside ``join()`` skips the unnamed calls the others make
  meanwhile (it contributes the identity to them in the engine), so counting on would put the
  ranks out of step; after the e-th join the names are ``noname.j<e>.<n>``.

The key holds no collective kind: unnamed calls of every kind share one counter. So when
ranks disagree on which collective a name (or the n-th unnamed call) is, say an allreduce on
one rank and an allgather on another, their requests meet in the engine, which raises the
mismatch on every rank naming both kinds, as Horovod does; a kind in the key would have kept
them apart, each waiting for ever.

Threads: two threads interleave their calls differently on each rank, so a counter shared
by them would pair one thread's call on rank 0 with the other thread's call on rank 1 and
silently reduce the wrong tensors together. So the calling thread is part of every automatic
name, and every rank pairs a thread's calls with the same thread's calls:
- eagerly, each thread counts for itself, and a thread other than the main one adds its name:
  ``noname[<thread>].<n>``;
- in a ``tf.function``, the trace is shared by every thread that calls the function, so the
  thread is added when the function runs: each unnamed collective of the trace has a
  ``thread`` input that the function computes at each call, in the calling thread
  (:func:`thread_input`), and the op appends it to its key: ``<function>.noname.<k>`` from the
  main thread, ``<function>.noname.<k>[<thread>]`` from another (ops/tf/adapter.h). The
  collectives derived from an unnamed one (gradients, sparse parts) carry the same input.
  One traced function called from several threads, one after the other or at once, thus
  pairs each thread's calls with that thread's calls on the other ranks.
Such a thread must do the same work under the same name on every rank. Where that cannot be
known, an unnamed collective raises ValueError asking for ``name=``, on every rank alike (each
rank makes the same call from the same kind of thread), instead of pairing different calls:
- from a thread pool's worker (``concurrent.futures.ThreadPoolExecutor``,
  ``multiprocessing.pool.ThreadPool``): a pool hands its tasks to its threads in a different
  order on each rank, whatever the threads are called;
- from a thread with Python's default name (``Thread-N``, ``Thread-N (target)``, or
  ``Dummy-N`` for a thread not started by ``threading``): N counts the threads the process
  started, so it names different threads on ranks that started them in another order;
- from one of two live threads with the same name: they cannot be told apart.
A traced function raises it when it is called from such a thread, not when it is traced.

Explicit names are the caller's: ``name=`` is the key whatever the thread, so the same
explicit name used by two threads at once cannot be paired safely; the engine fails those
calls on every rank (ops/core/controller.h, "Overlapping calls"). Calls of one explicit name
that never overlap are paired in each rank's order: threads sharing a name may order them
differently on each rank, which nothing can detect, so they must not.
"""

import collections
import concurrent.futures.thread
import multiprocessing.pool
import os
import re
import sys
import threading
import weakref

from .. import _private_api

_lock = threading.Lock()
# (thread name, or None for the main thread; process set id) -> next eager call number.
_counters = collections.defaultdict(int)
_joins = 0  # join() calls so far: the epoch of the eager counters
# A traced function's graph -> {process set id: next unnamed call number in this trace}.
_traces = weakref.WeakKeyDictionary()
# A traced function's graph -> the unnamed keys of its trace (their collectives, and those
# derived from them, take the calling thread as an input).
_unnamed = weakref.WeakKeyDictionary()
_THREAD_KEY = "kerashvd.calling_thread"  # the call-time capture's key in a function graph


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
    traced = _private_api.traced_function()
    if traced is not None:  # the calling thread is checked at each call (thread_input)
        graph, function = traced
        with _lock:
            counters = _traces.setdefault(graph, {})
            k = counters.get(process_set_id, 0)
            counters[process_set_id] = k + 1
            key = f"{function}.noname.{k}"
            _unnamed.setdefault(graph, set()).add(key)
        return key
    thread = threading.current_thread()
    owner = None if thread is threading.main_thread() else thread.name
    if owner is not None:
        _check_thread(thread, kind)
        _check_unique(thread, kind)
    with _lock:
        key = (owner, process_set_id)
        n = _counters[key]
        _counters[key] += 1
        epoch = f"j{_joins}." if _joins else ""
    return f"noname.{epoch}{n}" if owner is None else f"noname[{owner}].{epoch}{n}"


def _unnamed_in_trace(key):
    """The traced function's graph when ``key`` is an unnamed key of its trace, or derived
    from one; else None."""
    traced = _private_api.traced_function()
    if traced is None:
        return None
    graph = traced[0]
    keys = _unnamed.get(graph, ())
    parts = key.split(".")
    prefixes = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return graph if any(p in keys for p in prefixes) else None


def _calling_thread():
    """The calling thread's part of a key at run time ("" for the main thread); raises
    ValueError for a thread whose calls cannot be paired (see above)."""
    thread = threading.current_thread()
    if thread is threading.main_thread():
        return ""
    _check_thread(thread, "collective in a tf.function")
    _check_unique(thread, "collective in a tf.function")
    return f"[{thread.name}]"


def thread_input(key):
    """The ``thread`` input of the collective keyed ``key`` (ops/tf/adapter.h): inside a
    traced function, for an unnamed key of the trace or one derived from it, a one-item list
    holding the calling thread's part of the key, computed at each call of the function;
    otherwise ``[]`` (the key is the whole key)."""
    graph = _unnamed_in_trace(key)
    if graph is None:
        return []
    import tensorflow as tf  # lazy: this module runs before TensorFlow is imported

    def closure():
        return tf.constant(_calling_thread())

    return [_private_api.call_time_value(graph, closure, _THREAD_KEY)]


def key_at_run_time(key):
    """``key`` as the engine will see it from this thread (with the calling thread's part
    for an unnamed key of the trace being built: tracing runs in the calling thread)."""
    return key + _calling_thread() if _unnamed_in_trace(key) is not None else key


def new_epoch():
    """Called by ``join()`` on every rank: restarts the eager counters (see above)."""
    global _joins
    with _lock:
        _joins += 1
        _counters.clear()


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
