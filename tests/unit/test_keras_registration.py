"""Loading a kerashvd model in a fresh process: the documented ways register the classes.

``import kerashvd`` imports no Keras, so its classes (``DistributedOptimizer``,
``SyncBatchNormalization``) are registered with Keras by ``hvd.load_model``, by
``hvd.init()`` when Keras is imported already, or by any use of the classes
(kerashvd/training/_keras_classes.py). Each load runs in a process that imported nothing of kerashvd
but the package.

Keras finds a saved custom class by its registered name (``kerashvd>DistributedOptimizer``),
not by the module path the file also records, so files saved before a module moved still
load: checked here with files whose module paths are rewritten to kerashvd's earlier layout.
"""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

SAVE = """
import sys, numpy as np, tensorflow as tf, kerashvd as hvd
hvd.init()
from kerashvd.training.keras_compat import keras
model = keras.Sequential([keras.Input((3,)), hvd.SyncBatchNormalization(), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
model.fit(np.ones((4, 3), np.float32), np.ones((4, 1), np.float32), verbose=0)
model.save(sys.argv[1])
"""

# Loads the documented ways; prints what came back. The import order varies.
LOAD = """
import importlib, os, sys
order = sys.argv[2]
if order == "keras_first":  # Keras imported, then hvd.init() registers
    k = importlib.import_module("tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") else "keras")
    import kerashvd as hvd
    hvd.init()
    load = k.models.load_model
else:  # hvd.load_model registers, whatever is imported
    import kerashvd as hvd
    load = hvd.load_model
model = load(sys.argv[1])
print("LOADED", type(model.optimizer).__module__, type(model.optimizer).__name__,
      type(model.layers[0]).__name__, int(model.optimizer.iterations))
"""


# Registered names, which must never change, and where the classes lived before kerashvd/ was
# grouped into sub-packages (runtime/, collectives/, training/).
REGISTERED = {False: ["kerashvd>DistributedOptimizer", "kerashvd>SyncBatchNormalization"],
              True: ["kerashvd>DistributedOptimizerKeras2", "kerashvd>SyncBatchNormalization"]}
EARLIER_MODULES = {"DistributedOptimizer": {False: "kerashvd.optimizer.keras3",
                                            True: "kerashvd.optimizer.keras2"},
                   "SyncBatchNormalization": {False: "kerashvd.sync_batch_norm",
                                              True: "kerashvd.sync_batch_norm"}}


def _with_earlier_module_paths(path, copy, legacy):
    """Copies the ``.keras`` file `path` to `copy`, its kerashvd classes' ``module`` entries set
    to their earlier paths; checks their registered names on the way."""
    with zipfile.ZipFile(path) as archive:
        members = {info: archive.read(info) for info in archive.infolist()}
    registered = []

    def rewrite(node):
        if isinstance(node, dict):
            if str(node.get("registered_name")).startswith("kerashvd>"):
                registered.append(node["registered_name"])
                node["module"] = EARLIER_MODULES[node["class_name"]][legacy]
            for value in node.values():
                rewrite(value)
        elif isinstance(node, list):
            for value in node:
                rewrite(value)

    with zipfile.ZipFile(copy, "w") as archive:
        for info, data in members.items():
            if info.filename == "config.json":
                config = json.loads(data)
                rewrite(config)
                data = json.dumps(config)
            archive.writestr(info, data)
    assert sorted(registered) == REGISTERED[legacy], registered


def _start(code, *args, legacy):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERASHVD_", "PMI_"))}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1"})
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    else:
        env.pop("TF_USE_LEGACY_KERAS", None)
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(procs):
    """Waits for every process (they run side by side); returns their (returncode, out, err)."""
    outputs = [proc.communicate(timeout=300) for proc in procs]
    return [(proc.returncode, out, err) for proc, (out, err) in zip(procs, outputs)]


def test_load_model_in_a_fresh_process(tmp_path):
    """Keras 3 (hvd.load_model; keras.models.load_model after init) and tf_keras (both), also
    for files that name the classes' earlier module paths."""
    pytest.importorskip("tf_keras")
    paths = {legacy: str(tmp_path / f"model-{legacy}.keras") for legacy in (False, True)}
    for code, out, err in _finish([_start(SAVE, paths[legacy], legacy=legacy)
                                   for legacy in (False, True)]):
        assert code == 0, err[-3000:]
    earlier = {legacy: str(tmp_path / f"earlier-{legacy}.keras") for legacy in (False, True)}
    for legacy in (False, True):
        _with_earlier_module_paths(paths[legacy], earlier[legacy], legacy)
    cases = [(False, "kerashvd_first", paths), (False, "keras_first", paths),
             (True, "kerashvd_first", paths), (True, "keras_first", paths),
             (False, "keras_first", earlier), (True, "kerashvd_first", earlier)]
    results = _finish([_start(LOAD, files[legacy], order, legacy=legacy)
                       for legacy, order, files in cases])
    for (legacy, order, files), (code, out, err) in zip(cases, results):
        assert code == 0, (legacy, order, files[legacy], err[-3000:])
        module = "kerashvd.training.optimizer." + ("keras2" if legacy else "keras3")
        assert f"LOADED {module} DistributedOptimizer SyncBatchNormalization 1" in out, (
            legacy, order, files[legacy], out, err[-3000:])


def test_import_kerashvd_still_imports_neither_tensorflow_nor_keras():
    code = ("import sys, kerashvd\n"
            "assert not {'tensorflow', 'keras', 'tf_keras'} & set(sys.modules), sys.modules\n")
    ((returncode, out, err),) = _finish([_start(code, legacy=False)])
    assert returncode == 0, err[-3000:]
