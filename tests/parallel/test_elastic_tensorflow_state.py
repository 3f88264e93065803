"""hvd.elastic.TensorFlowState (Horovod's state of a list of TensorFlow variables) at any world
size: commit, restore and sync eagerly and with a TensorFlow 1 session, and a commit handed to
a new state (worlds replaced for real are in tests/cluster/test_elastic.py)."""

import numpy as np
import pytest
import tensorflow as tf


def _eager_variables(hvd):
    return [tf.Variable(np.full([2, 3], hvd.rank(), np.float32)),
            tf.Variable(np.int64(10 * hvd.rank() + 1))]


def _numpy(variables):
    return [np.array(v.numpy()) for v in variables]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_sync_commit_restore_eagerly(hvd):
    variables = _eager_variables(hvd)
    state = hvd.elastic.TensorFlowState(variables, epoch=hvd.rank())
    state.sync()  # rank 0's variables and attributes, everywhere
    assert _same(_numpy(variables), [np.zeros([2, 3], np.float32), np.int64(1)])
    assert state.epoch == 0
    variables[0].assign_add(tf.ones([2, 3]))
    state.epoch = 1
    state.commit()
    variables[0].assign(tf.fill([2, 3], 7.0))
    variables[1].assign(-5)
    state.epoch = 2
    state.restore()
    assert _same(_numpy(variables), [np.ones([2, 3], np.float32), np.int64(1)])
    assert state.epoch == 1


def test_a_commit_handed_to_a_new_state_restores_it_there(hvd):
    variables = _eager_variables(hvd)
    state = hvd.elastic.TensorFlowState(variables, batch=0)

    @hvd.elastic.run
    def train(state):
        variables[1].assign(42)
        state.batch = 3
        state.commit()

    train(state)  # outside the elastic mode: sync, then the function
    number, make_bytes = state._handover()
    fresh_variables = [tf.Variable(tf.zeros([2, 3])), tf.Variable(np.int64(0))]
    fresh = hvd.elastic.TensorFlowState(fresh_variables, batch=0)
    fresh._take_over(make_bytes())
    assert number == 1 and fresh.batch == 3
    assert _same(_numpy(fresh_variables), _numpy(variables))
    other = hvd.elastic.TensorFlowState([tf.Variable(tf.zeros([3]))], batch=0)
    with pytest.raises(ValueError, match="holds 2 TensorFlowState variables"):
        other._take_over(make_bytes())


def test_eagerly_the_variables_must_be_given(hvd):
    with pytest.raises(ValueError, match="needs its variables when executing eagerly"):
        hvd.elastic.TensorFlowState(epoch=0)


def test_sync_commit_restore_with_a_tensorflow_1_session(hvd):
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", initializer=np.full([3], hvd.rank(), np.float32))
        w = tf.compat.v1.get_variable("w", initializer=np.int64(10 * hvd.rank() + 1))
        bump = v.assign_add(tf.ones([3]))
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            state = hvd.elastic.TensorFlowState(session=sess, epoch=hvd.rank())  # global variables
            assert state.variables == [v, w]
            state.sync()
            np.testing.assert_array_equal(sess.run(v), np.zeros([3], np.float32))
            assert sess.run(w) == 1 and state.epoch == 0
            sess.run(bump)
            state.epoch = 1
            state.commit()
            sess.run(bump)
            sess.run(w.assign(-5))
            state.epoch = 2
            state.restore()
            np.testing.assert_array_equal(sess.run(v), np.ones([3], np.float32))
            assert sess.run(w) == 1 and state.epoch == 1
    with graph.as_default(), pytest.raises(ValueError, match="needs the session"):
        hvd.elastic.TensorFlowState(epoch=0)
