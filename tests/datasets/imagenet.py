"""Small ImageNet data sets with real JPEGs: the standard TFRecord layout and tfds' imagenet2012.

``write_imagenet_tfrecords(directory)`` writes ``train-0000i-of-0000N`` and
``validation-0000i-of-0000M`` files as TensorFlow's ``build_imagenet_data.py`` does: each
record a ``tf.train.Example`` with ``image/encoded`` (a JPEG), ``image/class/label`` (1..1000),
``image/class/synset``, ``image/height``, ``image/width``, ``image/channels``,
``image/colorspace``, ``image/format`` and ``image/filename``.

``write_imagenet_tfds(data_dir)`` writes tfds' ``imagenet2012`` by running tfds' own builder
on small ILSVRC2012-style tars (``ILSVRC2012_img_train.tar`` of per-synset tars, and
``ILSVRC2012_img_val.tar`` whose labels tfds takes from its own list), with several record
files per split so file-level sharding can be tested.

Each image shows its class: a background colour and stripe direction that depend on the
class, at a random size, with noise.

Run as a script: ``python tests/datasets/imagenet.py tfrecord|tfds DIR``.
"""

import io
import os
import sys
import tarfile
import tempfile

import numpy as np

NUM_CLASSES = 1000


def class_image(label, rng, low=40, high=96):
    """A uint8 RGB image (H, W, 3) of class ``label`` (0..999) at a random size."""
    height, width = rng.integers(low, high + 1, size=2)
    colour = np.random.default_rng(label).integers(30, 226, size=3)
    rows, cols = np.mgrid[0:height, 0:width]
    stripes = ((rows if label % 2 else cols) // (4 + label % 5)) % 2
    image = colour + 30 * stripes[..., None] + rng.normal(0, 12, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def encode_jpeg(image):
    import tensorflow as tf

    return tf.io.encode_jpeg(image, quality=90).numpy()


def _example(jpeg, label, synset, filename, height, width):
    import tensorflow as tf

    def b(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def i(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))

    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": b(jpeg), "image/format": b(b"JPEG"), "image/filename": b(filename.encode()),
        "image/class/label": i(label + 1), "image/class/synset": b(synset.encode()),
        "image/height": i(height), "image/width": i(width), "image/channels": i(3),
        "image/colorspace": b(b"RGB"),
    })).SerializeToString()


def synsets():
    """The 1000 ImageNet synsets in label order (tfds' list)."""
    import tensorflow_datasets as tfds

    with open(tfds.core.tfds_path("datasets/imagenet2012/labels.txt")) as f:
        return f.read().split()


def write_imagenet_tfrecords(directory, train_files=8, validation_files=4, per_file=6,
                             classes=10, seed=0):
    """Writes a small ImageNet in the standard TFRecord layout into ``directory``.

    Args:
        directory: where ``train-*-of-*`` and ``validation-*-of-*`` go (created if needed).
        train_files, validation_files: how many files each split has.
        per_file: records per file.
        classes: labels are drawn from the first ``classes`` of the 1000.
        seed: the generator's seed.

    Returns:
        ``directory``.
    """
    import tensorflow as tf

    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = synsets()
    for split, count in (("train", train_files), ("validation", validation_files)):
        for index in range(count):
            path = os.path.join(directory, f"{split}-{index:05d}-of-{count:05d}")
            with tf.io.TFRecordWriter(path) as writer:
                for k in range(per_file):
                    label = int(rng.integers(0, classes))
                    image = class_image(label, rng)
                    writer.write(_example(encode_jpeg(image), label, names[label],
                                          f"{split}_{index}_{k}.JPEG", *image.shape[:2]))
    return directory


def _add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_ilsvrc_tars(directory, train_per_class=4, validation_images=16, classes=8, seed=0):
    """Writes ``ILSVRC2012_img_train.tar`` and ``ILSVRC2012_img_val.tar`` as ImageNet ships them.

    Validation labels come from tfds' list (by sorted file name), so the validation images
    are drawn for those labels; training uses the synsets of the first validation labels.
    """
    import tensorflow_datasets as tfds

    rng = np.random.default_rng(seed)
    names = synsets()
    with open(tfds.core.tfds_path("datasets/imagenet2012/validation_labels.txt")) as f:
        validation_synsets = f.read().split()[:validation_images]
    train_synsets = list(dict.fromkeys(validation_synsets))[:classes]
    with tarfile.open(os.path.join(directory, "ILSVRC2012_img_train.tar"), "w") as train:
        for synset in train_synsets:
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as per_class:
                for k in range(train_per_class):
                    image = class_image(names.index(synset), rng)
                    _add_bytes(per_class, f"{synset}_{k}.JPEG", encode_jpeg(image))
            _add_bytes(train, f"{synset}.tar", inner.getvalue())
    with tarfile.open(os.path.join(directory, "ILSVRC2012_img_val.tar"), "w") as val:
        for k, synset in enumerate(validation_synsets):
            image = class_image(names.index(synset), rng)
            _add_bytes(val, f"ILSVRC2012_val_{k + 1:08d}.JPEG", encode_jpeg(image))


def write_imagenet_tfds(data_dir, num_shards=4, **tar_options):
    """Writes tfds' ``imagenet2012`` into ``data_dir`` with tfds' own builder.

    Args:
        data_dir: the tfds data directory.
        num_shards: record files per split.
        **tar_options: passed to :func:`write_ilsvrc_tars`.

    Returns:
        ``data_dir``.
    """
    import tensorflow_datasets as tfds

    with tempfile.TemporaryDirectory() as manual:
        write_ilsvrc_tars(manual, **tar_options)
        tfds.disable_progress_bar()
        builder = tfds.builder("imagenet2012", data_dir=data_dir)
        builder.download_and_prepare(
            download_dir=os.path.join(manual, "downloads"),
            download_config=tfds.download.DownloadConfig(
                manual_dir=manual, num_shards=num_shards, try_download_gcs=False))
    return data_dir


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("tfrecord", "tfds"):
        sys.exit(f"usage: {sys.argv[0]} tfrecord|tfds DIR")
    (write_imagenet_tfrecords if sys.argv[1] == "tfrecord" else write_imagenet_tfds)(sys.argv[2])
