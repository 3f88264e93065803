"""One rank of tests/cluster/test_hierarchical.py: the same collectives flat and node by node.

``python hierarchical.py [--modes off,on,auto] [--dtypes ...] [--float-sums-equal-flat]``: runs
:func:`battery` once per mode in one process, with ``hierarchical_allreduce`` and
``hierarchical_allgather`` set to it (``hvd.init``/``hvd.shutdown`` in between), and checks:

- every result against numpy: integers and Min/Max exactly; float sums and products exactly
  against the order the hierarchical algorithm adds in where it runs (within each node in
  local-rank order, then across the nodes in node order), else within rounding; which path an
  allreduce takes (in auto: the engine's rule, asked through ``kerashvd._core.allreduce_path``)
  is decided here as the engine decides it;
- every exact reduction (integers, Min, Max) and every allgather bit for bit equal in every
  mode, two results of the same path too, and with ``--float-sums-equal-flat`` float sums,
  products and averages as well;
- the largest tensor of a grouped (fused) allreduce bit for bit equal to the same tensor
  reduced alone.

Nodes are what MPI calls them (``MPI_COMM_TYPE_SHARED``), so on one host MPICH's cliques
(``MPIR_CVAR_NUM_CLIQUES``) stand for nodes. Every rank follows rank 0's settings: ranks may be
given different ``--modes`` (of the same length), and all check rank 0's.

Per mode: Sum, Average, Min, Max and Product of every reducible dtype at 0, 1, 7 and 2**15 + 3
elements (one grouped call, plus the largest alone), prescale/postscale, allgather (member i
gives 3i rows, the first none; dtypes without reductions too) and grouped allgather, an
allreduce while the last rank has joined, and, on 4 ranks, the same (fewer dtypes) in process
sets {0, 1, 2} and {0, 2}: on 2 nodes x 2 ranks in blocks, nodes of 2 + 1 and 1 + 1 ranks;
with ranks placed cyclically, 2 + 1 in another order than the nodes' and one node.

Prints one JSON line: rank, size, host, local/cross sizes, ``nodes`` (the ranks of each node),
``modes`` (rank 0's, as run), ``seconds`` (to start, and for each mode), the number of checks
made and the failures ([] when all hold). Exits with code 0 either way; the test reads the
failures.
"""

import argparse
import json
import os
import socket
import sys
import time

STARTED = time.monotonic()

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

MODES = ("off", "on", "auto")
SIZES = (0, 1, 7, 2**15 + 3)
REDUCIBLE = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")
OPS = ("Sum", "Average", "Min", "Max", "Product")


def _np_dtype(dtype):
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def inputs(rank, dtype, op, n, tag=0):
    """Rank `rank`'s input: random, and for Product close to 1 (floats) or small (ints)."""
    rng = np.random.default_rng([rank, REDUCIBLE.index(dtype) if dtype in REDUCIBLE else 99,
                                 OPS.index(op), n, tag])
    if "int" in dtype:
        high = 3 if op == "Product" else 100
        return rng.integers(0, high, size=n).astype(dtype)
    values = rng.uniform(0.9, 1.1, n) if op == "Product" else rng.standard_normal(n) * 1e3
    return values.astype(_np_dtype(dtype))


def _combine(op, a, b):
    return {"Min": np.minimum, "Max": np.maximum, "Product": np.multiply}.get(op, np.add)(a, b)


def expected(op, arrays, nodes, dtype, hierarchical):
    """numpy's result of `op` over `arrays` (one per member, in member order).

    Floating-point sums and products are computed in the order of the hierarchical algorithm
    when `hierarchical` (within each node in local-rank order, then the nodes' results in node
    order), else in member order; float16/bfloat16 in their own type, each step rounded to it,
    as the engine sums them (numpy and ml_dtypes compute each step in float32 and round, as the
    engine does). Integers wrap as the engine's do.
    """
    groups = nodes if hierarchical else [list(range(len(arrays)))]
    result = None
    for node in groups:
        part = arrays[node[0]]
        for i in node[1:]:
            part = _combine(op, part, arrays[i])
        result = part if result is None else _combine(op, result, part)
    if op == "Average":  # the engine's postscale: times 1/n, in float32 for the halves
        if "int" in dtype:
            result = np.trunc(result.astype(np.float64) * (1.0 / len(arrays)))
        elif dtype in ("float16", "bfloat16"):
            result = result.astype(np.float32) * np.float32(1.0 / len(arrays))
        else:
            result = result * result.dtype.type(1.0 / len(arrays))
    return result.astype(_np_dtype(dtype))


def layered(mode, nodes, nbytes, count, op="Sum", dtype="float32"):
    """Whether an allreduce of `count` elements, `nbytes` as the backend sees them (its wire
    type: float16/bfloat16 widened to float32 for Min and Max only; a grouped call's tensors
    together), among members on `nodes` runs node by node: the engine's own rule (LinkModel),
    asked through the binding with this layout and this process's MPI setting."""
    from kerashvd import _core

    node_of = [0] * sum(len(k) for k in nodes)
    for k, members in enumerate(nodes):
        for i in members:
            node_of[i] = k
    # kerashvd's float Min and Max, and every reduction of halves, are user-defined MPI
    # operations (mpi_reduce_ops.h).
    halves = dtype in ("float16", "bfloat16")
    predefined = not (halves or (op in ("Min", "Max") and "int" not in dtype))
    return _core.allreduce_path(node_of, mode, nbytes, count, predefined)["hierarchical"]


def _rounding_bound(op, dtype, arrays, want):
    """How far a float16/bfloat16 Sum, Average or Product in another order than numpy's may
    fall from it: one rounding (half an ulp of the largest partial result) per step; None for
    the other dtypes."""
    if dtype not in ("float16", "bfloat16"):
        return None
    unit = 2.0**-11 if dtype == "float16" else 2.0**-8
    steps = len(arrays)
    if op == "Product":
        return 2 * steps * unit * np.abs(want.astype(np.float64)) + 1e-30
    partial = np.sum([np.abs(a.astype(np.float64)) for a in arrays], axis=0)
    if op == "Average":
        partial = partial / len(arrays)
    return 2 * steps * unit * partial + 1e-30


def _wire_bytes(dtype, count, op):
    if dtype in ("float16", "bfloat16"):
        return count * (4 if op in ("Min", "Max") else 2)
    return count * np.dtype(dtype).itemsize


class Checks:
    def __init__(self):
        self.count = 0
        self.failures = []

    def same(self, what, got, want, exact, bound=None):
        """`got` equals `want`: bit for bit where `exact`, else within `bound` (elementwise)
        or, without one, within 1%."""
        self.count += 1
        got = np.asarray(got)
        want = np.asarray(want)
        if got.shape != want.shape or got.dtype != want.dtype:
            self.failures.append(f"{what}: shape/dtype {got.shape} {got.dtype}, expected "
                                 f"{want.shape} {want.dtype}")
            return
        if exact:
            ok = got.tobytes() == want.tobytes()
        elif bound is not None:
            ok = bool(np.all(np.abs(got.astype(np.float64) - want.astype(np.float64)) <= bound))
        else:
            ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2, atol=1e-2)
        if not ok:
            bad = np.flatnonzero(got.astype(np.float64) != want.astype(np.float64))[:3]
            self.failures.append(f"{what}: {len(bad) and got.ravel()[bad].tolist()} != "
                                 f"{want.ravel()[bad].tolist()} at {bad.tolist()} "
                                 f"({'bitwise' if exact else 'close'})")


def battery(hvd, tf, checks, members, nodes, set_, mode, label, dtypes=REDUCIBLE):
    """Runs the collectives among `members` (ranks, in order; `nodes`: lists of indices into
    `members`, one per node); checks them against numpy; returns {name: (bytes, exact)},
    `exact` where every mode must give the same bits."""
    me = members.index(hvd.rank())
    n_members = len(members)
    out = {}
    kw = {"process_set": set_} if set_ is not None else {}
    for dtype in dtypes:
        tf_dtype = getattr(tf, dtype)
        for op in OPS:
            exact = "int" in dtype or op in ("Min", "Max")
            name = f"{label}/{dtype}/{op}"
            # Every size in one grouped (fused) call, and the largest alone: the same bits.
            mine = [tf.constant(inputs(members[me], dtype, op, n), dtype=tf_dtype) for n in SIZES]
            grouped = hvd.grouped_allreduce(mine, op=getattr(hvd, op), name=name, **kw)
            alone = hvd.allreduce(mine[-1], op=getattr(hvd, op), name=name + "/alone", **kw)
            hier = layered(mode, nodes, _wire_bytes(dtype, sum(SIZES), op), sum(SIZES), op,
                           dtype)
            for n, got in zip(SIZES, grouped):
                arrays = [inputs(r, dtype, op, n) for r in members]
                want = expected(op, arrays, nodes, dtype, hier)
                # Float sums and products are exact against the hierarchical order where it
                # runs (half types step by step in their own type: exact too); flat, MPI's
                # order is its own: within its rounding (half types: one rounding per step).
                checks.same(f"{mode} allreduce {name}/{n}", got.numpy(), want, exact or hier,
                            _rounding_bound(op, dtype, arrays, want))
                out[f"{name}/{n}"] = (got.numpy().tobytes(), exact, hier)
            checks.same(f"{mode} allreduce {name}/{SIZES[-1]} alone vs grouped", alone.numpy(),
                        grouped[-1].numpy(), True)
    # prescale/postscale
    x = inputs(members[me], "float64", "Sum", 1001)
    got = hvd.allreduce(tf.constant(x), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0,
                        name=f"{label}/scaled", **kw).numpy()
    hier = layered(mode, nodes, 1001 * 8, 1001)
    want = expected("Sum", [inputs(r, "float64", "Sum", 1001) * 0.5 for r in members], nodes,
                    "float64", hier) * 3.0
    checks.same(f"{mode} scaled allreduce {label}", got, want, hier)
    out[f"{label}/scaled"] = (got.tobytes(), False, hier)
    # allgather: member i gives 3i rows (the first none); dtypes without reductions too
    for dtype in ("float32", "int8", "bool", "uint16"):
        rows = (np.arange(me * 3 * 5).reshape(me * 3, 5) + 1000 * me)
        rows = rows % 2 == 0 if dtype == "bool" else rows.astype(_np_dtype(dtype))
        got = hvd.allgather(tf.constant(rows), name=f"{label}/gather/{dtype}", **kw).numpy()
        want = [np.arange(i * 3 * 5).reshape(i * 3, 5) + 1000 * i for i in range(n_members)]
        want = np.concatenate(want)
        want = want % 2 == 0 if dtype == "bool" else want.astype(_np_dtype(dtype))
        checks.same(f"{mode} allgather {label}/{dtype}", got, want, True)
        out[f"{label}/gather/{dtype}"] = (got.tobytes(), True, False)
    big = np.full([me + 1, 2**14], me, np.float32)  # 64 KiB a row
    grouped = hvd.grouped_allgather([tf.constant(big), tf.constant(big[:, :3])],
                                    name=f"{label}/gather/grouped", **kw)
    for g, cols in zip(grouped, (2**14, 3)):
        want = np.concatenate([np.full([i + 1, cols], i, np.float32) for i in range(n_members)])
        checks.same(f"{mode} grouped allgather {label}/{cols}", g.numpy(), want, True)
        out[f"{label}/gather/grouped/{cols}"] = (g.numpy().tobytes(), True, False)
    return out


def joined(hvd, tf, checks, mode, nodes):
    """The last rank joins; the others' allreduce gets its identity."""
    size, rank = hvd.size(), hvd.rank()
    results = {}
    if rank < size - 1:
        for op in ("Sum", "Max"):
            hier = layered(mode, nodes, 1003 * 4, 1003, op)
            mine = tf.constant(inputs(rank, "float32", op, 1003, tag=1))
            got = hvd.allreduce(mine, op=getattr(hvd, op), name=f"join/{op}").numpy()
            arrays = [inputs(r, "float32", op, 1003, tag=1) for r in range(size - 1)]
            arrays.append(np.zeros(1003, np.float32) if op == "Sum"
                          else np.full(1003, -np.inf, np.float32))
            checks.same(f"{mode} allreduce with rank {size - 1} joined, {op}", got,
                        expected(op, arrays, nodes, "float32", hier), hier or op == "Max")
            results[f"join/{op}"] = (got.tobytes(), op == "Max", hier)
    hvd.join()
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--float-sums-equal-flat", action="store_true",
                        help="also require float sums and products bitwise equal to flat")
    parser.add_argument("--dtypes", default=",".join(REDUCIBLE),
                        help="the reducible dtypes to check (default: all)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="the settings to run, the first one being the reference (every "
                             "rank follows rank 0's, which must be distinct)")
    args = parser.parse_args()
    import tensorflow as tf

    import kerashvd as hvd

    checks = Checks()
    by_mode = {}
    report = {}
    modes = args.modes.split(",")
    seconds = {"start": round(time.monotonic() - STARTED, 1)}
    def progress(what):  # to stderr: where a rank was when a test timed out
        print(f"rank {os.environ.get('SLURM_PROCID', '?')}: {what} "
              f"{time.monotonic() - STARTED:.1f} s after the start", file=sys.stderr,
              flush=True)

    progress("imported TensorFlow")
    for given in modes:
        started = time.monotonic()
        progress(f"init ({given})")
        hvd.init(hierarchical_allreduce=given, hierarchical_allgather=given)
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        size, rank = hvd.size(), hvd.rank()
        # Every rank follows rank 0's settings (its own may differ: --modes per rank).
        mode = world.bcast(given, root=0)
        # Nodes as MPI (and kerashvd) see them, in order of their lowest rank: on one host
        # with MPIR_CVAR_NUM_CLIQUES, the cliques.
        local = world.Split_type(MPI.COMM_TYPE_SHARED)
        leaders = world.allgather(local.bcast(rank, root=0))
        local.Free()
        nodes = [[r for r in range(size) if leaders[r] == k] for k in sorted(set(leaders))]
        report = dict(rank=rank, size=size, host=socket.gethostname(),
                      local_size=hvd.local_size(), cross_size=hvd.cross_size(), nodes=nodes,
                      modes=report.get("modes", []) + [mode])
        progress(f"battery ({mode})")
        dtypes = args.dtypes.split(",")
        results = battery(hvd, tf, checks, list(range(size)), nodes, None, mode, "world",
                          dtypes)
        results.update(joined(hvd, tf, checks, mode, nodes))
        if size == 4:
            for ranks in ([0, 1, 2], [0, 2]):
                ps = hvd.add_process_set(ranks)
                if rank in ranks:
                    set_nodes = [[ranks.index(r) for r in k if r in ranks] for k in nodes]
                    set_nodes = sorted((k for k in set_nodes if k), key=min)
                    results.update(battery(hvd, tf, checks, ranks, set_nodes, ps, mode,
                                           f"set{ranks}",
                                           [d for d in ("float32", "float16", "int32")
                                            if d in dtypes]))
                hvd.remove_process_set(ps)
        by_mode[mode] = results
        progress(f"shutdown ({mode})")
        hvd.shutdown()
        seconds[mode] = round(time.monotonic() - started, 1)
    # Exact results are the same bits in every mode; float sums too where asked.
    modes = list(by_mode)
    for mode in modes[1:]:
        for name, (value, exact, hier) in by_mode[modes[0]].items():
            # Two results of the same algorithm are the same bits, too.
            same_path = hier == by_mode[mode][name][2]
            if exact or same_path or args.float_sums_equal_flat:
                checks.count += 1
                if by_mode[mode][name][0] != value:
                    checks.failures.append(f"{mode}: {name} differs from {modes[0]}")
    report.update(seconds=seconds, checks=checks.count, failures=checks.failures[:20],
                  failed=len(checks.failures))
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
