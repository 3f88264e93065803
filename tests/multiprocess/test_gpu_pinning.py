"""One rank per GPU: the pinning rule, its switch, and init() applying it on real ranks.

There is no GPU (nor a TensorFlow that could use one) on the test machines, so the device list
is the seam: ``kerashvd.runtime.gpu_pinning._devices`` lists and sets TensorFlow's visible GPUs, and
these tests replace it with a fake list. Communication is real (mpiexec ranks).
"""

import json
import os
import subprocess
import sys
import warnings

import pytest

from conftest import REPO, mpiexec_path
from kerashvd.runtime import gpu_pinning
from kerashvd.runtime.gpu_pinning import choose_gpu, host_gpu_count, setting

GPUS = ["gpu0", "gpu1", "gpu2", "gpu3"]


@pytest.mark.parametrize("visible, local_rank, local_size, expected", [
    (GPUS, 0, 4, "gpu0"),
    (GPUS, 3, 4, "gpu3"),
    (GPUS, 1, 2, "gpu1"),         # more GPUs than ranks: the first ones
    (GPUS[:2], 3, 4, "gpu1"),     # fewer GPUs than ranks: shared round-robin
    (GPUS, 0, 1, None),           # one rank on the host: keeps every GPU
    (GPUS[:1], 1, 2, None),       # one visible GPU: already bound by the launcher
    ([], 1, 2, None),             # CPU only
])
def test_choose_gpu(visible, local_rank, local_size, expected):
    assert choose_gpu(visible, local_rank, local_size) == expected


def test_setting_keyword_then_variable_then_default():
    assert setting(None, {}) is True
    assert setting(None, {"KERASHVD_PIN_GPU": "0"}) is False
    assert setting(None, {"KERASHVD_PIN_GPU": "1"}) is True
    assert setting(True, {"KERASHVD_PIN_GPU": "0"}) is True
    assert setting(False, {}) is False
    with pytest.raises(ValueError, match="KERASHVD_PIN_GPU must be 1 .* or 0 .*received 'yes'"):
        setting(None, {"KERASHVD_PIN_GPU": "yes"})
    with pytest.raises(ValueError, match="pin_gpu must be True or False.*received pin_gpu=1"):
        setting(1, {})


@pytest.mark.parametrize("listed, expected", [
    ("0,1", 2), ("3", 1), ("", 0), ("-1", 0), ("0,-1,2", 1), ("GPU-a1b2,GPU-c3d4", 2),
])
def test_host_gpu_count_reads_cuda_visible_devices(listed, expected):
    assert host_gpu_count({"CUDA_VISIBLE_DEVICES": listed}) == expected


class FakeDevices:
    """TensorFlow's visible GPU list, faked; `initialized` makes changes fail as TF's do."""

    def __init__(self, gpus, initialized=False):
        self.gpus = list(gpus)
        self.initialized = initialized

    def visible(self):
        return list(self.gpus)

    def make_visible(self, device):
        if self.initialized and self.gpus != [device]:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        self.gpus = [device]


def test_apply_pins_warns_when_too_late_and_can_be_off(monkeypatch):
    fake = FakeDevices(GPUS[:2])
    monkeypatch.setattr(gpu_pinning, "_devices", fake)
    assert gpu_pinning.apply(1, 2) == "gpu1" and fake.gpus == ["gpu1"]

    fake = FakeDevices(GPUS[:2])
    monkeypatch.setattr(gpu_pinning, "_devices", fake)
    assert gpu_pinning.apply(1, 2, enabled=False) is None and fake.gpus == GPUS[:2]

    fake = FakeDevices(GPUS[:2], initialized=True)  # TensorFlow ran an op before init()
    monkeypatch.setattr(gpu_pinning, "_devices", fake)
    with pytest.warns(RuntimeWarning) as record:
        assert gpu_pinning.apply(1, 2) is None
    message = str(record[0].message)
    assert "could not pin local rank 1 to its GPU gpu1" in message
    assert "before running any TensorFlow op" in message and "pin_gpu=False" in message

    fake = FakeDevices(["gpu1"], initialized=True)  # already what we want: silent
    monkeypatch.setattr(gpu_pinning, "_devices", fake)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpu_pinning.apply(1, 2) is None


RANK_SCRIPT = """
import json, sys
import kerashvd as hvd
from kerashvd.runtime import gpu_pinning

class Fake:
    def __init__(self):
        self.gpus = ["gpu0", "gpu1", "gpu2"]
    def visible(self):
        return list(self.gpus)
    def make_visible(self, device):
        self.gpus = [device]

real = gpu_pinning._devices
result = {}
for name, kwargs in (("default", {}), ("off", {"pin_gpu": False})):
    gpu_pinning._devices = fake = Fake()
    hvd.init(**kwargs)
    result[name] = fake.gpus
    result["rank"] = hvd.rank()
    hvd.shutdown()
gpu_pinning._devices = real
hvd.init()  # no GPU on this host: nothing to pin, and TensorFlow stays unimported
result["tensorflow_imported"] = "tensorflow" in sys.modules
sys.stdout.write(json.dumps(result) + "\\n")
"""


@pytest.mark.mpi
def test_init_pins_each_rank_to_its_local_rank_gpu():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "KERASHVD_")) and k != "CUDA_VISIBLE_DEVICES"}
    env.update(KERASHVD_STALL_CHECK_TIME="20", KERASHVD_STALL_SHUTDOWN_TIME="60")
    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-c", RANK_SCRIPT],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    results = sorted((json.loads(line) for line in proc.stdout.splitlines()),
                     key=lambda r: r["rank"])
    assert [r["default"] for r in results] == [["gpu0"], ["gpu1"]], results
    assert [r["off"] for r in results] == [["gpu0", "gpu1", "gpu2"]] * 2, results
    if not os.path.isdir("/proc/driver/nvidia/gpus"):
        assert not any(r["tensorflow_imported"] for r in results), results
