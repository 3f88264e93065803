"""Collectives checked against numpy on every rank; imported by world.py --collectives.

:func:`check` runs allreduce (Sum, Average, Max; 0, 1, 7 and 2**18 + 3 elements, the largest
split into many messages over a network), allgather (rank r gives r rows: rank 0 none),
broadcast (from the last rank), alltoall (rank r sends j rows to rank j: none to rank 0) and
reducescatter (2 * size + 1 rows: they do not divide by the world size), and returns the
failures as strings (an empty list when every result is right).
"""

import numpy as np


def _expect(failures, what, got, want):
    got = np.asarray(got)
    if got.shape != want.shape or not np.allclose(got, want):
        failures.append(f"{what}: expected {want.tolist()[:8]} (shape {want.shape}), "
                        f"received {got.tolist()[:8]} (shape {got.shape})")


def check(hvd):
    import tensorflow as tf

    rank, size = hvd.rank(), hvd.size()
    failures = []
    for n in (0, 1, 7, 2**18 + 3):
        base = np.arange(n, dtype=np.float64)
        mine = tf.constant(base * (rank + 1))
        _expect(failures, f"allreduce Sum of {n}", hvd.allreduce(mine, op=hvd.Sum),
                base * sum(r + 1 for r in range(size)))
        _expect(failures, f"allreduce Average of {n}", hvd.allreduce(mine, op=hvd.Average),
                base * sum(r + 1 for r in range(size)) / size)
        _expect(failures, f"allreduce Max of {n}", hvd.allreduce(mine, op=hvd.Max), base * size)

    rows = np.full([rank, 3], rank, np.int32)
    _expect(failures, "allgather", hvd.allgather(tf.constant(rows)),
            np.concatenate([np.full([r, 3], r, np.int32) for r in range(size)]))

    root = size - 1
    value = np.arange(5, dtype=np.float32) + 100 * root
    sent = value if rank == root else np.zeros(5, np.float32)
    _expect(failures, "broadcast", hvd.broadcast(tf.constant(sent), root_rank=root), value)

    splits = list(range(size))  # j rows to rank j
    sent = np.concatenate([np.full([j, 2], 100 * rank + j, np.int64) for j in range(size)])
    received, received_splits = hvd.alltoall(tf.constant(sent), splits=splits)
    _expect(failures, "alltoall", received,
            np.concatenate([np.full([rank, 2], 100 * i + rank, np.int64) for i in range(size)]))
    _expect(failures, "alltoall splits", received_splits, np.full([size], rank))

    total = 2 * size + 1
    table = np.arange(total * 2, dtype=np.float32).reshape(total, 2)
    counts = [total // size + (1 if r < total % size else 0) for r in range(size)]
    start = sum(counts[:rank])
    _expect(failures, "reducescatter Sum",
            hvd.reducescatter(tf.constant(table * (rank + 1)), op=hvd.Sum),
            table[start:start + counts[rank]] * sum(r + 1 for r in range(size)))
    return failures
