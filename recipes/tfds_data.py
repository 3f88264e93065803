"""Finding a prepared tensorflow-datasets data set, or saying how to get one.

The recipes never download: compute nodes of HPC clusters usually have no network, so the
data set is prepared once on a machine that has one and copied to the cluster's file system.
"""

import os

import kerashvd as hvd


def data_root(data_dir=None):
    """The tfds data directory: ``data_dir``, else ``$TFDS_DATA_DIR``, else tfds' default."""
    return os.path.abspath(os.path.expanduser(
        data_dir or os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"))


def require_prepared(name, data_dir, how_to_prepare):
    """Returns the tfds builder of ``name`` in ``data_dir`` once every rank has its files.

    Every rank looks for the prepared data set (``dataset_info.json`` and its record files)
    and the ranks compare their answers, so that when any rank lacks it (e.g. a node whose
    local disk was not filled) every rank raises the same error instead of some ranks
    training and waiting forever for the others.

    Args:
        name: the tfds name, e.g. ``"mnist"``.
        data_dir: the data directory (see :func:`data_root`).
        how_to_prepare: the command(s) that prepare it on a machine with network access.

    Returns:
        The ``tfds.core.DatasetBuilder``.

    Raises:
        FileNotFoundError: on every rank, when some rank does not have the data set.
    """
    import absl.logging
    import tensorflow_datasets as tfds

    # tfds logs a warning for a missing version folder; the error below says more.
    verbosity = absl.logging.get_verbosity()
    absl.logging.set_verbosity(absl.logging.ERROR)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        ready = bool(builder.is_prepared())
    finally:
        absl.logging.set_verbosity(verbosity)
    answers = hvd.allgather_object(ready, name=f"recipes.tfds_data.{name}")
    missing = [r for r, ok in enumerate(answers) if not ok]
    if missing:
        raise FileNotFoundError(
            f"tfds data set {name!r} is not prepared in {data_dir} on rank(s) {missing} of "
            f"{len(answers)} (expected {builder.data_dir}/dataset_info.json and its record "
            "files). The recipes never download. On a machine with network access run\n"
            f"    {how_to_prepare}\n"
            f"then copy {os.path.join(data_dir, name)} to {data_dir} on the cluster's shared "
            "file system (or pass --data-dir / set TFDS_DATA_DIR to where it is).")
    return builder
