"""A small tfds ``mnist`` data directory, written by tfds' own MNIST builder.

``write_mnist(data_dir)`` leaves ``data_dir/mnist/3.0.1/`` with ``dataset_info.json``,
``features.json`` and the TFRecord shards, exactly what ``tfds.load('mnist',
data_dir=data_dir)`` reads without downloading. The builder is tfds' ``MNIST`` class with one
change: its source files are small IDX files written here instead of the downloaded ones, so
the examples are encoded, split and described by tfds itself.

The digits are generated: each class has a fixed 28x28 pattern (a few strokes), drawn with a
random shift of up to 3 pixels, random brightness and noise, so a small convnet reaches high
accuracy in a couple of epochs while chance is 10%.

Run as a script to write one: ``python tests/datasets/mnist_tfds.py DATA_DIR [TRAIN TEST]``.
"""

import os
import struct
import sys
import tempfile

import numpy as np

NAME, VERSION = "mnist", "3.0.1"
SIZE, CLASSES = 28, 10


def class_patterns(seed=1234):
    """One 28x28 float pattern in [0, 1] per class: three random horizontal/vertical bars."""
    rng = np.random.default_rng(seed)
    patterns = np.zeros((CLASSES, SIZE, SIZE), np.float32)
    for pattern in patterns:
        for _ in range(3):
            start, length = rng.integers(4, 14), rng.integers(8, 14)
            at = rng.integers(4, SIZE - 4)
            if rng.random() < 0.5:
                pattern[at - 1:at + 2, start:start + length] = 1.0
            else:
                pattern[start:start + length, at - 1:at + 2] = 1.0
    return patterns


def generate_digits(count, seed):
    """``count`` uint8 images (count, 28, 28) and uint8 labels, balanced over the classes."""
    rng = np.random.default_rng(seed)
    patterns = class_patterns()
    labels = (np.arange(count) % CLASSES).astype(np.uint8)
    rng.shuffle(labels)
    images = np.empty((count, SIZE, SIZE), np.float32)
    for i, label in enumerate(labels):
        dy, dx = rng.integers(-3, 4, size=2)
        images[i] = np.roll(patterns[label], (dy, dx), axis=(0, 1)) * rng.uniform(0.6, 1.0)
    images += rng.normal(0.0, 0.3, images.shape)
    return (np.clip(images, 0.0, 1.0) * 255).astype(np.uint8), labels


def write_idx(directory, prefix, images, labels):
    """Writes MNIST's IDX files (``<prefix>-images-idx3-ubyte``, ``<prefix>-labels-idx1-ubyte``)."""
    image_path = os.path.join(directory, f"{prefix}-images-idx3-ubyte")
    label_path = os.path.join(directory, f"{prefix}-labels-idx1-ubyte")
    with open(image_path, "wb") as f:
        f.write(struct.pack(">IIII", 2051, len(images), SIZE, SIZE))
        f.write(images.tobytes())
    with open(label_path, "wb") as f:
        f.write(struct.pack(">II", 2049, len(labels)))
        f.write(labels.tobytes())
    return image_path, label_path


def write_mnist(data_dir, train_examples=1024, test_examples=256, seed=0):
    """Writes a tfds ``mnist`` data set with generated digits into ``data_dir``.

    Args:
        data_dir: the tfds data directory (created if needed).
        train_examples, test_examples: the sizes of the ``train`` and ``test`` splits.
        seed: the generator's seed (the test split uses ``seed + 1``).

    Returns:
        ``data_dir``; ``tfds.load('mnist', data_dir=data_dir)`` reads it.
    """
    import tensorflow_datasets as tfds
    from tensorflow_datasets.image_classification import mnist

    sizes = {"train": train_examples, "test": test_examples}
    with tempfile.TemporaryDirectory() as source:
        files = {split: write_idx(source, split, *generate_digits(n, seed + i))
                 for i, (split, n) in enumerate(sizes.items())}

        class GeneratedMNIST(mnist.MNIST, skip_registration=True):
            """tfds' MNIST builder reading the IDX files written above."""

            name = NAME

            def _split_generators(self, dl_manager):
                return [tfds.core.SplitGenerator(name=split, gen_kwargs=dict(
                    num_examples=sizes[split], data_path=files[split][0],
                    label_path=files[split][1])) for split in sizes]

        builder = GeneratedMNIST(data_dir=data_dir)
        assert str(builder.version) == VERSION, builder.version
        tfds.disable_progress_bar()
        builder.download_and_prepare(
            download_dir=os.path.join(source, "downloads"),
            download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return data_dir


if __name__ == "__main__":
    if len(sys.argv) not in (2, 4):
        sys.exit(f"usage: {sys.argv[0]} DATA_DIR [TRAIN_EXAMPLES TEST_EXAMPLES]")
    write_mnist(sys.argv[1], *map(int, sys.argv[2:]))
    print(os.path.join(sys.argv[1], NAME, VERSION))
