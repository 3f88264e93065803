"""TensorFlow 1 graph mode (a ``tf.Graph`` run by a ``tf.compat.v1.Session``), as Horovod's
TF1 scripts use it: the broadcasts add ops to the graph, and running them gives every rank the
root's values. Building the graph changes no value; running it does."""

import threading

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import WORLD

ROOTS = sorted({0, WORLD - 1})


def _variables(hvd, graph):
    """Two variables of this rank's values (float32 and int64), in ``graph``."""
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", initializer=np.full([3], hvd.rank(), np.float32))
        w = tf.compat.v1.get_variable("w", initializer=np.int64(10 * hvd.rank() + 1))
    return v, w


@pytest.mark.parametrize("root", ROOTS)
def test_broadcast_variables_returns_the_op_that_assigns_roots_values(hvd, root):
    graph = tf.Graph()
    v, w = _variables(hvd, graph)
    with graph.as_default():
        sync = hvd.broadcast_variables([v, w], root_rank=root, name=f"graph.bv.{root}")
        assert isinstance(sync, tf.Operation) and sync.graph is graph
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(v), np.full([3], hvd.rank(), np.float32))
            sess.run(sync)
            np.testing.assert_array_equal(sess.run(v), np.full([3], root, np.float32))
            assert sess.run(w) == 10 * root + 1
            sess.run(w.assign(-1 if hvd.rank() != root else 10 * root + 1))
            sess.run(sync)  # the same op again: a second broadcast under the same names
            assert sess.run(w) == 10 * root + 1


def test_in_place_broadcast_returns_the_assigned_values(hvd):
    root = WORLD - 1
    graph = tf.Graph()
    v, w = _variables(hvd, graph)
    with graph.as_default():
        values = hvd.broadcast_([v, w], root_rank=root, name="graph.inplace")
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            got_v, got_w = sess.run(values)
            np.testing.assert_array_equal(got_v, np.full([3], root, np.float32))
            assert got_w == 10 * root + 1
            np.testing.assert_array_equal(sess.run(v), got_v)


def test_broadcast_global_variables_covers_every_global_variable(hvd):
    root = WORLD - 1
    graph = tf.Graph()
    v, w = _variables(hvd, graph)
    with graph.as_default():
        sync = hvd.broadcast_global_variables(root)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(sync)
            np.testing.assert_array_equal(sess.run(v), np.full([3], root, np.float32))
            assert sess.run(w) == 10 * root + 1


def test_broadcast_global_variables_refuses_eager_and_tf_function_naming_the_replacement(hvd):
    with pytest.raises(RuntimeError, match=r"Use hvd.broadcast_variables\("):
        hvd.broadcast_global_variables(0)
    with pytest.raises(RuntimeError, match="graph mode only"):
        tf.function(lambda: hvd.broadcast_global_variables(0))()


def test_broadcast_object_fn_runs_in_the_session(hvd):
    root = WORLD - 1
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        bcast = hvd.broadcast_object_fn(root_rank=root, name="graph.objects")  # default session
        assert bcast({"from": hvd.rank()}) == {"from": root}
        assert bcast([hvd.rank()] * 1000) == [root] * 1000  # the same ops, another size
        if hvd.rank() == root:
            with pytest.raises(TypeError, match="pickle"):
                bcast(threading.Lock())
        else:
            with pytest.raises(ValueError, match=f"rank {root} could not pickle its object"):
                bcast(None)
    with graph.as_default(), pytest.raises(ValueError, match="needs the session"):
        hvd.broadcast_object_fn(root_rank=root)
