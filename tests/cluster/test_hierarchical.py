"""Hierarchical allreduce and allgather (ops/core/backend/mpi/mpi_hierarchical.h) across the
nodes of tests/fixtures/multinode_cluster.py's clusters, and on one host.

Each job runs tests/scripts/slurm/hierarchical.py: the same collectives with the hierarchical
settings off, on (and auto), checked against numpy and against each other bit for bit where the
documentation (docs/settings.md) says the results are equal, and checks that the data crossed
the nodes' network links.
In auto, the script asks the engine's rule (LinkModel, through kerashvd._core.allreduce_path)
which path each allreduce takes and checks the results bit for bit against that path's.

- 2 nodes x 2 ranks in blocks (ranks 0-1 on the first node): hierarchical allreduce and
  allgather run, and float sums and products are bitwise equal to flat's; inside the same job,
  process sets of nodes with 2 + 1 ranks and 1 + 1;
- 2 x 2 cyclic (ranks 0 and 2 on the first node): float sums follow the hierarchical order,
  which is not the flat one, so the results tell the paths apart, auto included (MPICH's flat
  algorithm sends twice the bytes across here, so auto goes node by node from 64 KiB);
  allgather goes through the leaders' staging buffer since rank order is not node order; sets
  of 2 + 1 ranks and of one node;
- on one host, with MPICH's cliques (MPIR_CVAR_NUM_CLIQUES) standing for 2 nodes: ranks given
  different settings all follow rank 0's;
- slow: a whole job of 2 + 1 ranks, 3 x 1 (one rank per node: node by node is the
  alltoall-reduce-allgather across the nodes), and one host of 3 ranks under mpiexec
  (local_size == size: flat whatever the setting).
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from fixtures.multinode_cluster import retry_start, run_job
from test_slurm import RANK_ENV

pytestmark = [pytest.mark.mpi]

SCRIPT = os.path.join(REPO, "tests", "scripts", "slurm", "hierarchical.py")
KERASHVD_WARNING = re.compile(r"\[kerashvd rank \d+\] WARNING")
DIFFERS = re.compile(r"\[kerashvd rank (\d)\] WARNING: (process set 1: )?hierarchical_allreduce/"
                     r"_allgather are off/off on this rank but on/on on rank 0")


def _reports(output, size, min_checks=300):
    reports = [json.loads(line) for line in output.splitlines() if line.startswith('{"rank"')]
    assert sorted(r["rank"] for r in reports) == list(range(size)), output[-5000:]
    for r in reports:
        assert r["checks"] > min_checks, r
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
    assert not KERASHVD_WARNING.search(output), output[-5000:]  # every layout can go node by node


def test_every_rank_follows_rank_0s_settings():
    """Ranks given different hierarchical settings all take rank 0's path (the plan is made
    from rank 0's settings), so their collectives meet and give rank 0's results; the others
    say so. One host, with MPICH's cliques standing for 2 nodes of 2 ranks, placed cyclically
    (ranks 0 and 2 on one): there node by node adds float sums in another order than flat, so
    the results tell the paths apart. If a rank took its own path, the ranks would wait in
    different collectives and the job would hang."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, **RANK_ENV)
    args = ["--dtypes", "float32,int32", "--modes"]
    proc = subprocess.run([mpiexec, "-genv", "MPIR_CVAR_NUM_CLIQUES", "2",
                           "-n", "1", sys.executable, SCRIPT, *args, "on", ":",
                           "-n", "3", sys.executable, SCRIPT, *args, "off"],
                          env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    reports = _reports(proc.stdout, 4, min_checks=40)  # one mode, two dtypes: fewer checks
    assert {json.dumps(r["nodes"]) for r in reports} == {"[[0, 2], [1, 3]]"}, reports
    assert all(r["modes"] == ["on"] for r in reports), reports
    # Ranks 1-3 say that they follow rank 0, for the world and for the set {0, 1, 2}.
    said = sorted((int(m.group(1)), bool(m.group(2))) for m in DIFFERS.finditer(proc.stderr))
    assert said == [(1, False), (1, True), (2, False), (2, True), (3, False)], output[-5000:]


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
    assert not KERASHVD_WARNING.search(proc.stderr), proc.stderr[-5000:]
