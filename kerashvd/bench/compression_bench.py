"""``python -m kerashvd.bench compression``: what gradient compression saves per allreduce.

For each size of ``--sizes`` (bytes of float32), a Sum allreduce of a float32 tensor in a
``tf.function`` with each compression of ``--compressions`` (``none``; ``fp16``, ``bf16``: cast
to the half type, allreduced in it, cast back, as ``DistributedOptimizer(compression=...)``
does), next to raw MPI's float32 allreduce of the same bytes (mpi4py ``Allreduce``). Everything
is timed in turn over ``--repeats`` rounds, each figure the median of its rounds. Columns:

- ``time(us)`` per call of each compression, and raw MPI's;
- ``across``: the most bytes any node sent on its network interfaces per allreduce, over the
  float32 tensor's bytes (``/proc/net/dev``; 0 on one host, where MPI uses shared memory);
- ``vs none``: the compression's time over ``none``'s;
- ``error``: the largest difference from the exact sum, relative to the largest magnitude of
  the exact sum (inputs are normally distributed, as gradients roughly are).

Run it across nodes (``srun -N 2 ... python -m kerashvd.bench compression``; the multi-node
test cluster: ``tests/integration/multinode_bench.py --parts compression``): on one host the
transfer is a memory copy and the casts are most of what compression changes.
"""

import argparse
import socket
import statistics

from . import header

_ERROR_ELEMENTS = 1 << 16  # elements whose error is checked (every rank can recompute them)


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m kerashvd.bench compression", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks to start when not under MPI (default 2)")
    p.add_argument("--sizes", default="1M,16M,64M",
                   help="comma-separated float32 sizes in bytes (K/M suffixes; default 1M,16M,64M)")
    p.add_argument("--compressions", default="none,fp16,bf16",
                   help="kerashvd.Compression members to compare (default none,fp16,bf16)")
    p.add_argument("--seconds", type=float, default=1.0, help="time per measurement and round")
    p.add_argument("--repeats", type=int, default=3, help="rounds; each figure is the median")
    return p.parse_args(argv)


def _inputs(np, rank, count):
    """Rank `rank`'s float32 input: normal values; its first elements are reproducible on
    every rank (for the error)."""
    return np.random.default_rng([5, rank]).standard_normal(count, dtype=np.float32)


def run(args):
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    import kerashvd as hvd

    from .allreduce_bench import _bytes, _header, _layout, _time_calls
    from .hierarchy_bench import _Nodes

    started = header.now()
    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    sync = lambda v: comm.allreduce(v, op=MPI.MAX)  # noqa: E731
    hvd.init()
    nodes = _Nodes(comm)
    hosts = comm.allgather(socket.gethostname())
    sizes = [_bytes(s) for s in args.sizes.split(",")]
    names = args.compressions.split(",")
    for name in names:
        if not hasattr(hvd.Compression, name):
            raise SystemExit(f"--compressions: no kerashvd.Compression.{name}; "
                             "expected none, fp16 or bf16")

    def reducer(name, nbytes):
        compression = getattr(hvd.Compression, name)
        return tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, compression=compression,
                                                    name=f"bench.compression.{name}.{nbytes}"))

    times, across, error = {}, {}, {}
    for nbytes in sizes:
        count = nbytes // 4
        x = tf.constant(_inputs(np, rank, count))
        a, b = x.numpy(), np.empty(count, np.float32)
        exact = np.sum([_inputs(np, q, _ERROR_ELEMENTS)[:count].astype(np.float64)
                        for q in range(n)], axis=0)
        fns = {name: reducer(name, nbytes) for name in names}
        calls = [(lambda f=f: f(x)) for f in fns.values()] + [lambda: comm.Allreduce(a, b)]
        for _ in range(args.repeats):
            for i, t in enumerate(_time_calls(calls, args.seconds, sync)):
                times.setdefault((nbytes, i), []).append(t)
        for i, (name, fn) in enumerate(fns.items()):
            across[(nbytes, i)] = nodes.traffic(calls[i], nbytes)
            got = fn(x).numpy()[:_ERROR_ELEMENTS].astype(np.float64)
            error[(nbytes, name)] = sync(float(np.max(np.abs(got - exact)) / np.max(np.abs(exact))))
        across[(nbytes, len(names))] = nodes.traffic(calls[-1], nbytes)
    hvd.shutdown()
    if rank != 0:
        return

    def med(nbytes, i):
        return statistics.median(times[(nbytes, i)])

    print(f"# kerashvd compression benchmark: {n} ranks{_layout(hosts)}, {nodes.placement()}, "
          f"float32 Sum allreduce in tf.function with each compression, raw MPI float32 "
          f"allreduce; median of {args.repeats} rounds; across: most bytes a node sent over "
          "its link per allreduce / the float32 tensor's bytes; error: max |result - exact| / "
          "max |exact|")
    print("\n".join(_header(hosts, started)))
    head = f"# {'size(B)':>10}"
    for name in names:
        head += f" {name + '(us)':>10} {'across':>6} {'vs none':>7} {'error':>8}"
    print(head + f" {'mpi(us)':>10} {'across':>6}", flush=True)
    for nbytes in sizes:
        line = f"  {nbytes:>10}"
        base = med(nbytes, names.index("none")) if "none" in names else None
        for i, name in enumerate(names):
            t = med(nbytes, i)
            ratio = f"{t / base:>7.2f}" if base else f"{'-':>7}"
            line += (f" {t * 1e6:>10.1f} {across[(nbytes, i)]:>6.2f} {ratio} "
                     f"{error[(nbytes, name)]:>8.1e}")
        line += f" {med(nbytes, len(names)) * 1e6:>10.1f} {across[(nbytes, len(names))]:>6.2f}"
        print(line, flush=True)


def main(argv):
    from .__main__ import bench_main

    return bench_main("compression", _parse, run, argv)
