"""The model's random-generator state in its checkpoint file.

Keras 3 layers that draw random numbers while training (``Dropout``, ``GaussianNoise``, random
augmentation ...) keep a ``SeedGenerator`` whose state is a variable: it is in
``model.variables`` but not in ``model.weights``, and Keras' ``save``/``save_weights`` leave
it out. A run resumed from such a file would draw other dropout masks than the run that was
never interrupted. :class:`ModelCheckpoint` therefore adds these states to the file it writes,
as one extra member of the archive that Keras ignores when loading: ``kerashvd/random_state.npz``
in a ``.keras`` zip archive, or the HDF5 group ``kerashvd_random_state`` in a ``.weights.h5``
file. :func:`restore` puts them back. Files without them load as before.
"""

import io
import zipfile

import numpy as np

_ZIP_MEMBER = "kerashvd/random_state.npz"
_H5_GROUP = "kerashvd_random_state"


def random_state_variables(model):
    """The variables of ``model`` that are state but not weights (the seed generators')."""
    weights = {id(v) for v in getattr(model, "weights", [])}
    return [v for v in getattr(model, "variables", []) if id(v) not in weights]


def add_random_state(model, path):
    """Adds ``model``'s random-generator state to the checkpoint file at ``path``."""
    variables = random_state_variables(model)
    if not variables:
        return
    values = {str(i): np.asarray(v.numpy()) for i, v in enumerate(variables)}
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
    """Assigns the random-generator state stored in ``path``, if any. Returns True if found.

    Raises:
        ValueError: the file holds a different number of states than ``model`` has.
    """
    values = None
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if _ZIP_MEMBER in archive.namelist():
                with np.load(io.BytesIO(archive.read(_ZIP_MEMBER))) as stored:
                    values = [stored[str(i)] for i in range(len(stored.files))]
    elif path.endswith(".h5"):
        import h5py

        with h5py.File(path, "r") as weights:
            if _H5_GROUP in weights:
                group = weights[_H5_GROUP]
                values = [group[str(i)][()] for i in range(len(group))]
    if values is None:
        return False
    variables = random_state_variables(model)
    if len(values) != len(variables):
        raise ValueError(f"{path} holds {len(values)} random-generator states; the model has "
                         f"{len(variables)} (is it the same model?)")
    for variable, value in zip(variables, values):
        variable.assign(value)
    return True
