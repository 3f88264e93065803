"""The measurements behind ``python -m kerashvd.bench`` (see __main__ for the table's meaning)."""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _bytes(text):
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * scale)


def _time_calls(fns, seconds, sync, repeats=1):
    """Seconds per call of each fn() in `fns` (about `seconds` of calls each), after warm-up.

    The functions are timed in turn, `repeats` rounds of about `seconds / repeats` each, and each
    gets the median of its rounds: a drift of the machine's speed during the run then hits every
    function alike, and so cancels out of the ratios printed between them. All ranks agree on
    the number of calls.
    """
    iters = []
    for fn in fns:
        for _ in range(3):
            fn()
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-6)
        iters.append(sync(max(5, min(20000, int(seconds / repeats / once)))))
    rounds = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(iters[i]):
                fn()
            rounds[i].append((time.perf_counter() - start) / iters[i])
    return [sync(sorted(r)[len(r) // 2]) for r in rounds]


def run(args):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(2, args.threads))
    import kerashvd as hvd
    from mpi4py import MPI

    hvd.init()
    comm = MPI.COMM_WORLD
    n, rank = hvd.size(), hvd.rank()
    sync = lambda v: comm.allreduce(v, op=MPI.MAX)  # noqa: E731
    factor = 2.0 * (n - 1) / n if n > 1 else 1.0

    def say(text=""):
        if rank == 0:
            print(text, flush=True)

    say(f"# kerashvd allreduce benchmark: {n} ranks, float32 Sum, TF op in tf.function vs raw MPI")
    say(f"# command: {' '.join([os.path.basename(sys.executable), '-m', 'kerashvd.bench'] + sys.argv[1:])}"
        f"; TF_CPU_ALLOCATOR_USE_BFC={os.environ.get('TF_CPU_ALLOCATOR_USE_BFC')}")
    say(f"# {'size(B)':>10} {'count':>10} {'time(us)':>10} {'algbw':>7} {'busbw':>7} {'#wrong':>6}"
        f" {'mpi(us)':>10} {'mpi busbw':>9} {'ratio':>6}")

    for nbytes in [_bytes(s) for s in args.sizes.split(",")]:
        count = nbytes // 4
        x = tf.constant(np.full(count, rank + 1, np.float32))

        @tf.function
        def step(t):
            return hvd.allreduce(t, op=hvd.Sum, name=f"bench.{nbytes}")

        a = np.full(count, rank + 1, np.float32)
        b = np.empty_like(a)
        t_op, t_mpi = _time_calls([lambda: step(x).numpy() if count < 1024 else step(x),
                                   lambda: comm.Allreduce(a, b)], args.seconds, sync, args.repeats)
        out = step(x).numpy()
        wrong = int(np.count_nonzero(out != n * (n + 1) / 2))
        busbw = nbytes / t_op / 1e9 * factor
        mpi_busbw = nbytes / t_mpi / 1e9 * factor
        say(f"  {nbytes:>10} {count:>10} {t_op * 1e6:>10.1f} {nbytes / t_op / 1e9:>7.3f} {busbw:>7.3f}"
            f" {wrong:>6} {t_mpi * 1e6:>10.1f} {mpi_busbw:>9.3f} {busbw / mpi_busbw:>6.2f}")

    # Latency of one small allreduce, end to end through a tf.function call, next to the same
    # tf.function without the collective: TF's own dispatch cost, measured in the same run.
    x = tf.constant(np.ones(1024, np.float32))
    small = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="bench.latency"))
    floor = tf.function(lambda t: t * 1.0)
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
    @tf.function
    def chain(t):
        for i in range(20):
            t = hvd.allreduce(t, op=hvd.Min, name=f"bench.chain.{i}")
        return t

    (t_chain,) = _time_calls([lambda: chain(x)], args.seconds, sync, args.repeats)
    say(f"# 4 KiB allreduce chained 20 deep in one tf.function: {t_chain / 20 * 1e3:.3f} ms each")

    # 100 tensors of 16 KiB reduced in one step: separate ops (fused by the engine) and grouped,
    # next to the same step without collectives.
    xs = [tf.constant(np.full(4096, i, np.float32)) for i in range(100)]

    @tf.function
    def many(ts):
        return [hvd.allreduce(t, op=hvd.Sum, name=f"bench.many.{i}") for i, t in enumerate(ts)]

    @tf.function
    def grouped(ts):
        return hvd.grouped_allreduce(ts, op=hvd.Sum, name="bench.grouped")

    @tf.function
    def no_collective(ts):
        return [t * 1.0 for t in ts]

    t_none, t_many, t_grouped = _time_calls(
        [lambda: no_collective(xs), lambda: many(xs), lambda: grouped(xs)], args.seconds, sync,
        args.repeats)
    outs = many(xs)
    wrong = sum(int(np.count_nonzero(o.numpy() != i * n)) for i, o in enumerate(outs))
    say(f"# 100 x 16 KiB in one tf.function step: {t_many * 1e3:.3f} ms as 100 allreduces "
        f"(#wrong {wrong}), {t_grouped * 1e3:.3f} ms as one grouped_allreduce; the same step "
        f"without collectives: {t_none * 1e3:.3f} ms")

    # The same 100 tensors as a training step has them: made inside the step (from variables)
    # and consumed there (assigned back), so no tensor crosses the tf.function boundary.
    vs = [tf.Variable(np.full(4096, i, np.float32)) for i in range(100)]

    @tf.function
    def train_like():
        for v, r in zip(vs, hvd.grouped_allreduce([v * 1.0 for v in vs], op=hvd.Average,
                                                  name="bench.vars")):
            v.assign(r)

    @tf.function
    def train_like_alone():
        for v in vs:
            v.assign(v * 1.0)

    t_vars_none, t_vars = _time_calls([train_like_alone, train_like], args.seconds, sync,
                                      args.repeats)
    wrong = sum(int(np.count_nonzero(v.numpy() != i)) for i, v in enumerate(vs))
    say(f"# 100 x 16 KiB made and used inside one tf.function step (variables): "
        f"{t_vars * 1e3:.3f} ms with one grouped_allreduce (#wrong {wrong}); the same step "
        f"without it: {t_vars_none * 1e3:.3f} ms")
    hvd.shutdown()
