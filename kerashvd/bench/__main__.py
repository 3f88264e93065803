"""``python -m kerashvd.bench [allreduce]``: allreduce through the TF op against raw MPI.
``python -m kerashvd.bench keras``: Keras training throughput (see keras_bench).
``python -m kerashvd.bench elastic``: what elastic commits cost a step (see elastic_bench).
``python -m kerashvd.bench overlap``: how much gradient reduction hides behind backprop
(see overlap_bench).
``python -m kerashvd.bench latency``: where a small allreduce's time goes, engine phase by
phase, next to raw MPI (see latency_bench).
``python -m kerashvd.bench compression``: what fp16/bf16 compression saves per allreduce, and
the bytes each node sends (see compression_bench).

Started without an MPI launcher it relaunches itself with ``kerashvdrun -np NP`` (default 2).
Each benchmark's output opens with '#' lines that record the run: date and time (UTC), host,
CPU count, ranks and nodes, TensorFlow, Keras, kerashvd and MPI versions, the settings in the
environment and the command line (bench/header.py). Then it prints, for float32 Sum
allreduces of each size: time per call, algbw and busbw (nccl-tests
factor 2(n-1)/n), #wrong elements in the last result, raw MPI's time and busbw for the same
bytes (mpi4py ``Allreduce`` on numpy arrays), and the ratio of busbw; then the same size
inside a graph: what each further allreduce adds to a tf.function that runs K of them one
after the other, each on the previous one's result (graph(us), with its own #wrong), raw
MPI's in-place allreduce of the same bytes, and their ratio (graph ratio). Compared
functions are
timed in turn over several rounds and each reports its median round, so that the machine's
drift during the run does not bias the ratios. Then the latency of a
single 4 KiB allreduce and of 100 tensors of 16 KiB in one tf.function step.

With ``--hierarchical off,on,auto`` (several modes) every figure is measured for each mode of
the hierarchical collectives side by side with raw MPI, kerashvd being initialized once per
mode in each round, with the bytes each node sends across its link per allreduce, the path
auto chose and how close it came to the faster of off and on (see hierarchy_bench; run it
across nodes, e.g. inside ``srun -N 2``; on one host every mode is flat).
tests/integration/multinode_bench.py runs it on the multi-node test cluster with shaped links.
"""

import argparse
import os
import subprocess
import sys


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m kerashvd.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks to start when not under MPI (default 2)")
    p.add_argument("--sizes", default="4K,64K,1M,16M,64M",
                   help="comma-separated message sizes in bytes (K/M suffixes)")
    p.add_argument("--seconds", type=float, default=1.0, help="target time per measurement")
    p.add_argument("--repeats", type=int, default=5,
                   help="rounds in which the compared functions are timed in turn; each reports "
                        "its median round (default 5)")
    p.add_argument("--threads", type=int, default=1, help="TF intra/inter-op threads per rank")
    p.add_argument("--hierarchical", default="",
                   help="hierarchical_allreduce/_allgather setting(s) to measure: one of off, on, "
                        "auto, or several separated by commas to compare them side by side "
                        "(default: the KERASHVD_HIERARCHICAL_* variables)")
    return p.parse_args(argv)


def _under_mpi():
    return any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"))


def relaunch(argv, np):
    """Outside an MPI launcher, with np > 1: runs ``python -m kerashvd.bench *argv`` on np ranks
    through kerashvdrun (whose supervisors keep TensorFlow's start-up notices out of the
    tables) and returns its exit status; else None (the caller measures in this process)."""
    if _under_mpi() or np <= 1:
        return None
    return subprocess.call([sys.executable, "-m", "kerashvd.launcher.cli", "-np", str(np),
                            sys.executable, "-m", "kerashvd.bench", *argv])


def bench_main(name, parse, run, argv):
    """``python -m kerashvd.bench NAME *argv``: parses, relaunches on ``--np`` ranks outside a
    launcher (:func:`relaunch`), else measures in this process with ``run(args)``."""
    args = parse(argv)
    status = relaunch([name, *argv], args.np)
    if status is not None:
        return status
    run(args)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["keras"]:
        from .keras_bench import main as keras_main

        return keras_main(argv[1:])
    if argv[:1] == ["overlap"]:
        from .overlap_bench import main as overlap_main

        return overlap_main(argv[1:])
    if argv[:1] == ["latency"]:
        from .latency_bench import main as latency_main

        return latency_main(argv[1:])
    if argv[:1] == ["compression"]:
        from .compression_bench import main as compression_main

        return compression_main(argv[1:])
    if argv[:1] == ["elastic"]:
        from .elastic_bench import main as elastic_main

        return elastic_main(argv[1:])
    if argv[:1] == ["allreduce"]:
        argv = argv[1:]
    args = _parse(argv)
    status = relaunch(argv, args.np)
    if status is not None:
        return status
    from .allreduce_bench import run

    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
