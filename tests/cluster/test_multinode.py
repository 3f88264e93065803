"""kerashvd over several SLURM nodes on one machine (tests/fixtures/multinode_cluster.py's fixtures).

Each node is a set of namespaces with its own hostname, address and /dev/shm, so MPICH sees
separate hosts and its traffic between them goes over a network (a bridge), as on a real
cluster. Covers: the topology (local and cross ranks and sizes, is_homogeneous) at 2 nodes x
2 ranks, 3 nodes x 1 rank and an uneven 2 + 1; the collectives against numpy across nodes;
kerashvdrun in a 2-node batch allocation starting its ranks on both nodes; the CPU template
training the quickstart with -N 2.
"""

import json
import os
import re
import sys

import pytest

from fixtures.multinode_cluster import retry_start
from test_slurm import RANK_ENV, WORLD, reports

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]


def expected_topology(ranks):
    """Each rank's (local_rank, local_size, cross_rank, cross_size, is_homogeneous), from the
    hosts the ranks report: local ranks in rank order on a host; ranks with one local rank
    form a cross communicator, ordered by rank (as in Horovod)."""
    by_host = {}
    for r in sorted(ranks, key=lambda r: r["rank"]):
        by_host.setdefault(r["host"], []).append(r["rank"])
    homogeneous = len({len(v) for v in by_host.values()}) == 1
    local = {rank: (i, len(v)) for v in by_host.values() for i, rank in enumerate(v)}
    expected = {}
    for rank, (local_rank, local_size) in local.items():
        peers = sorted(q for q, (lr, _) in local.items() if lr == local_rank)
        expected[rank] = (local_rank, local_size, peers.index(rank), len(peers), homogeneous)
    return expected


def topology(ranks):
    return {r["rank"]: (r["local_rank"], r["local_size"], r["cross_rank"], r["cross_size"],
                        r["is_homogeneous"]) for r in ranks}


# layout id -> (fixture, srun options, ranks per node in node order)
LAYOUTS = {
    "2x2": ("cluster_2_nodes", ["-N", "2", "-n", "4", "--ntasks-per-node=2"], [2, 2]),
    "3x1": ("cluster_3_nodes", ["-N", "3", "-n", "3", "--ntasks-per-node=1"], [1, 1, 1]),
    "2+1": ("cluster_2_nodes", ["-N", "2", "-n", "3", "--distribution=block"], [2, 1]),
}


# Each layout starts TensorFlow on every rank (~10-20 s on 2 cores); 2x2 runs without -m slow.
@pytest.mark.parametrize("layout", [pytest.param(k, marks=[pytest.mark.slow] if k != "2x2" else [])
                                    for k in LAYOUTS])
def test_topology_and_collectives_across_nodes(request, layout):
    fixture, options, per_node = LAYOUTS[layout]
    cluster = request.getfixturevalue(fixture)
    def launch():
        proc = cluster.run(["srun", "--mpi=pmi2", *options, sys.executable, WORLD,
                            "--collectives"], env=RANK_ENV, timeout=300)
        return proc.returncode == 0, proc.stdout + proc.stderr

    ok, output = retry_start(launch, f"srun {layout}")
    assert ok, output[-5000:]
    ranks = reports(output)
    size = sum(per_node)
    assert sorted(r["rank"] for r in ranks) == list(range(size)), output[-5000:]
    assert {r["size"] for r in ranks} == {size}
    # The ranks ran on the nodes asked for, in blocks (ranks 0.. on the first node).
    hosts = [r["host"] for r in sorted(ranks, key=lambda r: r["rank"])]
    assert hosts == [n for n, k in zip(cluster.nodes, per_node) for _ in range(k)], hosts
    assert topology(ranks) == expected_topology(ranks)
    assert {r["is_homogeneous"] for r in ranks} == {len(set(per_node)) == 1}
    assert {r["cross_size"] for r in ranks if r["local_rank"] == 0} == {len(per_node)}
    for r in ranks:
        assert r["collectives"] == [], (r["rank"], r["host"], r["collectives"])


BATCH = """\
#!/bin/bash
kerashvdrun --verbose python {world} --tag kerashvdrun
"""


def test_kerashvdrun_in_a_two_node_allocation(cluster_2_nodes, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(BATCH.format(world=WORLD))
    def launch():
        job = cluster_2_nodes.sbatch(script, chdir=tmp_path, env=RANK_ENV,
                                     options=["-N", "2", "--ntasks-per-node=2",
                                              f"--output={tmp_path}/%j.out"])
        state = cluster_2_nodes.wait(job, timeout=300)
        return state == "COMPLETED", cluster_2_nodes.log(job)

    ok, log = retry_start(launch, "kerashvdrun job")
    assert ok, log[-5000:]
    assert re.search(r"kerashvdrun: \S*srun --mpi=pmi2 \S.* -n 4 ", log), log[-5000:]
    ranks = [r for r in reports(log) if r.get("tag") == "kerashvdrun"]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3], log[-5000:]
    assert {r["size"] for r in ranks} == {4}
    hosts = sorted(r["host"] for r in ranks)
    assert hosts == sorted(cluster_2_nodes.nodes * 2), hosts
    assert topology(ranks) == expected_topology(ranks)
    assert {(r["local_size"], r["cross_size"]) for r in ranks} == {(2, 2)}


def test_each_node_has_its_own_host_address_and_shm(cluster_3_nodes):
    """The fixture itself: one task per node sees that node's name, address and /dev/shm."""
    proc = cluster_3_nodes.run(
        ["srun", "-N", "3", "-n", "3", "--ntasks-per-node=1", sys.executable, "-c",
         "import json, os, socket; s = os.stat('/dev/shm'); "
         "print(json.dumps([socket.gethostname(), socket.gethostbyname(socket.gethostname()), "
         "[s.st_dev, s.st_ino], os.environ['SLURMD_NODENAME']]))"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = sorted(json.loads(line) for line in proc.stdout.splitlines())
    nodes = cluster_3_nodes.nodes
    assert [t[0] for t in tasks] == nodes and [t[3] for t in tasks] == nodes, tasks
    assert [t[1] for t in tasks] == [cluster_3_nodes.addresses[n] for n in nodes], tasks
    shm = os.stat("/dev/shm")
    devices = {tuple(t[2]) for t in tasks}
    assert len(devices) == 3 and (shm.st_dev, shm.st_ino) not in devices, tasks


@pytest.mark.slow
def test_cpu_template_trains_on_two_nodes(cluster_2_nodes, tmp_path):
    """The multi-node line of docs/launching.md: recipes/slurm/cpu.sbatch with -N 2 trains the
    quickstart with one rank per node, and the job log stays free of TensorFlow's start-up
    notices."""
    from conftest import REPO, TF_NOTICE

    template = os.path.join(REPO, "recipes", "slurm", "cpu.sbatch")
    def launch():
        job = cluster_2_nodes.sbatch(template, "recipes/quickstart.py", "--tiny", chdir=REPO,
                                     env=RANK_ENV,
                                     options=["--nodes=2", "--ntasks-per-node=1",
                                              "--cpus-per-task=1", f"--output={tmp_path}/%x-%j.out"])
        state = cluster_2_nodes.wait(job, timeout=600)
        return state == "COMPLETED", cluster_2_nodes.log(job)

    ok, log = retry_start(launch, "template job")
    assert ok, log[-5000:]
    assert "2 node(s), 2 ranks" in log, log[-3000:]
    match = re.search(r"ranks=2 final val_accuracy=([0-9.]+)", log)
    assert match and float(match.group(1)) > 0.8, log[-5000:]
    assert not [line for line in log.splitlines() if TF_NOTICE.search(line)], log[-5000:]
