"""``python -m kerashvd.bench`` across two nodes with shaped links, as one command.

    sudo python tests/multinode_bench.py [--rates 10gbit,1gbit] [--parts allreduce,keras]
        [--allreduce-args "--sizes 4K,1M,16M,64M"] [--keras-args "--repeats 2"]
    sudo python tests/multinode_bench.py --rates 200mbit,50mbit --parts overlap
        [--overlap-args "--cycles 40 --caps 0.25,4"]

Starts the 2-node test cluster of tests/multinode_cluster.py (root and the SLURM packages
needed), and for each rate limits both directions of every node's link with a token bucket
(``tc qdisc ... tbf rate R``: on the node's eth0, what it sends, and on the bridge's end of
its veth, what it receives; ``none``: no limit), then runs, each in one SLURM job of
2 nodes x 2 ranks:

- ``allreduce``: ``srun -N 2 --ntasks-per-node=2 python -m kerashvd.bench --hierarchical
  off,on ...``: allreduce through kerashvd flat and hierarchical next to raw MPI of the same
  bytes, the 4 KiB latency and the 100 x 16 KiB step, measured in turn in one run;
- ``keras``: ``python -m kerashvd.bench keras --np 4 --launcher "srun ... -N 2
  --ntasks-per-node=2" --hierarchical off,on ...``: Keras training scaling at 2 nodes x 2
  ranks, flat and hierarchical (the 1-process runs go where this script runs);
- ``overlap``: ``srun -N 2 --ntasks-per-node=1 python -m kerashvd.bench overlap ...``: at 2
  nodes x 1 rank (the cores are not shared by two ranks of a node), the Keras step with the
  default gradient buckets next to compute only, allreduce only and one collective.

Prints each table under a header naming the rate. Only a delay cannot be added: this
machine's kernel has neither ``netem`` nor ``fq`` (tc says "Specified qdisc kind is unknown"),
so the links keep the veth's own latency, which the 4 KiB rows show. Everything runs on this
one machine's cores: read the ratios measured side by side, not the absolute figures.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import multinode_cluster  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS = ["-N", "2", "--ntasks-per-node=2"]
ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
# The lines of the overlap benchmark's tables (besides '#' and 'per round' lines).
OVERLAP_LINE = re.compile(r"(configuration|compute only|allreduce only|default|one collective|"
                          r"num_groups|cap=|step |One default step|collective|\S+\.bucket)")


def shape(cluster, rate, burst):
    """Limits every node's link to `rate` in both directions ('none': removes the limit)."""
    for node, veth in zip(cluster.nodes, cluster.veths):
        for prefix, dev in ((["ip", "netns", "exec", node], "eth0"), ([], veth)):
            if rate == "none":
                subprocess.run(prefix + ["tc", "qdisc", "del", "dev", dev, "root"],
                               capture_output=True, timeout=30)  # absent already: fine
                continue
            subprocess.run(prefix + ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                                     rate, "burst", burst, "latency", "10ms"],
                           check=True, capture_output=True, text=True, timeout=30)


def run_part(cluster, argv, what, timeout):
    """Runs `argv` against the cluster (a start that fails in MPI's start-up is tried again,
    as in the tests); prints its output; returns whether it succeeded."""
    def launch():
        return multinode_cluster.run_job(cluster, argv, env=ENV, timeout=timeout, cwd=REPO)

    ok, output = multinode_cluster.retry_start(launch, what)
    if ok:  # the tables, without the ranks' stderr (TensorFlow's notices)
        output = "".join(line for line in output.splitlines(keepends=True)
                         if line.startswith(("#", " ", "kerashvd", "plain", "per round"))
                         or OVERLAP_LINE.match(line))
    print(output if ok else f"{what} failed:\n{output[-5000:]}", flush=True)
    return ok


def run(cluster, args):
    """Measures every rate of `args` (parsed by :func:`parser`) on a running 2-node cluster;
    leaves its links unlimited. Returns the number of parts that failed."""
    parts = args.parts.split(",")
    python = sys.executable
    failed = 0
    try:
        for rate in args.rates.split(","):
            shape(cluster, rate, args.burst)
            print(f"## links: {'no limit' if rate == 'none' else rate + ' each way (tc tbf)'}; "
                  f"2 nodes ({', '.join(cluster.nodes)}; allreduce and keras: 2 ranks each, "
                  "overlap: 1 rank each)", flush=True)
            if "allreduce" in parts:
                failed += not run_part(
                    cluster, ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1", *RANKS, python, "-m",
                              "kerashvd.bench", "--hierarchical", args.hierarchical,
                              *shlex.split(args.allreduce_args)], f"allreduce bench at {rate}",
                    args.timeout)
            if "overlap" in parts:
                failed += not run_part(
                    cluster, ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1", "-N", "2",
                              "--ntasks-per-node=1", python, "-m", "kerashvd.bench", "overlap",
                              *shlex.split(args.overlap_args)], f"overlap bench at {rate}",
                    args.timeout)
            if "keras" in parts:
                launcher = " ".join(["srun", "--mpi=pmi2", "--kill-on-bad-exit=1", *RANKS])
                failed += not run_part(
                    cluster, [python, "-m", "kerashvd.bench", "keras", "--np", "4", "--launcher",
                              launcher, "--hierarchical", args.hierarchical,
                              "--timeout", str(args.timeout), *shlex.split(args.keras_args)],
                    f"keras bench at {rate}", args.timeout * 12)
    finally:
        shape(cluster, "none", args.burst)
    return failed


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="10gbit,1gbit",
                   help="link rates to measure, in tc's units, 'none' for no limit "
                        "(default 10gbit,1gbit)")
    p.add_argument("--burst", default="256kb", help="tbf bucket size (default 256kb)")
    p.add_argument("--parts", default="allreduce,keras",
                   help="allreduce, keras, overlap, or several separated by commas "
                        "(default allreduce,keras)")
    p.add_argument("--hierarchical", default="off,on",
                   help="modes compared (default off,on)")
    p.add_argument("--allreduce-args", default="--sizes 4K,1M,16M,64M",
                   help="more arguments of python -m kerashvd.bench")
    p.add_argument("--keras-args", default="", help="more arguments of python -m kerashvd.bench keras")
    p.add_argument("--overlap-args", default="",
                   help="more arguments of python -m kerashvd.bench overlap")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds a job may take before it counts as hung in MPI's start and is "
                        "started again (default 900; the Keras runs get it each)")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    cluster_gen = multinode_cluster._cluster(2)
    try:
        cluster = next(cluster_gen)
    except BaseException as err:  # pytest.skip outside pytest: say why and stop
        if type(err).__name__ == "Skipped":
            print(f"cannot start the test cluster: {err}", file=sys.stderr)
            return 2
        raise
    try:
        failed = run(cluster, args)
    finally:
        next(cluster_gen, None)  # tears the cluster down; raises if it did not stop cleanly
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
