"""broadcast_object and allgather_object with nested Python objects."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import WORLD

Point = collections.namedtuple("Point", "x y")


def _object_of(rank):
    return {
        "rank": rank,
        "nested": [1, (2.5, "three"), {"four": [None, True]}],
        "array": np.arange(rank + 3, dtype=np.float32) * rank,
        "point": Point(rank, -rank),
        "text": "é" * rank,
        "set": {rank, rank + 1},
        "fn": lambda v, r=rank: v + r,  # cloudpickle carries lambdas
    }


def _check_object(got, rank):
    want = _object_of(rank)
    assert got["rank"] == rank
    assert got["nested"] == want["nested"]
    np.testing.assert_array_equal(got["array"], want["array"])
    assert got["array"].dtype == np.float32
    assert got["point"] == Point(rank, -rank) and type(got["point"]).__name__ == "Point"
    assert got["text"] == want["text"] and got["set"] == want["set"]
    assert got["fn"](10) == 10 + rank


@pytest.mark.parametrize("root", sorted({0, WORLD - 1}))
def test_broadcast_object_nested(hvd, root):
    got = hvd.broadcast_object(_object_of(hvd.rank()), root_rank=root, name=f"obj.nested/{root}")
    _check_object(got, root)


def test_broadcast_object_default_root_and_simple_values(hvd):
    r = hvd.rank()
    assert hvd.broadcast_object(None if r == 0 else "not me") is None
    assert hvd.broadcast_object(r * 10, root_rank=WORLD - 1) == (WORLD - 1) * 10
    big = hvd.broadcast_object(bytes(range(256)) * 400 if r == 0 else b"", name="obj.big")
    assert big == bytes(range(256)) * 400


def test_allgather_object_nested_and_sized_differently(hvd):
    got = hvd.allgather_object(_object_of(hvd.rank()), name="obj.gather")
    assert len(got) == hvd.size()
    for q, obj in enumerate(got):
        _check_object(obj, q)


def test_allgather_object_simple_values(hvd):
    r = hvd.rank()
    assert hvd.allgather_object(None) == [None] * hvd.size()
    assert hvd.allgather_object("x" * (1000 * r)) == ["x" * (1000 * q) for q in range(hvd.size())]
    assert hvd.allgather_object([] if r % 2 else {r: [r] * r}) == \
        [[] if q % 2 else {q: [q] * q} for q in range(hvd.size())]


def test_broadcast_object_fn_and_in_place_broadcast(hvd):
    root = hvd.size() - 1
    bcast = hvd.broadcast_object_fn(root_rank=root, name="objfn")
    assert bcast({"from": hvd.rank()}) == {"from": root}
    assert bcast([hvd.rank()] * 3) == [root] * 3  # a second call gets a name of its own
    v = tf.Variable([float(hvd.rank()), 1.0])
    w = tf.Variable(hvd.rank() + 10)
    out = hvd.broadcast_([v, w], root_rank=root)
    assert out[0] is v and out[1] is w
    np.testing.assert_array_equal(v.numpy(), [root, 1.0])
    assert int(w.numpy()) == root + 10
    with pytest.raises(ValueError, match="session"):
        hvd.broadcast_object_fn(session=object())
