"""The model's random-generator state in its checkpoint file.

Keras 3 layers that draw random numbers while training (``Dropout``, ``GaussianNoise``, random
augmentation ...) keep a ``SeedGenerator`` whose state is a variable: it is in
``model.variables`` but not in ``model.weights``, and Keras' ``save``/``save_weights`` leave
it out. A run resumed from such a file would draw other dropout masks than the run that was
never interrupted. :class:`ModelCheckpoint` therefore adds these states to the file it writes,
as one extra member of the archive that Keras ignores when loading: ``kerashvd/random_state.npz``
in a ``.keras`` zip archive, or the HDF5 group ``kerashvd_random_state`` in a ``.weights.h5``
file. :func:`restore` puts them back. Files without them load as before.

Keras 2 (tf_keras) also leaves the optimizer's learning rate out of its files (it is not among
``optimizer.variables``), so a run resumed there would start from the compiled rate instead
of the one a schedule or warmup callback had set, and the momentum correction of
``LearningRateWarmupCallback`` would then scale by the wrong ratio. It is stored with the
random state, under the key ``learning_rate``.

Keras 2 (tf_keras) keeps the state of its random layers inside TensorFlow's random kernels
(or, with ``enable_tf_random_generator()``, in a generator outside the model's tracked
state): no public API reaches it, so a resumed run's dropout masks differ from those of the
run that was never interrupted. :func:`warn_unrestorable_random_layers` says so, naming
the layers, instead of letting a resumed run pass for exact.
"""

import io
import warnings
import zipfile

import numpy as np

from kerashvd.training.keras_compat import USES_TF_KERAS, keras, optimizer_variables

# Keras 2 layers that draw random numbers while training (SpatialDropout* are Dropouts).
_TF_KERAS_RANDOM_LAYERS = ("Dropout", "GaussianNoise", "GaussianDropout", "AlphaDropout",
                           "RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation",
                           "RandomCrop", "RandomContrast", "RandomBrightness", "RandomHeight",
                           "RandomWidth")

_ZIP_MEMBER = "kerashvd/random_state.npz"
_H5_GROUP = "kerashvd_random_state"


def random_state_variables(model):
    """The variables of ``model`` that are state but not weights (the seed generators')."""
    weights = {id(v) for v in getattr(model, "weights", [])}
    return [v for v in getattr(model, "variables", []) if id(v) not in weights]


def unsaved_learning_rate(model):
    """The optimizer's learning-rate variable where Keras leaves it out of its files (tf_keras),
    else None."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return None
    saved = {id(v) for v in getattr(optimizer, "variables", [])}
    extra = [v for v in optimizer_variables(optimizer) if id(v) not in saved]
    return extra[0] if len(extra) == 1 else None


def add_random_state(model, path):
    """Adds ``model``'s random-generator state (and a learning rate Keras leaves out) to the
    checkpoint file at ``path``."""
    variables = random_state_variables(model)
    values = {str(i): np.asarray(v.numpy()) for i, v in enumerate(variables)}
    learning_rate = unsaved_learning_rate(model)
    if learning_rate is not None:
        values["learning_rate"] = np.asarray(learning_rate.numpy())
    if not values:
        return
    if zipfile.is_zipfile(path):
        buffer = io.BytesIO()
        np.savez(buffer, **values)
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr(_ZIP_MEMBER, buffer.getvalue())
    elif path.endswith(".h5"):
        import h5py

        with h5py.File(path, "a") as weights:
            group = weights.require_group(_H5_GROUP)
            for key, value in values.items():
                group.create_dataset(key, data=value)


def load_random_state(model, path):
    """Assigns the random-generator state (and learning rate) stored in ``path``, if any.
    Returns True if found.

    Raises:
        ValueError: the file holds a different number of states than ``model`` has.
    """
    values = None
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if _ZIP_MEMBER in archive.namelist():
                with np.load(io.BytesIO(archive.read(_ZIP_MEMBER))) as stored:
                    values = {key: stored[key] for key in stored.files}
    elif path.endswith(".h5"):
        import h5py

        with h5py.File(path, "r") as weights:
            if _H5_GROUP in weights:
                values = {key: value[()] for key, value in weights[_H5_GROUP].items()}
    if values is None:
        return False
    learning_rate, variable = values.pop("learning_rate", None), unsaved_learning_rate(model)
    if learning_rate is not None and variable is not None:
        variable.assign(learning_rate)
    values = [values[str(i)] for i in range(len(values))]
    variables = random_state_variables(model)
    if len(values) != len(variables):
        raise ValueError(f"{path} holds {len(values)} random-generator states; the model has "
                         f"{len(variables)} (is it the same model?)")
    for variable, value in zip(variables, values):
        variable.assign(value)
    return True


def unrestorable_random_layers(model):
    """Names of ``model``'s layers whose random state no checkpoint can hold (tf_keras only)."""
    if not USES_TF_KERAS:
        return []
    kinds = tuple(getattr(keras.layers, name) for name in _TF_KERAS_RANDOM_LAYERS
                  if hasattr(keras.layers, name))
    return [layer.name for layer in getattr(model, "submodules", ())
            if isinstance(layer, kinds)]


def warn_unrestorable_random_layers(model):
    """Warns (once per call) when resuming ``model`` cannot be exact: see the module's text."""
    names = unrestorable_random_layers(model)
    if names:
        warnings.warn(
            f"kerashvd: the weights and optimizer state are restored exactly, but under Keras 2 "
            f"(tf_keras) the random layers {', '.join(names)} draw other values after resuming "
            "than an uninterrupted run would: tf_keras keeps their random-generator state "
            "where no checkpoint reaches it. Training goes on correctly; only bit-exact "
            "resumption is lost. Keras 3 restores this state too.", stacklevel=3)
