"""The straggler report across two SLURM nodes (tests/fixtures/multinode_cluster.py), one made slow.

2 nodes x 2 ranks train (tests/scripts/straggler/train.py); from the third epoch on, both
processes of the second node run in a cgroup that gives them 10% of one CPU between them (a
node with a noisy neighbour or throttled CPUs). The first two epochs' reports name no one;
the third names that node (its two ranks, sharing the small CPU share, also wait for each
other, so the node is named by what the other node waited for the later of them) and no rank
of the first node. (A slow link between exactly two nodes cannot be pinned on either end:
both wait for each other alike; see docs/diagnostics.md.)
"""

import json
import os
import sys

import pytest

from conftest import REPO
from fixtures.cpu_limit import cpu_limited, missing
from fixtures.multinode_cluster import retry_start
from test_slurm import RANK_ENV

SCRIPT = os.path.join(REPO, "tests", "scripts", "straggler", "train.py")

pytestmark = [pytest.mark.slurm, pytest.mark.mpi, pytest.mark.slow]


def test_report_names_the_cpu_limited_node(cluster_2_nodes):
    reason = missing()
    if reason:
        pytest.skip(reason)
    slow_node = cluster_2_nodes.nodes[1]
    with cpu_limited(0.1) as group:
        def launch():
            proc = cluster_2_nodes.run(
                ["srun", "--mpi=pmi2", "-N", "2", "-n", "4", "--ntasks-per-node=2",
                 "--kill-on-bad-exit=1", sys.executable, SCRIPT, "--epochs", "3",
                 "--slow-from", "3", "--steps", "10", "--limit-host", slow_node,
                 "--limit-cgroup", group.path], env=RANK_ENV, timeout=300)
            return proc.returncode == 0, proc.stdout + proc.stderr

        ok, output = retry_start(launch, "srun straggler 2x2")
        assert ok, output[-5000:]
        assert group.members() == []  # the processes went back before they ended
    epochs = {r["epoch"]: r for r in (json.loads(line) for line in output.splitlines()
                                      if line.startswith('{"epoch"'))}
    assert sorted(epochs) == [1, 2, 3], output[-5000:]
    for e in (1, 2):
        assert epochs[e]["nodes"] == [], epochs[e]["text"]
    print("\n".join(epochs[e]["text"] for e in sorted(epochs)))  # shown with -s
    slow = epochs[3]
    assert slow["nodes"] == [slow_node], slow["text"]
    assert {rank for rank, _ in slow["late"] + slow["comm"]} <= {2, 3}, slow["text"]
