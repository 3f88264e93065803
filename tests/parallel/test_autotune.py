"""Autotune (ops/core/autotune.h): trials agreed on every rank, logged, frozen, results unchanged.

The engine is restarted with ``autotune=True`` and tiny samples (no warm-up, one cycle with
work per sample), so that its 6 trials end within a few dozen steps; each rank logs its own
copy of the trials (``{rank}`` in the path), and the copies must be identical, including the
negotiation cycle at which every trial started. The same steps run untuned first, and every
result of the tuned run must equal the untuned one bit for bit.
"""

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

HEADER = "trial,start_cycle,fusion_threshold_bytes,cycle_time_ms,bytes_per_second,chosen"
TRIALS = 6  # 4 fusion thresholds, then 2 more cycle times (ops/core/autotune.h)
# Six tensors of 384 KiB a step: 1 MiB fuses them by two, the larger thresholds all six.
TENSORS, ELEMENTS = 6, 3 * 2**15


def _inputs(rank, step):
    rng = np.random.default_rng(1000 * step + rank)
    # Values of many magnitudes, so that a different summation order would change bits.
    return [tf.constant(rng.standard_normal(ELEMENTS).astype(np.float32) * 10.0 ** rng.integers(-3, 4))
            for _ in range(TENSORS)]


def _run(hvd, steps):
    @tf.function
    def step(tensors):
        # Separate collectives in one graph: submitted together, fused by the engine's threshold.
        return [hvd.allreduce(t, op=hvd.Sum, name=f"autotune.t{i}") for i, t in enumerate(tensors)]

    return [[r.numpy() for r in step(_inputs(hvd.rank(), s))] for s in range(steps)]


def _rows(path):
    with open(path) as f:
        return f.read().splitlines()


def test_autotune_agrees_on_every_rank_logs_freezes_and_keeps_results(hvd):
    steps = 30
    untuned = _run(hvd, steps)
    folder = hvd.broadcast_object(tempfile.mkdtemp(prefix="kerashvd-autotune-") if hvd.rank() == 0
                                  else None, name="autotune.folder")
    log = os.path.join(folder, "trials-{rank}.csv")
    mine = log.replace("{rank}", str(hvd.rank()))
    hvd.shutdown()
    hvd.init(autotune=True, autotune_log_file=log, autotune_warmup_samples=0,
             autotune_steps_per_sample=1)
    try:
        tuned = _run(hvd, steps)
        rows = _rows(mine)
        # Frozen: later steps add no trial.
        _run(hvd, 5)
        assert _rows(mine) == rows
    finally:
        hvd.shutdown()
        hvd.init()
    for s in range(steps):
        for i in range(TENSORS):
            assert np.array_equal(tuned[s][i], untuned[s][i]), (s, i)
    # Every rank applied every trial at the same cycle: its log is rank 0's, byte for byte.
    logs = hvd.allgather_object(rows, name="autotune.logs")
    assert all(other == logs[0] for other in logs), logs
    assert rows[0] == HEADER and len(rows) == 1 + TRIALS + 1, rows
    trials = [row.split(",") for row in rows[1:]]
    assert [int(t[0]) for t in trials[:TRIALS]] == list(range(TRIALS)), rows
    assert [t[5] for t in trials] == ["0"] * TRIALS + ["1"], rows
    starts = [int(t[1]) for t in trials]
    assert starts[0] == 0 and starts == sorted(set(starts)), rows
    thresholds = {int(t[2]) for t in trials[:TRIALS]}
    assert thresholds == {2**20, 8 * 2**20, 32 * 2**20, 128 * 2**20}, rows
    # The chosen row is the trial with the highest score, with its settings.
    scores = [float(t[4]) for t in trials[:TRIALS]]
    best = trials[int(np.argmax(scores))]
    assert trials[-1][0] == best[0] and trials[-1][2:5] == best[2:5], rows
    hvd.barrier()
    if hvd.rank() == 0:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)
