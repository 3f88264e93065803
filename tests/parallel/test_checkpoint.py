"""Rank-0 atomic checkpoints, and resuming from them with the same optimizer state."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import pytest

from kerashvd.training.keras_compat import USES_TF_KERAS, keras, model_built, optimizer_variables
from model_styles import sequential

pytestmark = pytest.mark.keras
# Full-model file formats ModelCheckpoint writes: tf_keras also writes legacy HDF5.
FORMATS = [".keras", ".h5"] if USES_TF_KERAS else [".keras"]


def _model(seed, style="input"):
    keras.utils.set_random_seed(seed)
    model = sequential(style, (3,), [keras.layers.Dense(4, activation="relu"),
                                     keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    return (rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 1)).astype(np.float32))


def _state(model):
    return [np.array(v.numpy()) for v in model.variables + optimizer_variables(model.optimizer)]


def _shared_dir(hvd, tmp_path):
    """One directory for every rank of this test (rank 0's tmp_path; one host)."""
    return hvd.broadcast_object(str(tmp_path), root_rank=0)


def test_atomic_save_keeps_the_old_file_when_the_writer_crashes(tmp_path):
    import kerashvd.callbacks as callbacks

    final = tmp_path / "model.keras"
    final.write_bytes(b"old checkpoint")
    seen = []

    def crashing_writer(path):
        seen.append(path)
        assert os.path.dirname(path) == str(tmp_path) and path != str(final)
        assert path.endswith("model.keras") and os.path.basename(path).startswith(".tmp-")
        with open(path, "wb") as f:
            f.write(b"half of a new ch")
        assert final.read_bytes() == b"old checkpoint"  # never under the final name
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        callbacks.atomic_save(str(final), crashing_writer)
    assert final.read_bytes() == b"old checkpoint"
    assert sorted(os.listdir(tmp_path)) == ["model.keras"]  # no temporary file left behind

    callbacks.atomic_save(str(final), lambda path: open(path, "wb").write(b"new checkpoint"))
    assert final.read_bytes() == b"new checkpoint"
    assert sorted(os.listdir(tmp_path)) == ["model.keras"]
    with pytest.raises(FileNotFoundError, match="did not create"):
        callbacks.atomic_save(str(final), lambda path: None)


def test_only_rank_zero_writes_and_never_under_the_final_name(hvd, tmp_path, capsys):
    directory = _shared_dir(hvd, tmp_path)
    model = _model(seed=1)
    saved_to = []
    real_save = model.save

    def spy_save(path, *args, **kwargs):
        saved_to.append(path)
        assert not os.path.exists(path)
        real_save(path, *args, **kwargs)

    model.save = spy_save
    x, y = _data()
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[
        hvd.callbacks.ModelCheckpoint(os.path.join(directory, "model-{epoch:02d}.keras"),
                                      verbose=1)])
    hvd.barrier()
    printed = capsys.readouterr().out
    assert (os.path.join(directory, "model-02.keras") in printed) == (hvd.rank() == 0), printed
    assert ".tmp-" not in printed  # the messages name the final files

    calls = hvd.allgather_object(len(saved_to))
    assert calls == [2] + [0] * (hvd.size() - 1)
    for path in saved_to:
        assert os.path.dirname(path) == directory
        assert os.path.basename(path).startswith(".tmp-")
    assert sorted(os.listdir(directory)) == [
        "kerashvd_checkpoint.json", "model-01.keras", "model-02.keras"]
    ckpt = hvd.callbacks.latest_checkpoint(directory)
    assert ckpt.epoch == 2 and ckpt.path == os.path.join(directory, "model-02.keras")
    assert hvd.allgather_object(tuple(ckpt)) == [tuple(ckpt)] * hvd.size()
    hvd.barrier()  # nobody leaves (and deletes tmp_path) while others still read


def test_checkpoint_survives_a_crash_during_save(hvd, tmp_path):
    model = _model(seed=2)
    model.optimizer.build(model.trainable_variables)
    path = str(tmp_path / "ckpt.keras")
    callback = hvd.callbacks.ModelCheckpoint(path)
    callback.set_model(model)
    callback.on_epoch_end(0, {"loss": 1.0})
    if hvd.rank() != 0:
        assert not os.path.exists(path)  # other ranks never write
        return
    before = open(path, "rb").read()

    def crash_midway(tmp, *args, **kwargs):
        with open(tmp, "wb") as f:
            f.write(before[: len(before) // 2])
        raise RuntimeError("killed while saving")

    model.save = crash_midway
    with pytest.raises(RuntimeError, match="killed while saving"):
        callback.on_epoch_end(1, {"loss": 0.5})
    assert open(path, "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt.keras", "kerashvd_checkpoint.json"]
    assert hvd.callbacks.latest_checkpoint(str(tmp_path), broadcast=False).epoch == 1
    keras.models.load_model(path)  # still a valid checkpoint


def test_weights_only_saves_are_atomic_and_recorded(hvd, tmp_path):
    model = _model(seed=5)
    path = str(tmp_path / "w-{epoch}.weights.h5")
    callback = hvd.callbacks.ModelCheckpoint(path, save_weights_only=True)
    callback.set_model(model)
    saved_to = []
    real_save_weights = model.save_weights
    model.save_weights = lambda p, *a, **k: (saved_to.append(p), real_save_weights(p, *a, **k))
    callback.on_epoch_end(0, {"loss": 1.0})
    if hvd.rank() == 0:
        assert [os.path.basename(p)[:5] for p in saved_to] == [".tmp-"]
        ckpt = hvd.callbacks.latest_checkpoint(str(tmp_path), broadcast=False)
        assert (os.path.basename(ckpt.path), ckpt.epoch, ckpt.iterations) == ("w-1.weights.h5", 1, None)
        model.load_weights(ckpt.path)
    else:
        assert saved_to == [] and not os.listdir(tmp_path)


def test_save_best_only_and_argument_checks(hvd, tmp_path):
    model = _model(seed=3)
    path = str(tmp_path / "best.keras")
    callback = hvd.callbacks.ModelCheckpoint(path, save_best_only=True)
    callback.set_model(model)
    expected_epoch = {0: 1, 1: 1, 2: 3, 3: 3}
    for epoch, val_loss in enumerate([1.0, 2.0, 0.5, float("nan")]):
        callback.on_epoch_end(epoch, {"val_loss": val_loss})
        if hvd.rank() == 0:
            record = json.load(open(tmp_path / "kerashvd_checkpoint.json"))
            assert record["epoch"] == expected_epoch[epoch]
    if hvd.rank() == 0:
        ckpt = hvd.callbacks.latest_checkpoint(str(tmp_path), broadcast=False)
        assert (ckpt.epoch, ckpt.monitor, ckpt.best) == (3, "val_loss", 0.5)
    # A NaN or missing value is never an improvement, not even the first (whatever Keras does).
    unsure = hvd.callbacks.ModelCheckpoint(str(tmp_path / "unsure.keras"), save_best_only=True)
    unsure.set_model(model)
    unsure.on_epoch_end(0, {"val_loss": float("nan")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        unsure.on_epoch_end(1, {"loss": 1.0})
    assert not (tmp_path / "unsure.keras").exists() and unsure.best is None
    assert any("only with val_loss available" in str(w.message) for w in caught) == (hvd.rank() == 0)
    with pytest.raises(ValueError, match="cannot infer"):
        hvd.callbacks.ModelCheckpoint(path, monitor="val_thing", save_best_only=True)
    assert hvd.callbacks.ModelCheckpoint(path, monitor="val_auc", save_best_only=True).mode == "max"
    with pytest.raises(ValueError, match=r"\.weights\.h5"):
        hvd.callbacks.ModelCheckpoint(path, save_weights_only=True)
    for bad in (0, "batch", True):
        with pytest.raises(ValueError, match="save_freq must be 'epoch' or a positive number"):
            hvd.callbacks.ModelCheckpoint(path, save_freq=bad)
    with pytest.raises(ValueError, match="save_best_only compares epoch-end metrics"):
        hvd.callbacks.ModelCheckpoint(path, save_freq=100, save_best_only=True)
    with pytest.raises(ValueError, match="max_to_keep must be None or an int >= 1"):
        hvd.callbacks.ModelCheckpoint(path, max_to_keep=0)
    assert hvd.callbacks.latest_checkpoint(str(tmp_path / "missing"), broadcast=False) is None


def test_best_model_checkpoint_saves_on_improvement_only(hvd, tmp_path):
    model = _model(seed=4)
    callback = hvd.callbacks.BestModelCheckpoint(str(tmp_path / "best-{epoch}.keras"),
                                                 monitor="val_accuracy")
    assert (callback.save_best_only, callback.mode) == (True, "max")
    callback.set_model(model)
    for epoch, accuracy in enumerate([0.5, 0.4, 0.7, 0.7]):
        callback.on_epoch_end(epoch, {"val_accuracy": accuracy})
    saved = sorted(p.name for p in tmp_path.glob("best-*.keras"))
    assert saved == (["best-1.keras", "best-3.keras"] if hvd.rank() == 0 else [])


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temporary_files_of_dead_writers_are_removed(hvd):
    from kerashvd.callbacks import checkpoint_io

    directory = tempfile.mkdtemp(prefix=f"khvd_tmpfiles_r{hvd.rank()}_")
    try:
        host, dead, old = checkpoint_io._HOST, _dead_pid(), time.time() - 2 * 24 * 3600
        names = {
            f".tmp-{host}-{dead}-0123abcd-model.keras": False,  # this host, process gone
            f".tmp-{dead}-0123abcd-kerashvd_checkpoint.json": False,  # no host: an older run
            f".tmp-{host}-{os.getppid()}-0123abcd-model.keras": True,  # a live process
            ".tmp-otherhost-12-0123abcd-model.keras": True,  # another host, recent
            ".tmp-otherhost-13-0123abcd-model.keras": False,  # another host, a day old
            ".tmp-notes.txt": True, "notes.txt": True,  # not the pattern
        }
        for name in names:
            with open(os.path.join(directory, name), "wb") as f:
                f.write(b"x" * 100)
        os.utime(os.path.join(directory, ".tmp-otherhost-13-0123abcd-model.keras"), (old, old))
        hvd.callbacks.atomic_save(os.path.join(directory, "model.keras"),
                                  lambda path: open(path, "wb").write(b"model"))
        kept = sorted(name for name, keep in names.items() if keep)
        assert sorted(os.listdir(directory)) == sorted(kept + ["model.keras"])

        # ModelCheckpoint cleans its directory when training starts (rank 0, which writes).
        stale = os.path.join(directory, f".tmp-{host}-{dead}-89abcdef-model.keras")
        open(stale, "wb").close()
        callback = hvd.callbacks.ModelCheckpoint(os.path.join(directory, "model.keras"))
        callback.on_train_begin()
        assert os.path.exists(stale) == (hvd.rank() != 0)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("damage", ["missing_file", "corrupt_record"])
def test_a_damaged_record_is_an_error_on_every_rank(hvd, tmp_path, damage):
    directory = _shared_dir(hvd, tmp_path)
    record = os.path.join(directory, "kerashvd_checkpoint.json")
    if hvd.rank() == 0:
        if damage == "missing_file":
            with open(record, "w") as f:
                json.dump({"path": "model-04.keras", "epoch": 4, "monitor": None, "best": None}, f)
        else:
            with open(record, "w") as f:
                f.write('{"path": "model-04.keras", "ep')  # cut short
    hvd.barrier()
    error, match = ((FileNotFoundError, r"model-04\.keras \(epoch 4\), which does not exist")
                    if damage == "missing_file" else (ValueError, "cannot be read"))
    with pytest.raises(error, match=match) as info:
        hvd.callbacks.latest_checkpoint(directory, root_rank=hvd.size() - 1)
    assert record in str(info.value)
    if hvd.rank() == 0:
        with pytest.raises(error, match=match):
            hvd.callbacks.latest_checkpoint(directory, broadcast=False)
    hvd.barrier()


class _StateAtStart(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.state = _state(self.model) if model_built(self.model) else None


@pytest.mark.parametrize("suffix,style", [(f, "input") for f in FORMATS] + [(".keras", "deferred")])
def test_resume_restores_epoch_and_optimizer_state_on_every_rank(hvd, tmp_path, suffix, style):
    """With style "deferred", the first run's model and the other ranks' fresh models of the
    resumed run are Sequentials without keras.Input (rank 0's loaded model is built)."""
    directory = _shared_dir(hvd, tmp_path)
    path = os.path.join(directory, "ckpt" + suffix)
    x, y = _data()
    model = _model(seed=4, style=style)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.ModelCheckpoint(path)])
    saved = hvd.broadcast_object(_state(model), root_rank=0)
    hvd.barrier()  # rank 0's checkpoint is complete

    # A new run: rank 0 restores the checkpoint; the others build a fresh, different model.
    ckpt = hvd.callbacks.latest_checkpoint(directory)
    assert ckpt.epoch == 2
    if hvd.rank() == 0:
        resumed = keras.models.load_model(ckpt.path)
    else:
        resumed = _model(seed=100 + hvd.rank(), style=style)
    start = _StateAtStart()
    history = resumed.fit(x, y, batch_size=4, epochs=3, initial_epoch=ckpt.epoch, verbose=0,
                          shuffle=False, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                                    start])
    assert history.epoch == [2]
    if style == "input":  # every rank starts from rank 0's restored state
        assert len(start.state) == len(saved)
        for got, want in zip(start.state, saved):
            np.testing.assert_array_equal(got, want)
    else:  # unbuilt models: rank 0's state reaches them after the first batch (same data here)
        final = hvd.allgather_object(_state(resumed))
        assert all(len(other) == len(saved) for other in final)
        for other in final[1:]:
            for got, want in zip(other, final[0]):
                np.testing.assert_array_equal(got, want)
    iterations = resumed.optimizer.iterations.numpy()
    assert iterations == 3 * 2  # 2 epochs restored + 1 epoch, 2 steps each
    hvd.barrier()


def test_latest_checkpoint_of_a_missing_directory_warns_or_raises(hvd):
    """A mistyped directory must not silently restart training: rank 0 warns, and
    required=True raises on every rank, naming the directory."""
    import warnings

    empty = tempfile.mkdtemp(prefix=f"khvd_ckpt_empty_r{hvd.rank()}_")
    missing = os.path.join(empty, "no_such_dir")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert hvd.callbacks.latest_checkpoint(missing) is None
            assert hvd.callbacks.latest_checkpoint(empty) is None  # exists, no record: no warning
        texts = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        if hvd.rank() == 0:
            assert len(texts) == 1 and repr(missing) in texts[0] and "does not exist" in texts[0]
        else:
            assert texts == []
        with pytest.raises(FileNotFoundError, match="does not exist") as info:
            hvd.callbacks.latest_checkpoint(missing, required=True)
        assert "required=True" in str(info.value)
        with pytest.raises(FileNotFoundError, match="holds no checkpoint record"):
            hvd.callbacks.latest_checkpoint(empty, required=True)
        with pytest.raises(FileNotFoundError, match=repr(missing).replace("\\", "\\\\")):
            hvd.callbacks.latest_checkpoint(missing, broadcast=False, required=True)
    finally:
        shutil.rmtree(empty, ignore_errors=True)
