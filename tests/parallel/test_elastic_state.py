"""Elastic state at any world size, without kerashvdrun's elastic mode: commits, restores,
sync, the commit handed to a new process, and the positions the callbacks keep (worlds
replaced for real are in tests/cluster/test_elastic.py)."""

import hashlib

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import keras

pytestmark = pytest.mark.keras

STEPS, BATCH = 4, 4


def _model(hvd, seed, units=4):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(units, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
                  loss="mse")
    return model


def _data(hvd):
    x = np.random.default_rng(hvd.rank()).normal(size=(STEPS * BATCH, 3)).astype(np.float32)
    return x, x.sum(axis=1, keepdims=True)


def _values(state):
    return [np.array(v.numpy()) for v in state._model_variables() + state._optimizer_variables()]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_restore_goes_back_to_the_commit_and_training_leaves_it_alone(hvd):
    model = _model(hvd, 1)
    state = hvd.elastic.KerasState(model, epoch=0)
    state.sync()
    x, y = _data(hvd)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    state.epoch = 1
    state.commit()
    committed = _values(state)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)  # updates the variables in place
    state.epoch = 2
    assert not _same(committed, _values(state))
    state.restore()
    assert _same(committed, _values(state)) and state.epoch == 1
    assert int(np.asarray(model.optimizer.iterations)) == STEPS  # the optimizer's state came back too


def test_sync_gives_every_rank_rank_0s_state(hvd):
    state = hvd.elastic.KerasState(_model(hvd, 10 + hvd.rank()), epoch=hvd.rank(), note="x")
    state.sync()
    digest = hashlib.sha256(b"".join(v.tobytes() for v in _values(state))).hexdigest()
    assert len(set(hvd.allgather_object(digest))) == 1
    assert (state.epoch, state.note) == (0, "x")


def test_a_commit_handed_to_a_new_state_restores_it_there(hvd):
    model = _model(hvd, 2)
    state = hvd.elastic.KerasState(model, epoch=0, batch=0)
    assert state._handover() == (-1, None)  # nothing synchronized yet: nothing to give
    x, y = _data(hvd)

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
        state.epoch = 1
        state.commit()
        return "trained"

    assert train(state) == "trained"  # outside the elastic mode: sync, then the function
    number, make_bytes = state._handover()
    committed = _values(state)
    fresh = hvd.elastic.KerasState(_model(hvd, 99), epoch=0, batch=0)
    fresh._take_over(make_bytes())
    assert number == 1 and fresh._saved_commits == 1
    assert _same(committed, _values(fresh)) and (fresh.epoch, fresh.batch) == (1, 0)
    other = hvd.elastic.KerasState(_model(hvd, 3, units=5), epoch=0, batch=0)
    with pytest.raises(ValueError, match="every world must build the same model"):
        other._take_over(make_bytes())
    with pytest.raises(ValueError, match=r"holds the attributes \['batch', 'epoch'\]"):
        hvd.elastic.KerasState(_model(hvd, 2), epoch=0)._take_over(make_bytes())


def test_callbacks_keep_the_position_through_fit_resumable(hvd):
    model = _model(hvd, 4)
    state = hvd.elastic.KerasState(model, epoch=1, batch=2)
    state.sync()
    x, y = _data(hvd)
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append((state.epoch, state.batch, state._saved_commits))

    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=2), Record()]

    def dataset_fn(epoch, step):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).skip(step)

    hvd.callbacks.fit_resumable(model, dataset_fn, epochs=3, steps_per_epoch=STEPS,
                                initial_epoch=state.epoch, initial_step=state.batch,
                                callbacks=callbacks, verbose=0)
    # Epoch 1 from its third batch, then epoch 2; a commit every 2 batches and at epoch ends.
    assert seen == [(1, 3, 0), (1, 4, 1), (2, 1, 2), (2, 2, 3), (2, 3, 3), (2, 4, 4)]
    assert (state.epoch, state.batch, state._saved_commits) == (3, 0, 5)
    with pytest.raises(ValueError, match="batches_per_commit must be an int >= 1"):
        hvd.elastic.CommitStateCallback(state, batches_per_commit=0)


def test_a_commit_at_an_epochs_last_batch_resumes_at_the_next_epoch(hvd):
    """A world that handed over right after an epoch's last batch, before the epoch's end
    (state.batch == steps): fit_resumable starts the next epoch, and the callbacks count it
    as that epoch, so a commit there resumes there."""
    model = _model(hvd, 5)
    state = hvd.elastic.KerasState(model, epoch=1, batch=STEPS)
    state.sync()
    x, y = _data(hvd)
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append((state.epoch, state.batch))

    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state), Record()]

    def dataset_fn(epoch, step):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).skip(step)

    hvd.callbacks.fit_resumable(model, dataset_fn, epochs=3, steps_per_epoch=STEPS,
                                initial_epoch=state.epoch, initial_step=state.batch,
                                callbacks=callbacks, verbose=0)
    assert seen == [(2, 1), (2, 2), (2, 3), (2, 4)]
    assert (state.epoch, state.batch) == (3, 0)


def test_object_state_and_host_checks_without_a_launcher(hvd):
    state = hvd.elastic.ObjectState(epoch=hvd.rank(), names=["a"])
    state.sync()
    assert (state.epoch, state.names) == (0, ["a"])
    state.epoch = 5
    state.commit()  # no launcher: the host check communicates nothing and raises nothing
    state.epoch = 6
    state.restore()
    assert state.epoch == 5
    calls = []
    state.register_reset_callbacks([lambda: calls.append(1), lambda: calls.append(2)])
    state.on_reset()
    assert calls == [1, 2]
    with pytest.raises(ValueError, match="is not built"):
        hvd.elastic.KerasState(keras.Sequential([keras.layers.Dense(1)]))
