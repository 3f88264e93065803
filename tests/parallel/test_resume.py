"""Exact resumption: stopped by a signal at any batch, saved, resumed with fit_resumable, a run
ends with the same weights as the run that was never interrupted (bitwise, on the CPU)."""

import os
import signal

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import USES_TF_KERAS, keras, optimizer_variables
from model_styles import sequential

pytestmark = pytest.mark.keras

EPOCHS, STEPS, BATCH = 3, 5, 4


def _dataset_fn(hvd):
    """This rank's batches of an epoch from a step on: shuffled by (epoch, rank) only."""
    rng = np.random.default_rng(100 + hvd.rank())
    x = rng.normal(size=(STEPS * BATCH, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).astype(np.float32)

    def dataset_fn(epoch, step):
        data = tf.data.Dataset.from_tensor_slices((x, y))
        data = data.shuffle(len(x), seed=1000 * epoch + hvd.rank(), reshuffle_each_iteration=False)
        return data.batch(BATCH, drop_remainder=True).skip(step)
    return dataset_fn


def _model(hvd, style, dropout=not USES_TF_KERAS):
    """A new run: the model, its DistributedOptimizer and Keras' seeds as a fresh process has.

    With ``dropout`` (Keras 3) the dropout masks must resume exactly too; tf_keras cannot
    restore them (see test_tf_keras_warns_that_random_layers_do_not_resume_exactly).
    """
    keras.utils.set_random_seed(7 + hvd.rank())  # rank 0's initial weights win (broadcast)
    layers = [keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    if dropout:
        layers.insert(1, keras.layers.Dropout(0.3))
    model = sequential(style, (3,), layers)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01, momentum=0.9)),
                  loss="mse")
    return model


class _SignalAt(keras.callbacks.Callback):
    """Sends ``signum`` to this process before batch ``batch`` of epoch ``epoch``."""

    def __init__(self, epoch, batch, signum):
        super().__init__()
        self.at, self.signum, self.epoch = (epoch, batch), signum, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            os.kill(os.getpid(), self.signum)


def _run(hvd, style, directory, extra=(), position=(0, 0), check_every=1, **checkpoint_kwargs):
    model = _model(hvd, style)
    checkpoint = hvd.callbacks.ModelCheckpoint(os.path.join(directory, "model-{epoch:02d}.keras"),
                                               **checkpoint_kwargs)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.LearningRateWarmupCallback(0.01, warmup_epochs=2, verbose=0),
                 checkpoint, hvd.callbacks.PreemptionCallback(checkpoint, check_every=check_every),
                 *extra]
    if position != (0, 0):
        found = hvd.callbacks.latest_checkpoint(directory, required=True)
        assert (found.epoch, found.step) == position
        assert hvd.callbacks.restore(model, found, input_shape=(None, 3)) == position
    hvd.callbacks.fit_resumable(model, _dataset_fn(hvd), epochs=EPOCHS, steps_per_epoch=STEPS,
                                initial_epoch=position[0], initial_step=position[1],
                                callbacks=callbacks, verbose=0)
    return model


def _weights(model):
    return [np.array(v) for v in model.get_weights() + [v.numpy() for v in optimizer_variables(model.optimizer)]]


@pytest.fixture
def shared_dir(hvd, tmp_path):
    return hvd.broadcast_object(str(tmp_path), root_rank=0)


@pytest.mark.parametrize("style,epoch,batch,check_every", [
    ("input", 1, 2, 1), ("subclassed", 2, 0, 1), ("deferred", 0, 1, None)])
def test_a_run_stopped_by_a_signal_resumes_exactly(hvd, shared_dir, style, epoch, batch,
                                                   check_every):
    expected = _weights(_run(hvd, style, os.path.join(shared_dir, "whole")))

    # The signal reaches the last rank only; every rank must stop after the same batch: the
    # one it came before with check_every=1, a later one (as rank 0 paces the checks) or the
    # same with the default.
    directory = os.path.join(shared_dir, "cut")
    signaller = [_SignalAt(epoch, batch, signal.SIGUSR1)] if hvd.rank() == hvd.size() - 1 else []
    with pytest.raises(hvd.callbacks.Preempted) as stopped:
        _run(hvd, style, directory, extra=signaller, check_every=check_every)
    where = (stopped.value.epoch, stopped.value.step)
    assert stopped.value.code == hvd.callbacks.PREEMPTED_EXIT_CODE
    assert stopped.value.signal_name == "SIGUSR1"
    assert hvd.allgather_object(where) == [where] * hvd.size()
    if check_every == 1:
        assert where == (epoch, batch + 1)
    else:
        assert (epoch, batch + 1) <= where <= (EPOCHS - 1, STEPS)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # handlers given back

    resumed = _run(hvd, style, directory, position=where)
    for a, b in zip(_weights(resumed), expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not USES_TF_KERAS, reason="Keras 3 restores the random state")
def test_tf_keras_warns_that_random_layers_do_not_resume_exactly(hvd, shared_dir):
    _run(hvd, "input", shared_dir)
    found = hvd.callbacks.latest_checkpoint(shared_dir)
    with_dropout = _model(hvd, "input", dropout=True)
    if hvd.rank() == 0:
        with pytest.warns(UserWarning, match=r"random layers dropout\w* draw other values"):
            hvd.callbacks.restore(with_dropout, found)
    else:
        hvd.callbacks.restore(with_dropout, found)


def test_periodic_saves_keep_the_newest_files_only(hvd, shared_dir):
    _run(hvd, "input", shared_dir, save_freq=2, max_to_keep=2)
    if hvd.rank() == 0:
        # Saves: e1 b2, e1 b4, end of e1, e2 b2, e2 b4, end of e2, e3 b2, e3 b4, end of e3.
        kept = sorted(n for n in os.listdir(shared_dir) if n.endswith(".keras"))
        assert kept == ["model-03-step000004.keras", "model-03.keras"], kept
        found = hvd.callbacks.latest_checkpoint(shared_dir, broadcast=False)
        assert (found.epoch, found.step, found.iterations) == (EPOCHS, 0, EPOCHS * STEPS)
    hvd.barrier()


def test_restore_refuses_a_file_that_does_not_match_its_record(hvd, shared_dir):
    _run(hvd, "input", shared_dir, save_freq=2)
    found = hvd.callbacks.latest_checkpoint(shared_dir)
    earlier = found._replace(path=os.path.join(shared_dir, "model-01.keras"))
    with pytest.raises(ValueError, match="iterations=5, but its record says iterations=15"):
        hvd.callbacks.restore(_model(hvd, "input"), earlier)
