"""The hosts an elastic job may use, minus the slots lost to failures, and the next world's
layout.

What a failure costs (kerashvd's rule; Horovod leaves out the whole host of a failed worker):

- a host none of whose ranks survived (the node died, was cut off, or every rank on it
  failed) is *lost*: the job leaves it out until discovery stops listing it and lists it
  again (a node that was repaired or replaced comes back that way);
- a host on which some ranks failed and others survived keeps running the survivors: it
  loses one slot per failed rank, until discovery stops listing it.

A lost host none of whose ranks was heard from again (their connections to the launcher timed
out: a cut link, a host that went down) is *cut off*: the elastic driver asks the backend
every few seconds whether it answers again, and uses it again once it does, whether or not
discovery dropped it meanwhile.

So on one host listed with 3 slots, a SIGKILLed rank leaves a world of 2; with a discovery
script, a node that went away and came back is used again. Failures are the only thing that
takes slots away on their own: with fixed hosts (``-H``, ``--hostfile``, a SLURM allocation),
whose list never changes, what a failure took stays taken.

A world is laid out as hydra and srun lay out ``-hosts``: hosts in discovery order, each
filled with as many ranks as it has usable slots, up to the maximum number of ranks.
"""

from .hosts import Host


class HostPool:
    """The listed hosts and what failures took from them (see the module docstring).

    Example:

    >>> pool = HostPool()
    >>> pool.update([Host("a", 2), Host("b", 1)])
    (['a', 'b'], [])
    >>> pool.record_failures(layout([Host("a", 2), Host("b", 1)], 3), failed_ranks={1, 2})
    >>> pool.usable()
    [Host(name='a', slots=1)]
    """

    def __init__(self):
        self.listed = []      # what discovery gave last, in its order
        self._lost = set()    # host names left out until they leave the list
        self._cut_off = set()  # lost hosts that stopped answering (see the module docstring)
        self._failed = {}     # host name -> slots lost to failed ranks

    def update(self, hosts):
        """Takes discovery's new list; returns ``(added, removed)`` host names. A host that
        left the list forgets its failures (it comes back fresh)."""
        before = {h.name for h in self.listed}
        now = {h.name for h in hosts}
        for name in before - now:
            self._lost.discard(name)
            self._cut_off.discard(name)
            self._failed.pop(name, None)
        self.listed = list(hosts)
        return [h.name for h in hosts if h.name not in before], sorted(before - now)

    def record_failures(self, world, failed_ranks, unreachable=()):
        """Charges the ranks in ``failed_ranks`` (world ranks) to their hosts.

        Args:
            world: the world's layout (:func:`layout`): one host name per rank.
            failed_ranks: the ranks that failed (neither finished nor survived).
            unreachable: the failed ranks whose host stopped answering.
        """
        for name in dict.fromkeys(world):
            ranks = [r for r, host in enumerate(world) if host == name]
            failed = [r for r in ranks if r in failed_ranks]
            if not failed:
                continue
            if len(failed) == len(ranks):
                self._lost.add(name)
                if any(r in unreachable for r in ranks):
                    self._cut_off.add(name)
            else:
                self._failed[name] = self._failed.get(name, 0) + len(failed)

    def lose(self, names):
        """Leaves the hosts ``names`` out until they leave discovery's list."""
        self._lost.update(names)

    def cut_off(self):
        """The listed hosts left out because they stopped answering."""
        return [h.name for h in self.listed if h.name in self._cut_off]

    def answering_again(self, names):
        """Uses the cut-off hosts ``names`` again, as if they had just been listed."""
        for name in names:
            if name in self._cut_off:
                self._cut_off.discard(name)
                self._lost.discard(name)
                self._failed.pop(name, None)

    def lost(self):
        """The listed hosts left out after failures."""
        return [h.name for h in self.listed if h.name in self._lost]

    def usable(self):
        """The listed hosts that are not lost, each with the slots failures left it."""
        hosts = []
        for h in self.listed:
            slots = h.slots - self._failed.get(h.name, 0)
            if h.name not in self._lost and slots > 0:
                hosts.append(Host(h.name, slots))
        return hosts

    def plan(self, max_np=None):
        """The next world: the usable hosts filled in order, up to ``max_np`` ranks
        (``None``: every usable slot). Returns a list of :class:`Host` (the slots used)."""
        plan, left = [], max_np if max_np is not None else sum(h.slots for h in self.usable())
        for h in self.usable():
            if left <= 0:
                break
            plan.append(Host(h.name, min(h.slots, left)))
            left -= plan[-1].slots
        return plan


def layout(plan, np=None):
    """One host name per rank of a world run on ``plan`` (hosts filled in order).

    Example:

    >>> layout([Host("a", 2), Host("b", 1)])
    ['a', 'a', 'b']
    """
    names = [h.name for h in plan for _ in range(h.slots)]
    return names if np is None else names[:np]


def describe(plan):
    """``"a:2,b:1"`` for a plan, ``"no host"`` for none."""
    return ",".join(str(h) for h in plan) or "no host"


def change_kind(current, new):
    """How ``new`` differs from ``current`` (plans): ``None`` (same), ``"added"`` (only more
    ranks or hosts), ``"removed"`` (only fewer) or ``"changed"``.

    Example:

    >>> change_kind([Host("a", 1)], [Host("a", 1), Host("b", 1)])
    'added'
    """
    old = {h.name: h.slots for h in current}
    now = {h.name: h.slots for h in new}
    if [str(h) for h in current] == [str(h) for h in new]:
        return None
    if all(now.get(name, 0) >= slots for name, slots in old.items()) and \
            [h.name for h in current] == [h.name for h in new if h.name in old]:
        return "added"
    if all(old.get(name, 0) >= slots for name, slots in now.items()):
        return "removed"
    return "changed"
