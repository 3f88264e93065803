"""Serialization of DistributedOptimizer and kerashvd.load_model, at any world size."""

import io
import os
import shutil
import tempfile
import zipfile

import numpy as np
import pytest
import tensorflow as tf

from kerashvd.training.keras_compat import USES_TF_KERAS, keras
from test_optimizer import BATCH, apply, assert_identical_on_all_ranks, make_data, make_model

pytestmark = pytest.mark.keras
# Full-model file formats: tf_keras also writes legacy HDF5.
FORMATS = [".keras", ".h5"] if USES_TF_KERAS else [".keras"]


@pytest.fixture
def rank_dir(hvd):
    """A directory of this rank's own (pytest's tmp_path is not safe across mpiexec ranks)."""
    path = tempfile.mkdtemp(prefix=f"khvd_saving_r{hvd.rank()}_")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_get_config_round_trip(hvd):
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01, beta_1=0.8), name="roundtrip",
                                   compression=hvd.Compression.fp16, sparse_as_dense=True,
                                   backward_passes_per_step=3, op=hvd.Average,
                                   gradient_predivide_factor=2.0,
                                   average_aggregated_gradients=True, num_groups=2,
                                   scale_local_gradients=False, bucket_cap_mb=0.5)
    config = opt.get_config()
    for again in (hvd.DistributedOptimizer.from_config(config),
                  keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(opt))):
        assert type(again) is hvd.DistributedOptimizer
        assert again.get_config() == config
        assert again.compression is hvd.Compression.fp16
        assert again.scale_local_gradients is False
        assert again.bucket_cap_mb == 0.5
        assert isinstance(again.inner_optimizer, keras.optimizers.Adam)
        assert again.inner_optimizer.beta_1 == 0.8
        assert float(np.asarray(again.learning_rate)) == pytest.approx(0.01)

    scaled = hvd.DistributedOptimizer(keras.mixed_precision.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=64.0))
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(scaled))
    assert type(again) is type(scaled)
    assert isinstance(again, keras.mixed_precision.LossScaleOptimizer)
    assert again.inner_optimizer.initial_scale == 64.0


def _compiled_model(optimizer, style="input"):
    model = make_model(style=style)
    model.compile(optimizer=optimizer, loss="mse")
    return model


def _train_eagerly(model, x, y):
    """One ``model.optimizer.apply`` per batch, eagerly (the same apply() fit uses, no trace)."""
    loss_fn = keras.losses.MeanSquaredError()
    for start in range(0, len(x), BATCH):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[start:start + BATCH], model(x[start:start + BATCH]))
        apply(model.optimizer, tape.gradient(loss, model.trainable_variables),
              model.trainable_variables)


def _adam_state(optimizer):
    """The Adam optimizer's variables: iterations, learning rate, moments."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return [v.numpy() for v in inner.variables]


@pytest.mark.parametrize("suffix,style", [(f, "input") for f in FORMATS] + [(".keras", "subclassed")])
def test_load_model_restores_the_wrapped_optimizer_with_its_state(hvd, rank_dir, suffix, style):
    x, y, _, _ = make_data(hvd, steps=3)
    first, rest = slice(0, 2 * BATCH), slice(2 * BATCH, None)
    model = _compiled_model(hvd.DistributedOptimizer(keras.optimizers.Adam(0.05)), style)
    _train_eagerly(model, x[first], y[first])
    path = os.path.join(rank_dir, "wrapped" + suffix)
    model.save(path)

    # keras.saving.load_model alone: the class is a registered Keras serializable.
    plain_load = keras.saving.load_model(path)
    assert isinstance(plain_load.optimizer, hvd.DistributedOptimizer)
    assert int(np.asarray(plain_load.optimizer.iterations)) == 2

    reloaded = hvd.load_model(path, compression=hvd.Compression.none)
    opt = reloaded.optimizer
    assert isinstance(opt, hvd.DistributedOptimizer)
    assert int(np.asarray(opt.iterations)) == 2
    for a, b in zip(_adam_state(opt), _adam_state(model.optimizer)):
        np.testing.assert_array_equal(a, b)

    # Training on from the reloaded state (fit) equals training on without saving.
    reloaded.fit(x[rest], y[rest], batch_size=BATCH, shuffle=False, verbose=0)
    _train_eagerly(model, x[rest], y[rest])
    assert int(np.asarray(opt.iterations)) == 3
    for a, b in zip(reloaded.get_weights(), model.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert_identical_on_all_ranks(hvd, reloaded.get_weights(), "reloaded")


@pytest.mark.parametrize("suffix", FORMATS)
def test_load_model_wraps_a_plain_optimizer_and_keeps_its_state(hvd, rank_dir, suffix):
    x, y, _, _ = make_data(hvd, steps=2)
    model = _compiled_model(keras.optimizers.Adam(0.05))
    _train_eagerly(model, x, y)  # local training, no communication
    path = os.path.join(rank_dir, "plain" + suffix)
    model.save(path)

    reloaded = hvd.load_model(path, backward_passes_per_step=2, average_aggregated_gradients=True)
    opt = reloaded.optimizer
    assert isinstance(opt, hvd.DistributedOptimizer)
    assert opt.backward_passes_per_step == 2
    assert int(np.asarray(opt.iterations)) == 2
    for a, b in zip(_adam_state(opt), _adam_state(model.optimizer)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="does not take"):
        hvd.load_model(path, learning_rate=0.1)


def test_load_model_turns_xla_off_for_the_distributed_optimizer(hvd, rank_dir):
    """A file saved with jit_compile=True (as Keras resolves it on a GPU) loads without XLA."""
    model = make_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
    path = os.path.join(rank_dir, "xla.keras")
    model.save(path)
    assert keras.saving.load_model(path).jit_compile  # as saved
    reloaded = hvd.load_model(path)
    assert isinstance(reloaded.optimizer, hvd.DistributedOptimizer)
    assert reloaded.jit_compile is False


def test_load_model_of_a_damaged_keras_file_says_so(hvd, rank_dir):
    """Keras alone says "File not found" for a .keras file that is not a zip archive."""
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    good = os.path.join(rank_dir, "model.keras")
    model.save(good)
    with open(good, "rb") as f:
        head = f.read(100)
    for name, content in [("truncated.keras", head), ("empty.keras", b""),
                          ("text.keras", b"not a model\n")]:
        path = os.path.join(rank_dir, name)
        with open(path, "wb") as f:
            f.write(content)
        with pytest.raises(ValueError, match="not a Keras archive") as info:
            hvd.load_model(path)
        assert repr(path) in str(info.value) and "damaged" in str(info.value)
    assert isinstance(hvd.load_model(good).optimizer, hvd.DistributedOptimizer)


def _optimizer_datasets(path):
    """{name: shape} of the optimizer's arrays in a ``.keras`` file."""
    import h5py

    found = {}
    with zipfile.ZipFile(path) as archive, h5py.File(io.BytesIO(
            archive.read("model.weights.h5")), "r") as weights:
        weights.visititems(lambda name, obj: found.__setitem__(name, obj.shape)
                           if name.startswith("optimizer") and isinstance(obj, h5py.Dataset)
                           else None)
    return found


def test_checkpoint_holds_the_optimizer_state_once_in_the_plain_layout(hvd, rank_dir):
    """A DistributedOptimizer checkpoint stores the inner optimizer's state once, under the
    names a plain optimizer uses, so it is no bigger and loads into plain Keras. This also
    guards the one assumption it rests on: Keras' saving walks ``dir()`` (see keras3.py)."""
    x, y, _, _ = make_data(hvd, steps=2)
    paths = {}
    for label, optimizer in (("plain", keras.optimizers.Adam(0.05)),
                             ("wrapped", hvd.DistributedOptimizer(keras.optimizers.Adam(0.05)))):
        model = _compiled_model(optimizer)
        _train_eagerly(model, x, y)
        paths[label] = os.path.join(rank_dir, label + ".keras")
        model.save(paths[label])
    wrapped_model = model
    plain_layout = _optimizer_datasets(paths["plain"])
    assert _optimizer_datasets(paths["wrapped"]) == plain_layout, (
        "a DistributedOptimizer checkpoint no longer has the plain optimizer's layout: has "
        "Keras' saving stopped walking dir() (kerashvd/training/optimizer/keras3.py __dir__)?")

    # Plain Keras: a model compiled with the plain optimizer takes the wrapped one's state.
    plain = _compiled_model(keras.optimizers.Adam(0.05))
    plain.optimizer.build(plain.trainable_variables)
    plain.load_weights(paths["wrapped"])
    for a, b in zip(_adam_state(plain.optimizer), _adam_state(wrapped_model.optimizer)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(plain.get_weights(), wrapped_model.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(USES_TF_KERAS, reason="the earlier layout is the Keras 3 wrapper's")
def test_checkpoint_of_the_earlier_layout_still_loads(hvd, rank_dir, monkeypatch):
    """Files from earlier kerashvd versions held the wrapper's two unused placeholders before
    the inner state, and the inner state again under ``optimizer/inner_optimizer``."""
    from kerashvd.training.optimizer import keras3

    x, y, _, _ = make_data(hvd, steps=2)
    model = _compiled_model(hvd.DistributedOptimizer(keras.optimizers.Adam(0.05)))
    _train_eagerly(model, x, y)
    path = os.path.join(rank_dir, "earlier.keras")
    with monkeypatch.context() as patch:  # the earlier writer
        patch.setattr(keras3.DistributedOptimizer, "variables", property(
            lambda self: self._variables[:] + self.inner_optimizer.variables))
        patch.setattr(keras3.DistributedOptimizer, "_HIDDEN_FROM_DIR", ())
        model.save(path)
    assert any(k.startswith("optimizer/inner_optimizer") for k in _optimizer_datasets(path))

    reloaded = _compiled_model(hvd.DistributedOptimizer(keras.optimizers.Adam(0.05)))
    reloaded.optimizer.build(reloaded.trainable_variables)
    reloaded.load_weights(path)
    assert int(np.asarray(reloaded.optimizer.iterations)) == 2
    for a, b in zip(_adam_state(reloaded.optimizer), _adam_state(model.optimizer)):
        np.testing.assert_array_equal(a, b)
