"""The measurements behind ``python -m kerashvd.bench`` (see __main__ for the table's meaning)."""

import os
import socket
import sys
import time

from . import header

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _bytes(text):
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * scale)


def _time_calls(fns, seconds, sync, repeats=1, iters=None):
    """Seconds per call of each fn() in `fns` (about `seconds` of calls each), after warm-up.

    The functions are timed in turn, `repeats` rounds of about `seconds / repeats` each, every
    round started by all ranks together, and each gets the median of its rounds: a drift of the machine's speed during the run then hits every
    function alike, and so cancels out of the ratios printed between them. All ranks agree on
    the number of calls. `iters` (optional, a dict by index) keeps the number of calls of each
    function from one use to the next, so that rounds measured apart stay comparable.
    """
    iters = {} if iters is None else iters
    for i, fn in enumerate(fns):
        for _ in range(3):
            fn()
        if i not in iters:
            start = time.perf_counter()
            fn()
            once = max(time.perf_counter() - start, 1e-6)
            iters[i] = sync(max(5, min(20000, int(seconds / repeats / once))))
    rounds = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            # Every rank starts the round together: a rank that finished the previous function
            # sooner would otherwise wait inside this one's first collective, and the other
            # ranks' remaining time would count as this function's.
            sync(0)
            start = time.perf_counter()
            for _ in range(iters[i]):
                fn()
            rounds[i].append((time.perf_counter() - start) / iters[i])
    return [sync(sorted(r)[len(r) // 2]) for r in rounds]


class _Cases:
    """Every measurement of the benchmark for one initialized kerashvd, built once and reused
    across re-initializations (the tf.functions call whichever engine is running)."""

    def __init__(self, hvd, tf, np, comm, args):
        self.hvd, self.tf, self.np, self.comm, self.args = hvd, tf, np, comm, args
        self.n, self.rank = comm.Get_size(), comm.Get_rank()
        self.sizes = [_bytes(s) for s in args.sizes.split(",")]
        self._steps = {}
        self.x4k = tf.constant(np.ones(1024, np.float32))
        self.small = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="bench.latency"))
        self.floor = tf.function(lambda t: t * 1.0)
        self.xs = [tf.constant(np.full(4096, i, np.float32)) for i in range(100)]
        self.vs = [tf.Variable(np.full(4096, i, np.float32)) for i in range(100)]

    def step(self, nbytes):
        """(op call, raw MPI call, #wrong elements of the op's last result) for one size."""
        if nbytes not in self._steps:
            tf, np, hvd, n = self.tf, self.np, self.hvd, self.n
            count = nbytes // 4
            x = tf.constant(np.full(count, self.rank + 1, np.float32))
            fn = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name=f"bench.{nbytes}"))
            a = np.full(count, self.rank + 1, np.float32)
            b = np.empty_like(a)
            op = (lambda: fn(x).numpy()) if count < 1024 else (lambda: fn(x))
            mpi = lambda: self.comm.Allreduce(a, b)  # noqa: E731
            wrong = lambda: int(np.count_nonzero(fn(x).numpy() != n * (n + 1) / 2))  # noqa: E731
            self._steps[nbytes] = (op, mpi, wrong)
        return self._steps[nbytes]

    def in_graph(self, nbytes):
        """(K, a call of K allreduces of `nbytes` one after the other inside one tf.function,
        the same with one allreduce, #wrong elements of the K-chain's result).

        Each allreduce reduces the previous one's result, so the engine never fuses two, and
        all but the first run in place, as the optimizer's allreduces of a training step reduce
        the gradients that TensorFlow hands over (the baseline is raw MPI's in-place
        allreduce). The time per allreduce is (time of K - time of 1) / (K - 1): what each
        further allreduce adds to a step, without the function's dispatch and without the
        first one, which reads the function's input and so runs out of place. The values grow
        by a factor of the world size per allreduce (K stays low enough for float32), and are
        checked within float32 rounding.
        """
        tf, np, hvd, n = self.tf, self.np, self.hvd, self.n
        k = max(3, min(20, (32 << 20) // max(nbytes, 1)))
        if n > 1:
            k = max(3, min(k, int(30 / np.log10(n))))
        x = tf.constant(np.ones(nbytes // 4, np.float32))

        def chain(length):
            @tf.function
            def run(t):
                for i in range(length):
                    t = hvd.allreduce(t, op=hvd.Sum, name=f"bench.graph{length}.{nbytes}.{i}")
                return t
            return run

        long, short = chain(k), chain(1)
        expected = float(n) ** k
        wrong = lambda: int(np.count_nonzero(  # noqa: E731
            ~np.isclose(long(x).numpy(), expected, rtol=1e-5, atol=0)))
        return k, (lambda: long(x)), (lambda: short(x)), wrong

    def raw_mpi_inplace(self, nbytes):
        """Raw MPI's in-place allreduce of `nbytes` (the engine's fusion buffer is reduced in
        place)."""
        buffer = self.np.ones(nbytes // 4, self.np.float32)
        from mpi4py import MPI
        return lambda: self.comm.Allreduce(MPI.IN_PLACE, buffer)

    def chain(self):
        hvd = self.hvd

        @self.tf.function
        def chain(t):
            for i in range(20):
                t = hvd.allreduce(t, op=hvd.Min, name=f"bench.chain.{i}")
            return t

        return chain

    def many(self):
        hvd = self.hvd
        many = self.tf.function(lambda ts: [hvd.allreduce(t, op=hvd.Sum, name=f"bench.many.{i}")
                                            for i, t in enumerate(ts)])
        grouped = self.tf.function(lambda ts: hvd.grouped_allreduce(ts, op=hvd.Sum,
                                                                    name="bench.grouped"))
        none = self.tf.function(lambda ts: [t * 1.0 for t in ts])
        return many, grouped, none

    def many_wrong(self, many):
        return sum(int(self.np.count_nonzero(o.numpy() != i * self.n))
                   for i, o in enumerate(many(self.xs)))

    def train_like(self):
        hvd, vs = self.hvd, self.vs

        @self.tf.function
        def train_like():
            for v, r in zip(vs, hvd.grouped_allreduce([v * 1.0 for v in vs], op=hvd.Average,
                                                      name="bench.vars")):
                v.assign(r)

        @self.tf.function
        def train_like_alone():
            for v in vs:
                v.assign(v * 1.0)

        return train_like, train_like_alone


def run(args):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(2, args.threads))
    import kerashvd as hvd
    from mpi4py import MPI

    modes = [m.strip() for m in args.hierarchical.split(",")] if args.hierarchical else []
    if len(modes) > 1:
        from .hierarchy_bench import run_modes

        return run_modes(args, modes, hvd, tf, np, MPI.COMM_WORLD)
    settings = {"hierarchical_allreduce": modes[0], "hierarchical_allgather": modes[0]} \
        if modes else {}
    hvd.init(**settings)
    comm = MPI.COMM_WORLD
    n, rank = hvd.size(), hvd.rank()
    sync = lambda v: comm.allreduce(v, op=MPI.MAX)  # noqa: E731
    factor = 2.0 * (n - 1) / n if n > 1 else 1.0
    cases = _Cases(hvd, tf, np, comm, args)

    def say(text=""):
        if rank == 0:
            print(text, flush=True)

    hosts = comm.allgather(socket.gethostname())
    say(f"# kerashvd allreduce benchmark: {n} ranks{_layout(hosts)}, float32 Sum, TF op in "
        "tf.function vs raw MPI")
    if rank == 0:
        print("\n".join(_header(hosts)), flush=True)
    say(f"# {'size(B)':>10} {'count':>10} {'time(us)':>10} {'algbw':>7} {'busbw':>7} {'#wrong':>6}"
        f" {'mpi(us)':>10} {'mpi busbw':>9} {'ratio':>6} {'graph(us)':>10} {'#wrong':>6} "
        f"{'mpi ip(us)':>10} {'graph ratio':>11}")

    for nbytes in cases.sizes:
        op, mpi, wrong = cases.step(nbytes)
        k, graph, graph_one, graph_wrong = cases.in_graph(nbytes)
        inplace = cases.raw_mpi_inplace(nbytes)
        t_op, t_mpi, t_k, t_one, t_inplace = _time_calls(
            [op, mpi, graph, graph_one, inplace], args.seconds, sync, args.repeats)
        t_graph = max(t_k - t_one, 1e-9) / (k - 1)
        busbw = nbytes / t_op / 1e9 * factor
        mpi_busbw = nbytes / t_mpi / 1e9 * factor
        say(f"  {nbytes:>10} {nbytes // 4:>10} {t_op * 1e6:>10.1f} {nbytes / t_op / 1e9:>7.3f} "
            f"{busbw:>7.3f} {wrong():>6} {t_mpi * 1e6:>10.1f} {mpi_busbw:>9.3f} "
            f"{busbw / mpi_busbw:>6.2f} {t_graph * 1e6:>10.1f} {graph_wrong():>6} "
            f"{t_inplace * 1e6:>10.1f} {t_inplace / t_graph:>11.2f}")

    # Latency of one small allreduce, end to end through a tf.function call, next to the same
    # tf.function without the collective: TF's own dispatch cost, measured in the same run.
    x, small, floor = cases.x4k, cases.small, cases.floor
    t_floor, t_small = _time_calls([lambda: floor(x), lambda: small(x)], args.seconds, sync,
                                   args.repeats)
    say(f"# single 4 KiB allreduce in tf.function: {t_small * 1e3:.3f} ms per step "
        f"(the same tf.function without the allreduce: {t_floor * 1e3:.3f} ms; "
        f"kerashvd adds {(t_small - t_floor) * 1e3:.3f} ms)")
    # The same two graphs called as concrete functions: without tf.function's Python-side
    # dispatch (argument binding, trace lookup), which is most of TF's own cost above.
    cf_floor, cf_small = floor.get_concrete_function(x), small.get_concrete_function(x)
    t_cfloor, t_csmall = _time_calls([lambda: cf_floor(x), lambda: cf_small(x)], args.seconds,
                                     sync, args.repeats)
    say(f"# the same, called as concrete functions: {t_csmall * 1e3:.3f} ms per step "
        f"(without the allreduce: {t_cfloor * 1e3:.3f} ms; kerashvd adds "
        f"{(t_csmall - t_cfloor) * 1e3:.3f} ms)")

    # 20 allreduces of 4 KiB chained inside one tf.function: per-collective latency without
    # Python's dispatch of the function call.
    chain = cases.chain()
    (t_chain,) = _time_calls([lambda: chain(x)], args.seconds, sync, args.repeats)
    say(f"# 4 KiB allreduce chained 20 deep in one tf.function: {t_chain / 20 * 1e3:.3f} ms each")

    # 100 tensors of 16 KiB reduced in one step: separate ops (fused by the engine) and grouped,
    # next to the same step without collectives.
    many, grouped, no_collective = cases.many()
    xs = cases.xs
    t_none, t_many, t_grouped = _time_calls(
        [lambda: no_collective(xs), lambda: many(xs), lambda: grouped(xs)], args.seconds, sync,
        args.repeats)
    say(f"# 100 x 16 KiB in one tf.function step: {t_many * 1e3:.3f} ms as 100 allreduces "
        f"(#wrong {cases.many_wrong(many)}), {t_grouped * 1e3:.3f} ms as one grouped_allreduce; "
        f"the same step without collectives: {t_none * 1e3:.3f} ms")

    # The same 100 tensors as a training step has them: made inside the step (from variables)
    # and consumed there (assigned back), so no tensor crosses the tf.function boundary.
    # Next to them, raw MPI's in-place allreduce of the same 1.6 MB: the part of the step's added
    # time that is MPI's own transfer on this machine, the rest is kerashvd's.
    train_like, train_like_alone = cases.train_like()
    raw = cases.raw_mpi_inplace(100 * 16384)
    t_vars_none, t_vars, t_raw = _time_calls([train_like_alone, train_like, raw], args.seconds,
                                             sync, args.repeats)
    wrong = sum(int(np.count_nonzero(v.numpy() != i)) for i, v in enumerate(cases.vs))
    say(f"# 100 x 16 KiB made and used inside one tf.function step (variables): "
        f"{t_vars * 1e3:.3f} ms with one grouped_allreduce (#wrong {wrong}); the same step "
        f"without it: {t_vars_none * 1e3:.3f} ms; it adds {(t_vars - t_vars_none) * 1e3:.3f} ms, "
        f"of which raw MPI's in-place allreduce of the same 1,638,400 bytes takes "
        f"{t_raw * 1e3:.3f} ms")
    hvd.shutdown()


def _header(hosts, started=None):
    """The run's header lines (kerashvd.bench.header): date, host, CPUs, ranks, versions,
    settings and the command line."""
    command = [sys.executable, "-m", "kerashvd.bench"] + sys.argv[1:]
    return header.lines(header.environment(), command, len(hosts), hosts, started)


def _layout(hosts):
    """' on N nodes (ranks per node ...)' from the ranks' host names, or '' on one host."""
    per_node = [hosts.count(h) for h in dict.fromkeys(hosts)]
    if len(per_node) == 1:
        return ""
    return f" on {len(per_node)} nodes ({'+'.join(map(str, per_node))} ranks)"
