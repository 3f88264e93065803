"""Training state that survives a change of world: :class:`State` and :class:`ObjectState`.

A state object holds what training needs to go on (a model, an optimizer, counters) and a
*commit* of it: ``commit()`` saves a copy in memory (``save()``) and checks for host changes;
``restore()`` goes back to the last commit; ``sync()`` makes every rank hold rank 0's. The
elastic loop (``run.py``) calls them when a world ends and the next begins.

Under ``kerashvdrun``'s elastic mode the next world is made of new processes, so a commit
also travels: a rank leaving for a reset hands its last commit to the launcher
(:meth:`State._handover`), and rank 0 of the next world takes it (:meth:`State._take_over`)
before ``sync()`` broadcasts it. Every commit carries its number (commits since training
began, across worlds), with which the launcher keeps the newest.
"""

import cloudpickle
import numpy as np
import tensorflow as tf

import kerashvd as hvd
from kerashvd.runtime.exceptions import HostsUpdatedInterrupt

from . import launcher_link

_UPDATE_CODES = {None: 0, "added": 1, "removed": 2, "changed": 3}
_UPDATE_KINDS = {code: kind for kind, code in _UPDATE_CODES.items()}


class State:
    """The base of elastic state objects: commits, host checks and reset callbacks.

    Subclasses implement ``save()``, ``restore()`` and ``sync()`` and extend
    ``_handover_payload()``/``_take_payload()`` with what they hold.

    Example (a subclass; see :class:`ObjectState` for one ready to use)::

        class Counter(hvd.elastic.State):
            def __init__(self):
                super().__init__()
                self.value = self._saved = 0
            def save(self):
                self._saved = self.value
            def restore(self):
                self.value = self._saved
            def sync(self):
                self._saved = self.value = hvd.broadcast_object(self.value, 0)
    """

    def __init__(self):
        self._reset_callbacks = []
        self._commits = 0         # commits so far (across worlds)
        self._saved_commits = 0   # the number of the commit saved last
        self._synced = False      # whether the saved state is the world's common one

    def register_reset_callbacks(self, callbacks):
        """Adds functions called with no argument after every reset (a new world), before
        the state is synchronized: e.g. to scale the learning rate with ``hvd.size()``.

        Example:

        >>> state.register_reset_callbacks([lambda: print("world of", hvd.size())])  # doctest: +SKIP
        """
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Calls the reset callbacks, in the order they were registered."""
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state in memory and checks for host changes.

        Raises:
            HostsUpdatedInterrupt: on every rank at the same commit, when ``kerashvdrun``
                announced hosts that give another world (the elastic loop then moves the
                state to that world).
        """
        self._commits += 1
        self.save()
        self._saved_commits = self._commits
        self.check_host_updates()

    def check_host_updates(self):
        """Raises ``HostsUpdatedInterrupt`` on every rank if ``kerashvdrun`` announced a host
        change (rank 0 reads it; one broadcast makes every rank agree). Does nothing, and
        communicates nothing, outside ``kerashvdrun``'s elastic mode.

        Raises:
            HostsUpdatedInterrupt: with ``skip_sync`` True when hosts were only removed.
        """
        link = launcher_link.current()
        if link is None:
            return
        code = _UPDATE_CODES.get(link.hosts_update, 3) if hvd.rank() == 0 else 0
        code = int(hvd.broadcast(tf.constant([code], tf.int32), root_rank=0,
                                 name="elastic.check_host_updates")[0])
        if code:
            raise HostsUpdatedInterrupt(skip_sync=_UPDATE_KINDS[code] == "removed")

    def save(self):
        """Saves the state in memory (host memory, or device memory for tensors)."""
        raise NotImplementedError

    def restore(self):
        """Goes back to the last saved state."""
        raise NotImplementedError

    def sync(self):
        """Makes every rank hold rank 0's state, and saves it."""
        raise NotImplementedError

    # -- handing the commit to the next world (kerashvdrun's elastic mode) ------------------

    def _handover(self):
        """``(number, make_bytes)``: the last commit's number (-1 before the state was
        synchronized in this world: then there is nothing to hand over) and a function that
        serializes it."""
        if not self._synced:
            return -1, None
        return self._saved_commits, lambda: cloudpickle.dumps(self._handover_payload(),
                                                              protocol=5)

    def _take_over(self, data):
        """Makes the commit serialized in ``data`` this state's saved one, then restores it."""
        self._take_payload(cloudpickle.loads(data))
        self.restore()

    def _handover_payload(self):
        return {"commits": self._saved_commits}

    def _take_payload(self, payload):
        self._commits = self._saved_commits = int(payload["commits"])


class ObjectState(State):
    """State made of Python objects, each given as a keyword argument and kept as an
    attribute.

    ``save()`` remembers the attributes' current values (the objects themselves, not copies:
    an object changed in place after a commit is changed in the commit too, as in Horovod;
    assign new values instead); ``sync()`` broadcasts rank 0's saved values.

    Args:
        bcast_object: the function that broadcasts an object from rank 0 (Horovod's
            argument; default ``hvd.broadcast_object``).
        get_rank: accepted for Horovod compatibility (kerashvd uses ``hvd.rank``).
        **kwargs: the attributes and their initial values.

    Example:

    >>> state = hvd.elastic.ObjectState(epoch=0, batch=0)  # doctest: +SKIP
    >>> state.epoch += 1; state.commit()  # doctest: +SKIP
    """

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._bcast_object = bcast_object or (
            lambda obj: hvd.broadcast_object(obj, root_rank=0, name="elastic.object_state"))
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__()

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        number, saved = self._bcast_object((self._saved_commits, self._saved_state))
        self._commits = self._saved_commits = number
        self._saved_state = saved
        self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)

    def _handover_payload(self):
        return dict(super()._handover_payload(), objects=self._saved_state)

    def _take_payload(self, payload):
        super()._take_payload(payload)
        objects = payload.get("objects", {})
        if set(objects) != set(self._saved_state):
            raise ValueError(
                f"the commit handed over by the previous world holds the attributes "
                f"{sorted(objects)}, but this state has {sorted(self._saved_state)}: every "
                "world must run the same script")
        self._saved_state = dict(objects)


def check_handover_shapes(what, variables, values):
    """Raises ValueError unless ``values`` (a commit handed over by the previous world) have
    the shapes of ``variables``, one each: every world must build the same variables."""
    shapes = [tuple(v.shape) for v in variables]
    if shapes != [tuple(np.shape(x)) for x in values]:
        raise ValueError(
            f"the commit handed over by the previous world holds {len(values)} {what} "
            f"variables of shapes {[np.shape(x) for x in values]}, but this {what} has "
            f"{len(shapes)} of shapes {shapes}: every world must build the same model and "
            "optimizer")
