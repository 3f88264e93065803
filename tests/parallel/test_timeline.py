"""The timeline: per-tensor phases in Chrome-trace JSON, one file per rank, bounded in size.

(That the file stays valid JSON when the process is SIGKILLed while recording is tested in
tests/multiprocess/test_failures.py, which needs a process to kill.)
"""

import collections
import json
import os

import pytest
import tensorflow as tf


def _phases_by_tensor(events):
    phases = collections.defaultdict(set)
    for event in events:
        if event.get("ph") == "X" and "tensor" in event.get("args", {}):
            phases[event["args"]["tensor"]].add(event["name"])
    return phases


def test_timeline_records_the_phases_of_named_collectives(hvd, tmp_path):
    rank = hvd.rank()
    hvd.start_timeline(str(tmp_path / "timeline-{rank}.json"))  # every rank writes its own file
    try:
        hvd.allreduce(tf.ones([16]), name="timeline.single")
        hvd.grouped_allreduce([tf.ones([3]), tf.ones([5])], name="timeline.fused")
        hvd.allgather(tf.fill([rank + 1, 2], 1.0), name="timeline.gather")
    finally:
        hvd.stop_timeline()
    path = tmp_path / f"timeline-{rank}.json"
    with open(path) as f:
        events = json.load(f)

    phases = _phases_by_tensor(events)
    assert {"NEGOTIATE", "QUEUE", "ALLREDUCE"} <= phases["timeline.single"], phases
    # Two ranks on one host reduce a fused group where its tensors are, through the
    # shared-memory pair (ops/core/backend/shm/shm_pair.h), and one rank copies each input to
    # its output: no fusion buffer to copy through.
    pair = hvd.size() == 1 or (hvd.size() == 2 and hvd.local_size() == 2
                               and os.environ.get("KERASHVD_SHM_ALLREDUCE", "1") != "0")
    copies = {"MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"}
    assert {"NEGOTIATE", "QUEUE", "ALLREDUCE"} <= phases["timeline.fused"], phases
    if pair:
        assert not copies & phases["timeline.fused"], phases
    else:
        assert copies <= phases["timeline.fused"], phases
    assert {"NEGOTIATE", "QUEUE", "ALLGATHER"} <= phases["timeline.gather"], phases
    assert any(e["name"] == "CYCLE" and e["ph"] == "X" for e in events)
    # Each tensor has its own named row; every event belongs to this rank.
    rows = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"timeline.single", "timeline.fused",
            "timeline.gather"} <= rows
    assert {e["pid"] for e in events} == {rank}
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0, e

    from kerashvd.timeline import phase_totals
    totals = phase_totals(events)
    assert totals["ALLREDUCE"][0] >= 2 and totals["ALLGATHER"][0] >= 1


def test_timeline_without_rank_placeholder_is_written_by_rank_0_only(hvd, tmp_path):
    path = tmp_path / "only-rank-0.json"  # tmp_path is this process's own directory
    hvd.start_timeline(str(path))
    hvd.allreduce(tf.ones([2]), name="timeline.rank0_only")
    hvd.stop_timeline()
    assert path.exists() == (hvd.rank() == 0)
    if hvd.rank() == 0:
        with open(path) as f:
            assert "timeline.rank0_only" in _phases_by_tensor(json.load(f))


def test_timeline_stops_at_max_size_with_a_truncation_event(hvd, tmp_path):
    max_mb = 0.01
    max_bytes = int(max_mb * (1 << 20))
    path = tmp_path / "small-{rank}.json"
    hvd.start_timeline(str(path), max_mb=max_mb)
    try:
        for i in range(80):  # ~500 bytes of events per new tensor name: far over 10 KiB
            hvd.allreduce(tf.ones([4]), name=f"timeline.many.{i}")
    finally:
        hvd.stop_timeline()
    mine = tmp_path / f"small-{hvd.rank()}.json"
    size = os.path.getsize(mine)
    with open(mine) as f:
        events = json.load(f)
    assert events[-1]["name"] == "TIMELINE_TRUNCATED", events[-3:]
    assert events[-1]["args"]["max_bytes"] == max_bytes
    assert sum(e["name"] == "TIMELINE_TRUNCATED" for e in events) == 1
    assert size <= max_bytes + 400, f"{size} bytes for max_bytes={max_bytes}"  # + the last event


def test_timeline_fills_up_to_max_size_before_truncating(hvd, tmp_path):
    if hvd.size() > 1:  # ranks submit at different times: the burst spreads over several writes
        pytest.skip("the burst is recorded in one 100 ms write only with a single rank")
    max_mb = 0.01
    path = tmp_path / "burst-{rank}.json"

    @tf.function
    def burst():  # independent collectives: submitted together, done in one engine cycle
        return [hvd.allreduce(tf.ones([4]), name=f"timeline.burst.{i}") for i in range(40)]

    hvd.start_timeline(str(path), max_mb=max_mb)
    try:
        burst()
    finally:
        hvd.stop_timeline()
    with open(tmp_path / f"burst-{hvd.rank()}.json") as f:
        events = json.load(f)
    assert events[-1]["name"] == "TIMELINE_TRUNCATED"
    assert len(events) > 10, f"only {len(events)} event(s) recorded before the limit"


def test_start_timeline_rejects_a_bad_size(hvd, tmp_path):
    with pytest.raises(ValueError, match="max_mb must be > 0"):
        hvd.start_timeline(str(tmp_path / "x.json"), max_mb=0)
