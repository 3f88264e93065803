"""Hierarchical allreduce and allgather (ops/core/backend/mpi/mpi_hierarchical.h) across the
nodes of tests/multinode_cluster.py's clusters, and on one host.

Each job runs tests/slurm_scripts/hierarchical.py: the same collectives with the hierarchical
settings off, on (and auto), checked against numpy and against each other bit for bit where the
documentation (docs/settings.md) says the results are equal, and checks that the data crossed
the nodes' network links.

- 2 nodes x 2 ranks in blocks (ranks 0-1 on the first node): hierarchical allreduce and
  allgather run, and float sums and products are bitwise equal to flat's; inside the same job,
  process sets of nodes with 2 + 1 ranks (allreduce flat, with a warning where asked for) and
  1 + 1;
- 2 x 2 cyclic (ranks 0 and 2 on the first node): float sums follow the hierarchical order,
  which is not the flat one, so the results tell the paths apart, auto included; allgather goes
  through the leaders' staging buffer since rank order is not node order; sets of 2 + 1 ranks
  and of one node;
- slow: a whole job of 2 + 1 ranks, 3 x 1 (one rank per node: nothing to layer), and one host
  of 3 ranks under mpiexec (local_size == size: flat whatever the setting).
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from multinode_cluster import retry_start, run_job
from test_slurm import RANK_ENV

pytestmark = [pytest.mark.mpi]

SCRIPT = os.path.join(REPO, "tests", "slurm_scripts", "hierarchical.py")
FALLBACK = "hierarchical allreduce was asked for, but the nodes run different numbers of ranks"


def _reports(output, size):
    reports = [json.loads(line) for line in output.splitlines() if line.startswith('{"rank"')]
    assert sorted(r["rank"] for r in reports) == list(range(size)), output[-5000:]
    for r in reports:
        assert r["checks"] > 300, r
        assert r["failed"] == 0, (r["rank"], r["host"], r["failures"])
    return reports


# layout id -> (fixture, srun options, ranks of each node, script arguments)
LAYOUTS = {
    "2x2": ("cluster_2_nodes", ["-N", "2", "-n", "4", "--ntasks-per-node=2"], [[0, 1], [2, 3]],
            ["--float-sums-equal-flat", "--modes", "off,on"]),
    "2x2-cyclic": ("cluster_2_nodes", ["-N", "2", "-n", "4", "--distribution=cyclic"],
                   [[0, 2], [1, 3]], []),
    "2+1": ("cluster_2_nodes", ["-N", "2", "-n", "3", "--distribution=block"], [[0, 1], [2]],
            ["--float-sums-equal-flat", "--modes", "off,on"]),
    "3x1": ("cluster_3_nodes", ["-N", "3", "-n", "3", "--ntasks-per-node=1"], [[0], [1], [2]],
            ["--float-sums-equal-flat", "--modes", "off,on"]),
}


@pytest.mark.slurm
@pytest.mark.parametrize("layout", [
    pytest.param(k, marks=[pytest.mark.slow] if k in ("2+1", "3x1") else []) for k in LAYOUTS])
def test_hierarchical_equals_flat_across_nodes(request, layout):
    fixture, options, nodes, args = LAYOUTS[layout]
    cluster = request.getfixturevalue(fixture)

    def launch():
        return run_job(cluster, ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1", *options,
                                 sys.executable, SCRIPT, *args], env=RANK_ENV, timeout=300)

    sent = cluster.sent_bytes(cluster.nodes[-1])
    ok, output = retry_start(launch, f"srun {layout}")
    assert ok, output[-5000:]
    # The data crossed the network: each run sends the last node's share of some 10 MB of
    # collectives on its eth0, not through memory shared with the other nodes.
    assert cluster.sent_bytes(cluster.nodes[-1]) - sent > 2_000_000
    reports = _reports(output, sum(len(k) for k in nodes))
    assert {json.dumps(r["nodes"]) for r in reports} == {json.dumps(nodes)}, reports
    print(layout, "seconds on rank 0:", [r["seconds"] for r in reports if r["rank"] == 0][0])
    # Only a requested allreduce that cannot run node by node says why (on rank 0, each time
    # 'on' was set: world and, on 4 ranks, the {0, 1, 2} set).
    warnings = len(re.findall(re.escape(FALLBACK), output))
    assert warnings == {"2x2": 1, "2x2-cyclic": 1, "2+1": 1, "3x1": 0}[layout], output[-5000:]


@pytest.mark.slow
def test_hierarchical_setting_on_one_host():
    """local_size == size: the settings change nothing, and every result is flat's."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, **RANK_ENV)
    proc = subprocess.run([mpiexec, "-n", "3", sys.executable, SCRIPT, "--float-sums-equal-flat",
                           "--modes", "off,on"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    reports = _reports(proc.stdout, 3)
    assert {json.dumps(r["nodes"]) for r in reports} == {"[[0, 1, 2]]"}
    assert FALLBACK not in proc.stderr
