"""The straggler report (kerashvd.straggler_report, StragglerReportCallback).

First the rules, on records made up here (kerashvd.straggler.analyze is pure); then real
ranks under mpiexec on this host: one rank with a slow input pipeline is named late to submit
(and no rank is named before it slows down), and one rank whose engine thread is limited to a
small CPU share (a cgroup holding only that thread) is named slow to communicate. The same
across two SLURM nodes, one of them CPU-limited, is in test_multinode_straggler.py.
"""

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import REPO, mpiexec_path
from fixtures.cpu_limit import cpu_limited, missing
from kerashvd.straggler import analyze

SCRIPT = os.path.join(REPO, "tests", "scripts", "straggler", "train.py")


def records(waits, entry=None, completion=None, hosts=None, step=0.1, first_seq=0, dropped=0):
    """Records of len(waits) ranks; waits[r][i]: rank r's wait for collective i. Collective i
    ends at i * step on every rank; lags default to 0."""
    out = []
    for r, w in enumerate(waits):
        n = len(w)
        out.append({
            "host": (hosts or ["node"] * len(waits))[r], "first_seq": first_seq,
            "dropped": dropped, "elapsed_seconds": n * step, "transfer_seconds": 0.0,
            "wait_seconds": list(w), "done_seconds": [i * step for i in range(n)],
            "entry_lag_seconds": list(entry[r]) if entry else [0.0] * n,
            "completion_lag_seconds": list(completion[r]) if completion else [0.0] * n})
    return out


def named(report, kind):
    return [r.rank for r in getattr(report, kind)]


def test_a_rank_late_for_every_collective_is_named_with_its_node():
    # Rank 2 submits 60 ms after the others in each 100 ms step: they wait 61 ms, it 1 ms.
    report = analyze(records([[0.061] * 20, [0.062] * 20, [0.001] * 20, [0.060] * 20],
                             hosts=["a", "a", "b", "b"]))
    assert named(report, "late_to_submit") == [2] and report.slow_to_communicate == ()
    assert report.nodes == ("b",)
    slow = report.ranks[2]
    assert slow.late_collectives == 20 and slow.host == "b"
    assert math.isclose(slow.late_seconds, 20 * 0.060, rel_tol=1e-6)
    assert math.isclose(slow.late_share, 0.6, rel_tol=1e-6)
    assert "rank 2 on b: late in 20 of 20 collectives" in str(report)
    assert "nodes named: b" in str(report)


def test_no_straggler_names_no_one():
    waits = [[0.010 + 0.001 * ((i + r) % 3) for i in range(30)] for r in range(4)]
    report = analyze(records(waits))
    assert report.late_to_submit == () and report.slow_to_communicate == ()
    assert report.nodes == () and "no rank kept the others waiting" in str(report)


def test_a_node_whose_ranks_also_wait_for_each_other_is_named():
    # Node b's two ranks share too little CPU: in turn one of them is 80 ms late and the
    # other on time (it waits like node a's ranks), so each alone is late in half of the
    # collectives; together node b kept node a waiting 80 ms every 100 ms.
    n = 20
    b1 = [0.001 if i % 2 else 0.081 for i in range(n)]
    b2 = [0.081 if i % 2 else 0.001 for i in range(n)]
    report = analyze(records([[0.081] * n, [0.081] * n, b1, b2], hosts=["a", "a", "b", "b"]),
                     min_fraction=0.6)
    assert report.late_to_submit == () and report.nodes == ("b",)
    node_a, node_b = report.node_stats
    assert node_b.ranks == (2, 3) and node_b.late_collectives == n
    assert math.isclose(node_b.late_seconds, n * 0.08, rel_tol=1e-6)
    assert node_a.late_collectives == 0
    assert "b (ranks 2, 3), late to submit: late in 20 of 20 collectives" in str(report)


def test_one_long_pause_is_reported_but_names_no_one():
    # Rank 0 is late once, by 1.5 s (a checkpoint written by rank 0 only), of 20 collectives.
    waits = [[0.01] * 20, [0.01] * 20]
    waits[1][5] = 1.51
    report = analyze(records(waits))
    assert report.late_to_submit == ()
    assert report.ranks[0].late_collectives == 1 and report.ranks[0].late_seconds > 1.4


def test_overlapping_collectives_count_their_waiting_time_once():
    # Ten collectives end together each step (unfused), rank 1 late for all by 50 ms: the
    # others waited 50 ms per step, not 500 ms.
    waits = [[0.051] * 10 + [0.051] * 10, [0.001] * 20]
    recs = records(waits)
    for rec in recs:
        rec["done_seconds"] = [0.1] * 10 + [0.2] * 10
        rec["elapsed_seconds"] = 0.25
    report = analyze(recs)
    assert math.isclose(report.ranks[1].late_seconds, 0.1, rel_tol=1e-6)


def test_entering_and_finishing_the_transfer_late_is_slow_to_communicate():
    # Rank 1 enters every transfer 30 ms after the others, and finishes its copies 20 ms after
    # them, which delays its next submission by 20 ms: that part is not "late to submit".
    n = 20
    report = analyze(records([[0.021] * n, [0.001] * n], entry=[[0.0] * n, [0.03] * n],
                             completion=[[0.0] * n, [0.02] * n]))
    assert named(report, "slow_to_communicate") == [1] and report.late_to_submit == ()
    assert math.isclose(report.ranks[1].comm_seconds, n * 0.05, rel_tol=1e-5)
    assert report.ranks[1].late_seconds == pytest.approx(0.0, abs=1e-9)


def test_late_and_slow_below_the_threshold_each_but_above_it_together_are_named():
    # Rank 1 submits 12 ms late and enters the transfer 10 ms late every 100 ms: 12% + 10%.
    n = 20
    report = analyze(records([[0.013] * n, [0.001] * n], entry=[[0.0] * n, [0.01] * n]))
    assert named(report, "late_to_submit") == [1] and report.slow_to_communicate == ()
    assert analyze(records([[0.013] * n, [0.001] * n])).late_to_submit == ()  # 12% alone


def test_ranks_are_compared_collective_by_collective_and_nan_is_no_value():
    # Rank 1's window starts one collective later (it took its snapshot later); rank 2 was
    # inside join() for the last collectives (NaN): only the common collectives count.
    recs = records([[0.05] * 11, [0.05] * 10, [0.0] * 11])
    recs[1]["first_seq"] = 1
    recs[2]["wait_seconds"][-3:] = [math.nan] * 3
    report = analyze(recs)
    assert report.collectives == 10 and report.complete
    assert named(report, "late_to_submit") == [2] and report.ranks[2].late_collectives == 7
    assert not analyze(records([[0.01] * 5] * 2, dropped=3)).complete
    assert analyze(records([[0.01] * 5])).late_to_submit == ()  # one rank: nobody to wait


def test_the_rules_are_checked_and_the_report_is_plain_data(hvd):
    with pytest.raises(ValueError, match=r"threshold must be a number in \[0, 1\].*threshold=2"):
        hvd.straggler_report(threshold=2)
    with pytest.raises(ValueError, match="min_fraction=True"):
        hvd.callbacks.StragglerReportCallback(min_fraction=True)
    with pytest.raises(ValueError, match="verbose=2"):
        hvd.callbacks.StragglerReportCallback(verbose=2)
    report = hvd.straggler_report()
    assert json.loads(json.dumps(report.to_dict(), default=str))["ranks"][0]["rank"] == hvd.rank()


def run_ranks(args, env=None, timeout=240):
    """Runs the training script on 2 ranks under mpiexec; returns rank 0's JSON lines."""
    cmd = [mpiexec_path(), "-n", "2", sys.executable, SCRIPT, *args]
    full_env = dict(os.environ, OMP_NUM_THREADS="1", KERASHVD_STALL_CHECK_TIME="20",
                    KERASHVD_STALL_SHUTDOWN_TIME="60", **(env or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.mpi
def test_slow_input_rank_and_starved_engine_are_named():
    """Epochs 1-2: no slow rank, none named. Epoch 3: rank 1's input pipeline takes 0.15 s
    more per batch: it is named late to submit. Then, where a cgroup can limit one thread,
    rank 1's engine thread gets 5% of a CPU: it is named slow to communicate."""
    base = ["--epochs", "3", "--slow-from", "3", "--steps", "12", "--slow-rank", "1",
            "--slow-seconds", "0.15", "--engine-steps", "8"]
    reason = missing(threads=True)
    if reason:
        lines = run_ranks(base)
    else:
        with cpu_limited(0.05) as group:
            lines = run_ranks(base + ["--engine-cgroup", group.path])
            assert group.members() == []  # the thread went back
    epochs = {line["epoch"]: line for line in lines if "epoch" in line}
    assert sorted(epochs) == [1, 2, 3], lines
    for e in (1, 2):
        assert epochs[e]["late"] == [] and epochs[e]["comm"] == [], epochs[e]["text"]
    assert [r for r, _ in epochs[3]["late"]] == [1], epochs[3]["text"]
    assert epochs[3]["comm"] == [], epochs[3]["text"]
    if reason:
        pytest.skip(f"slow to communicate not checked: {reason}")
    (engine,) = [line for line in lines if "engine" in line]
    assert [r for r, _ in engine["comm"]] == [1], engine["text"]
    assert engine["late"] == [], engine["text"]
