"""A host lost mid-job over ssh, on the ``ssh_nodes`` fixture (tests/fixtures/ssh_nodes.py: nodes in
namespaces, each with its own sshd, name, address and /dev/shm): every process of a node
killed, or its link cut (``ip link set <veth> down`` on the bridge's side), at 2 nodes x 2
ranks. kerashvdrun names the lost host and its ranks, and in elastic mode drops a node cut
off (the node of rank 0, kerashvdrun on neither node, as on a login node) whatever discovery
says, goes on on the other, and takes the node back once it answers again.

Ranks and kerashvdrun run with ``KERASHVD_PEER_TIMEOUT=5``, so kerashvdrun's connections to
the ranks count as lost after 3 s of silence (``kerashvd/launcher/keepalive.py``). Each test
prints what it measured (seconds from the failure). On a loaded 2-core machine, one run: ~10 s
(kill), ~30 s (cut), ~110 s (elastic).
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from fixtures.multinode_cluster import NODE_MPI_ENV
from test_elastic import TRAIN, Job, discovery
from test_slurm import RANK_ENV
from test_ssh_launch import JOB, assert_nothing_left, kerashvdrun

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

LOOP = os.path.join(REPO, "tests", "scripts", "launcher", "peer_loop.py")
PEER_TIMEOUT = 5
LINK_TIMEOUT = PEER_TIMEOUT - 2
ENV = dict(RANK_ENV, KERASHVD_PEER_TIMEOUT=str(PEER_TIMEOUT), TF_CPP_MIN_LOG_LEVEL="3",
           PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def _link(nodes, node, up):
    veth = nodes.network.veths[nodes.network.nodes.index(node)]
    subprocess.run(["ip", "link", "set", veth, "up" if up else "down"], check=True, timeout=30)


def _kill_node(nodes, node):
    # Newest first: ranks, supervisors, hydra's proxy, then the ssh session. Killed oldest first,
    # the session's end reaches hydra before the supervisors' ends reach kerashvdrun, and hydra
    # then ends the first node's ranks too; on a loaded machine those losses have come first,
    # and kerashvdrun, which names the first host to lose every rank, named the first node (once
    # in CI). kerashvdrun cannot tell the two apart from its watches alone.
    for pid, _ in sorted(nodes.processes(node), reverse=True):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _failures(output):
    """kerashvdrun's lines that name why the job is being stopped."""
    return [line for line in output.splitlines()
            if line.startswith("kerashvdrun: ") and line.endswith("stopping the other ranks.")]


def _ssh_job(nodes, script):
    """kerashvdrun -np 4 -H n1:2,n2:2 on the first node, once every rank has printed."""
    n1, n2 = nodes.nodes
    job = Job(nodes.command(n1, kerashvdrun(nodes, "-np", "4", "-H", f"{n1}:2,{n2}:2",
                                            *script)),
              env=dict(os.environ, **ENV))
    for rank in range(4):
        job.wait_for(f'"rank": {rank},', f"rank {rank} to start", timeout=120)
    return job


def test_a_node_whose_processes_are_killed_is_named_with_its_ranks(ssh_nodes):
    """Every process of the second node (its ssh session, hydra's proxy, supervisors and
    ranks) SIGKILLed: hydra ends at once; kerashvdrun names the node and its two ranks."""
    n1, n2 = ssh_nodes.nodes
    job = _ssh_job(ssh_nodes, [sys.executable, JOB, "wait"])
    killed = time.monotonic()
    _kill_node(ssh_nodes, n2)
    code = job.finish(timeout=60)
    seconds = time.monotonic() - killed
    output = job.output()
    assert code == 255, output[-5000:]
    assert _failures(output) == [
        f"kerashvdrun: host {n2} was lost: ranks 2, 3 ended without a word (their processes "
        "were killed, or the host went down); stopping the other ranks."], output[-5000:]
    assert seconds < 20, (seconds, output[-5000:])
    assert_nothing_left(ssh_nodes)
    print(f"kill: kerashvdrun ended {seconds:.1f} s after the kill")


def test_a_node_cut_off_is_named_not_the_ranks_it_left_behind(ssh_nodes):
    """The second node's link cut while the ranks allreduce: kerashvdrun names the node that
    stopped answering (within the link timeout), before the ranks of the first node fail on
    their own (their engine names a silent peer after the peer timeout)."""
    n1, n2 = ssh_nodes.nodes
    job = _ssh_job(ssh_nodes, [sys.executable, LOOP])
    try:
        cut = time.monotonic()
        _link(ssh_nodes, n2, up=False)
        code = job.finish(timeout=90)
        seconds = time.monotonic() - cut
    finally:
        _link(ssh_nodes, n2, up=True)
    output = job.output()
    assert code == 255, output[-5000:]
    assert _failures(output) == [
        f"kerashvdrun: host {n2} stopped answering (ranks 2, 3): nothing came back for "
        f"{LINK_TIMEOUT} s (a cut link, or the host is down); stopping the other ranks."], \
        output[-5000:]
    assert seconds < PEER_TIMEOUT + 25, (seconds, output[-5000:])
    # The cut-off ranks' supervisors stopped them (kerashvdrun stopped answering to them).
    assert_nothing_left(ssh_nodes, within=60)
    print(f"cut: kerashvdrun ended {seconds:.1f} s after the cut")


def test_elastic_drops_the_cut_off_node_of_rank_0_and_takes_it_back(ssh_nodes, tmp_path):
    """Elastic, 2 nodes x 2 ranks, kerashvdrun outside the nodes; discovery lists both nodes
    all along. The link of rank 0's node is cut mid-epoch: kerashvdrun names the node, the
    ranks of the other hand over, and a world of 2 trains there. Once the link is back the
    node answers kerashvdrun's check again and the job grows back to 4 ranks at its next
    commit; every rank of the last world ends with the same model and optimizer bytes."""
    n1, n2 = ssh_nodes.nodes
    script, _ = discovery(tmp_path, f"{n1}:2\n{n2}:2\n")
    out = tmp_path / "out"
    out.mkdir()
    epochs, steps = 2, 20
    job = Job([sys.executable, "-m", "kerashvd.launcher.cli", "--ssh-config-file",
               ssh_nodes.ssh_config, "--min-np", "2", "--max-np", "4",
               "--host-discovery-script", script, sys.executable, TRAIN, str(out), "--epochs",
               str(epochs), "--steps", str(steps), "--pace", "0.1"],
              env=dict(os.environ, **ENV, **NODE_MPI_ENV))
    job.wait_for(lambda e: e["event"] == "step" and e["step"] >= 5, "step 5 of world 1", 240)
    cut = time.time()
    _link(ssh_nodes, n1, up=False)
    try:
        job.wait_for(f"kerashvdrun: host {n1} stopped answering (ranks 0, 1)", "the node named",
                     timeout=LINK_TIMEOUT + 15)
        named = time.time()
        world = job.wait_for(lambda e: e["event"] == "world" and e["world"] == 1,
                             "world 2", timeout=PEER_TIMEOUT + 90)
    finally:
        _link(ssh_nodes, n1, up=True)
    back = time.time()
    assert job.finish(timeout=240) == 0, job.output()[-6000:]
    log = job.output()
    assert [(w["world"], w["size"]) for w in job.of("world")] == [(0, 4), (1, 2), (2, 4)], log
    assert f"rank 0 stopped answering (nothing came back for {LINK_TIMEOUT} s); rank 1 " \
           f"stopped answering (nothing came back for {LINK_TIMEOUT} s); ranks 2, 3 handed " \
           "over (commit" in log, log
    assert f"kerashvdrun: elastic: world 2: 2 ranks on {n2}:2, from commit" in log, log
    assert f"kerashvdrun: elastic: {n1} answers again: ranks may run there again." in log, log
    assert f"kerashvdrun: elastic: world 3: 4 ranks on {n1}:2,{n2}:2" in log, log
    finals = job.of("final", world=2)
    assert sorted(e["host"] for e in finals) == [n1, n1, n2, n2], log
    assert len({e["digest"] for e in finals}) == 1, finals
    assert [e["step"] for e in job.of("step")][-1] == epochs * steps
    assert_nothing_left(ssh_nodes)
    print(f"elastic cut: node named {named - cut:.1f} s after the cut; world 2 trained "
          f"{world['time'] - cut:.1f} s after it; world 3 trained "
          f"{job.of('world')[2]['time'] - back:.1f} s after the link came back")
