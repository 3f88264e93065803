"""The whole callback stack in one data-parallel fit with a DistributedOptimizer."""

import os

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import keras
from model_styles import sequential

pytestmark = pytest.mark.keras


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, :1] + 0.5 * rng.normal(size=(n, 1)) > 0).astype(np.float32)
    return x, y


@pytest.mark.parametrize("style", ["input", "deferred"])  # subclassed: in test_saving etc.
def test_full_callback_stack_with_distributed_optimizer(hvd, tmp_path, style):
    directory = hvd.broadcast_object(str(tmp_path), root_rank=0)
    keras.utils.set_random_seed(10 + hvd.rank())  # different initial weights on every rank
    model = sequential(style, (4,), [keras.layers.Dense(8, activation="relu"),
                                     keras.layers.Dense(1, activation="sigmoid")])
    lr = 0.05 * hvd.size()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9)),
                  loss="binary_crossentropy", metrics=[keras.metrics.AUC(name="auc")])

    x, y = _data(48, seed=0)
    train = hvd.data.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)),
                                   global_batch_size=4 * hvd.size(), drop_remainder=True)
    steps = 48 // (4 * hvd.size())  # every rank runs the same number of steps
    x_val, y_val = _data(19, seed=1)
    x_shard, y_shard = hvd.data.shard_arrays(x_val, y_val)  # uneven shards
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=2),
        hvd.callbacks.DistributedValidationCallback(),
        hvd.callbacks.MetricAverageCallback(),
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=5),
        hvd.callbacks.ModelCheckpoint(os.path.join(directory, "best.keras"), save_best_only=True),
    ]
    history = model.fit(train.repeat(), steps_per_epoch=steps, epochs=3, shuffle=False,
                        validation_data=(x_shard, y_shard), validation_batch_size=4,
                        callbacks=callbacks, verbose=hvd.callbacks.verbose(0))

    # Same model and the same logs everywhere.
    weights = hvd.allgather_object(model.get_weights())
    for other in weights[1:]:
        for a, b in zip(weights[0], other):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-7)
    assert hvd.allgather_object(history.history) == [history.history] * hvd.size()
    assert history.history["learning_rate"][-1] == pytest.approx(lr, rel=1e-6)
    # val_* are those of one process evaluating the whole validation set.
    want = model.evaluate(x_val, y_val, batch_size=19, verbose=0, return_dict=True)
    for key, value in want.items():
        assert history.history["val_" + key][-1] == pytest.approx(value, rel=1e-6)
    hvd.barrier()
    ckpt = hvd.callbacks.latest_checkpoint(directory)
    assert ckpt is not None and ckpt.monitor == "val_loss"
    assert ckpt.best == pytest.approx(min(history.history["val_loss"]), rel=1e-12)
    restored = keras.models.load_model(ckpt.path)
    assert isinstance(restored.optimizer, hvd.DistributedOptimizer)
    hvd.barrier()
