"""A CPU-limited cgroup for the straggler tests: ``with cpu_limited(0.1) as group: ...``.

Processes (``cgroup.procs``) or, with cgroup v1, single threads (``tasks``) written into
``group.path`` then get at most ``share`` of one CPU between them. The cgroup is made beside
this process's own (so that moving a process to ``group.parent`` puts it back where it came
from), and at the end whatever is still in it goes back to the parent and the cgroup is
removed, checked. cgroup v1's ``cpu`` controller (``cpu.cfs_quota_us``) and cgroup v2's
``cpu.max`` both work; :func:`missing` says why neither can be used (not root, no cpu
controller), for a skip.
"""

import contextlib
import os
import random
import string

V1 = "/sys/fs/cgroup/cpu"
V2 = "/sys/fs/cgroup"
PERIOD_US = 100_000


def _own(controller):
    """This process's cgroup path for ``controller`` (v1), or its v2 path (controller "")."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(",") if controller else controllers == "":
                return path
    return None


def _layout():
    """(root of the hierarchy, this process's cgroup in it, version) or None."""
    if os.path.exists(os.path.join(V1, "cpu.cfs_quota_us")) and _own("cpu") is not None:
        return V1, _own("cpu"), 1
    controllers = os.path.join(V2, "cgroup.controllers")
    if os.path.exists(controllers) and _own("") is not None:
        with open(controllers) as f:
            if "cpu" in f.read().split():
                return V2, _own(""), 2
    return None


def missing(threads=False):
    """Why :func:`cpu_limited` cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "limiting a CPU share with a cgroup needs root"
    layout = _layout()
    if layout is None:
        return "no cgroup cpu controller (v1 cpu.cfs_quota_us or v2 cpu.max) to limit a CPU share"
    if threads and layout[2] != 1:
        return "limiting one thread needs cgroup v1's cpu controller (tasks file)"
    return None


class Group:
    def __init__(self, path, parent):
        self.path, self.parent = path, parent

    def members(self):
        with open(os.path.join(self.path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]


@contextlib.contextmanager
def cpu_limited(share):
    root, own, version = _layout()
    parent = os.path.normpath(os.path.join(root, own.lstrip("/")))
    name = "khvd-test-" + "".join(random.choices(string.ascii_lowercase, k=6))
    path = os.path.join(parent, name)
    os.mkdir(path)
    try:
        quota = max(1000, int(share * PERIOD_US))
        if version == 1:
            with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
                f.write(str(PERIOD_US))
            with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(quota))
        else:
            with open(os.path.join(path, "cpu.max"), "w") as f:
                f.write(f"{quota} {PERIOD_US}")
        yield Group(path, parent)
    finally:
        tasks = "tasks" if version == 1 else "cgroup.procs"
        with open(os.path.join(path, tasks)) as f:
            left = f.read().split()
        for task in left:
            with contextlib.suppress(OSError), open(os.path.join(parent, tasks), "w") as f:
                f.write(task)
        os.rmdir(path)
        assert not os.path.exists(path), f"cgroup {path} still there"
