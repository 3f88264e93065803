"""tests/integration/multinode_bench.py at tiny sizes on the 2-node test cluster: the benchmark across
nodes keeps working (its tables come out whole, nothing wrong); speed is not tested."""

import re

import pytest

import multinode_bench

pytestmark = [pytest.mark.slurm, pytest.mark.mpi, pytest.mark.slow]


def test_benchmark_across_two_nodes_with_shaped_links(cluster_2_nodes, capsys):
    args = multinode_bench.parser().parse_args([
        "--rates", "1gbit", "--layouts", "2x2-cyclic",
        "--allreduce-args", "--sizes 4K,64K --seconds 0.02 --repeats 1",
        "--keras-args", "--steps 2 --warmup 1 --batch 8 --repeats 1 --no-baselines --mwms"])
    failed = multinode_bench.run(cluster_2_nodes, args)
    out = capsys.readouterr().out
    assert failed == 0, out[-5000:]
    assert "## links: 1gbit each way (tc tbf); layout 2x2-cyclic: srun -N 2 -n 4 " \
           "--distribution=cyclic" in out, out[-5000:]
    assert "4 ranks on 2 nodes (2+2 ranks), ranks not in node order: 0 1 0 1" in out, out[-5000:]
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d", line)]
    assert [int(r[0]) for r in rows] == [4096, 65536], out[-5000:]
    # Columns: size, then time, busbw, across, #wrong of off, on and auto, auto's path, ...
    assert all(r[4] == "0" and r[8] == "0" and r[12] == "0" for r in rows), out
    assert [r[13] for r in rows] == ["flat", "node"], out  # cyclic: node by node from 64 KiB
    # At 64 KiB each node sends about the message across flat with ranks alternating between
    # nodes (MPICH's reduce-scatter + allgather: halves across), half that node by node.
    flat, node = float(rows[1][3]), float(rows[1][7])
    assert 1.6 < flat < 2.6 and 0.8 < node < 1.3, out
    assert out.count("(#wrong 0)") == 3, out[-5000:]
    for label in ("kerashvd, 4 ranks, hierarchical off", "kerashvd, 4 ranks, hierarchical on"):
        assert re.search(re.escape(label) + r" +\d+\.\d images/s +scaling efficiency", out), out
    # tf.distribute's workers found each other across the nodes (gRPC between namespaces).
    assert re.search(r"tf_keras, MultiWorkerMirroredStrategy, 4 workers +\d+\.\d images/s", out), out
    # The links were limited while it ran, and are not any more.
    for node in cluster_2_nodes.nodes:
        assert "tbf" not in cluster_2_nodes.run(
            ["ip", "netns", "exec", node, "tc", "qdisc", "show", "dev", "eth0"]).stdout


def test_compression_halves_the_bytes_across_the_link(cluster_2_nodes, capsys):
    """fp16 and bf16 travel as 16-bit values: at 2 nodes x 1 rank each node sends the float32
    tensor's bytes once for none (reduce-scatter + allgather of halves), half that compressed."""
    args = multinode_bench.parser().parse_args([
        "--rates", "1gbit", "--parts", "compression-allreduce", "--compression-layouts", "2x1",
        "--compression-args", "--sizes 1M --seconds 0.05 --repeats 1"])
    failed = multinode_bench.run(cluster_2_nodes, args)
    out = capsys.readouterr().out
    assert failed == 0, out[-5000:]
    assert "kerashvd compression benchmark: 2 ranks on 2 nodes" in out, out[-5000:]
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+1048576\s", line)]
    assert len(rows) == 1, out[-5000:]
    # size, then time, across, vs none, error of none, fp16 and bf16, then raw MPI's time, across
    row = rows[0]
    none, fp16, bf16 = float(row[2]), float(row[6]), float(row[10])
    assert 0.9 < none < 1.3 and 0.9 < float(row[14]) < 1.3, out
    assert 0.4 < fp16 < 0.65 and 0.4 < bf16 < 0.65, out
    assert float(row[4]) < 1e-6 and 0 < float(row[8]) < 1e-2 and 0 < float(row[12]) < 2e-2, out
