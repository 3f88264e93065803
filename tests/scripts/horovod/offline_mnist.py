"""Runs a script with ``tf.keras.datasets.mnist.load_data`` answering from memory.

Horovod's MNIST examples call ``load_data``, which downloads the data set (test machines have
no network) and checks its hash, so a stand-in file would be fetched again. This runner puts
a small data set in its place, 28x28 ``uint8`` digits drawn as in ``synthetic.py`` (class k
has a bright band at rows 2k..2k+4), then runs the script as ``__main__``.

Usage: ``python offline_mnist.py SCRIPT [ARGS...]`` (under a launcher, like the script).
"""

import os
import runpy
import sys

import numpy as np
import tensorflow as tf


def load_data(path="mnist.npz", count=512):
    rng = np.random.default_rng(len(path))
    labels = rng.integers(0, 10, count).astype("uint8")
    images = (127 * rng.random((count, 28, 28))).astype("uint8")
    for image, label in zip(images, labels):
        image[2 * label:2 * label + 5] += 128
    return (images, labels), (images[:64], labels[:64])


tf.keras.datasets.mnist.load_data = load_data
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
