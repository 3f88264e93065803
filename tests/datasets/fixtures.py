"""Session fixtures with small real data sets, written once per pytest session.

Registered in tests/conftest.py (``pytest_plugins``). Each fixture returns a directory that
stays for the whole session; tests must not write into it.
"""

import pytest


@pytest.fixture(scope="session")
def mnist_data_dir(tmp_path_factory):
    """A tfds data directory holding ``mnist`` 3.0.1 with 1024 train and 256 test digits."""
    from .mnist_tfds import write_mnist

    return str(write_mnist(tmp_path_factory.mktemp("tfds_mnist")))


@pytest.fixture(scope="session")
def imagenet_tfrecord_dir(tmp_path_factory):
    """The standard ImageNet TFRecord layout: 8 train and 4 validation files of 6 JPEGs each."""
    from .imagenet import write_imagenet_tfrecords

    return str(write_imagenet_tfrecords(tmp_path_factory.mktemp("imagenet_tfrecord")))


@pytest.fixture(scope="session")
def imagenet_tfds_dir(tmp_path_factory):
    """A tfds data directory holding ``imagenet2012`` (32 train, 16 validation JPEGs, 4 files each)."""
    from .imagenet import write_imagenet_tfds

    return str(write_imagenet_tfds(tmp_path_factory.mktemp("tfds_imagenet")))
