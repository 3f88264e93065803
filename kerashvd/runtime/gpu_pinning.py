"""One process per GPU: ``init()`` makes each rank see only its own GPU.

Horovod's scripts do it by hand after ``hvd.init()``::

    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

kerashvd does the same in :func:`kerashvd.init`, by this rule (:func:`choose_gpu`): when this
host runs several ranks and TensorFlow sees several GPUs, rank ``local_rank`` keeps GPU
``local_rank % len(visible GPUs)`` of the GPUs visible to it, which becomes its ``/GPU:0``.
Otherwise nothing changes: no GPU or a single visible GPU (the launcher already bound one to
each rank, e.g. ``srun --gpus-per-task=1`` or a per-rank ``CUDA_VISIBLE_DEVICES``), or a single
rank on the host. The GPUs are chosen among those visible, so ``CUDA_VISIBLE_DEVICES`` and an
earlier ``tf.config.set_visible_devices`` are respected. With fewer GPUs than local ranks the
ranks share them round-robin, which is also right when the launcher gives each group of ranks
its own GPUs (NCCL refuses two ranks on one GPU, so a wrong sharing fails loudly).

TensorFlow fixes its devices when it runs its first op; if that happened before ``init()``, the
choice cannot be applied: kerashvd then warns when this rank's devices are not the intended
ones. Turn pinning off with ``kerashvd.init(pin_gpu=False)`` or ``KERASHVD_PIN_GPU=0``.

On a host without NVIDIA GPUs (no ``/proc/driver/nvidia/gpus`` entries and no
``CUDA_VISIBLE_DEVICES`` list) ``init()`` does not import TensorFlow for this.
"""

import os
import sys
import warnings

VARIABLE = "KERASHVD_PIN_GPU"


def setting(pin_gpu=None, environ=None):
    """Returns whether to pin: ``pin_gpu`` if given, else ``KERASHVD_PIN_GPU``, else True.

    Raises:
        ValueError: for a value other than a bool (keyword) or 0/1 (variable).
    """
    if pin_gpu is not None:
        if not isinstance(pin_gpu, bool):
            raise ValueError(f"pin_gpu must be True or False (pin each rank to its local-rank "
                             f"GPU, the default); received pin_gpu={pin_gpu!r}")
        return pin_gpu
    text = (os.environ if environ is None else environ).get(VARIABLE, "")
    if text not in ("", "0", "1"):
        raise ValueError(f"{VARIABLE} must be 1 (pin each rank to its local-rank GPU, the "
                         f"default) or 0 (leave the GPUs visible as they are); received {text!r}")
    return text != "0"


def choose_gpu(visible_gpus, local_rank, local_size):
    """Returns the element of ``visible_gpus`` this rank keeps, or None to change nothing.

    Args:
        visible_gpus: the GPUs this process sees now, in TensorFlow's order.
        local_rank: this rank's index on its host.
        local_size: the number of ranks on this host.

    Example:

    >>> choose_gpu(["gpu0", "gpu1"], local_rank=1, local_size=2)
    'gpu1'
    >>> choose_gpu(["gpu0"], local_rank=1, local_size=2) is None  # already bound
    True
    """
    if len(visible_gpus) <= 1 or local_size <= 1:
        return None
    return visible_gpus[local_rank % len(visible_gpus)]


def host_gpu_count(environ=None):
    """Upper bound of the GPUs this process may see, read without CUDA or TensorFlow."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        count = 0
        for entry in listed.split(","):
            if not entry.strip() or entry.strip().startswith("-"):
                break  # CUDA stops at the first invalid entry
            count += 1
        return count
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


class _TensorFlowDevices:
    """TensorFlow's GPU list and visibility (the one place that touches TensorFlow here)."""

    def visible(self):
        if "tensorflow" not in sys.modules and host_gpu_count() <= 1:
            return []  # nothing to choose from: keep TensorFlow unimported
        import tensorflow as tf  # lazy: only when there are GPUs to choose from

        return tf.config.get_visible_devices("GPU")

    def make_visible(self, device):
        """Raises RuntimeError when TensorFlow has initialized its devices already."""
        import tensorflow as tf  # lazy: only when there are GPUs to choose from

        tf.config.set_visible_devices(device, "GPU")


_devices = _TensorFlowDevices()


def apply(local_rank, local_size, enabled=True):
    """Applies :func:`choose_gpu` to this process; returns the GPU kept, or None.

    Warns (never raises) when TensorFlow's devices were fixed before and differ from the
    choice.
    """
    if not enabled or local_size <= 1:
        return None
    visible = _devices.visible()
    target = choose_gpu(visible, local_rank, local_size)
    if target is None:
        return None
    try:
        _devices.make_visible(target)
    except RuntimeError:
        if _devices.visible() != [target]:
            warnings.warn(
                f"kerashvd.init() could not pin local rank {local_rank} to its GPU {target}: "
                f"TensorFlow had already initialized its devices, so this rank still sees "
                f"{len(visible)} GPUs and places its work on the first, like the other "
                f"{local_size - 1} rank(s) of this host. Call kerashvd.init() before running "
                f"any TensorFlow op, or call tf.config.set_visible_devices yourself and pass "
                f"pin_gpu=False (or set {VARIABLE}=0).", RuntimeWarning, stacklevel=3)
        return None
    return target
