"""The ImageNet input pipeline of recipes/imagenet.py: files, sharding, augmentation.

Two sources, the same pipeline after the records are read:

- ``tfrecord``: the standard ImageNet TFRecord layout (as written by TensorFlow's
  ``build_imagenet_data.py``): ``train-00000-of-01024`` ... and ``validation-00000-of-00128`` ...
  in one directory, each record a ``tf.train.Example`` with ``image/encoded`` (JPEG bytes) and
  ``image/class/label`` (1..1000), shifted here to 0..999.
- ``tfds``: tensorflow-datasets' ``imagenet2012`` (labels already 0..999), read without
  decoding so the same JPEG augmentation applies.

Sharding is by file: rank ``r`` of ``n`` reads files ``r, r + n, ...`` (sorted by name), so no
two ranks read the same record, and there must be at least ``n`` files. Training repeats its
files (ranks' shards differ in size, so ``fit`` gets a fixed ``steps_per_epoch``); validation
reads each rank's files once, and ``DistributedValidationCallback`` makes the metrics exact.

Training images get a random resized crop (8%-100% of the area, aspect ratio 3/4-4/3,
decoded with ``decode_and_crop_jpeg``) and a random horizontal flip; validation images a
center crop of 87.5% of the shorter side. Both are resized to ``image_size`` and normalized
with the ImageNet mean and standard deviation. Labels are one-hot (for label smoothing).
"""

import os

import numpy as np
import tensorflow as tf

import kerashvd as hvd

NUM_CLASSES = 1000
TRAIN_IMAGES, VALIDATION_IMAGES = 1281167, 50000
SPLIT_PREFIX = {"train": "train", "validation": "validation"}
_MEAN = tf.constant([0.485, 0.456, 0.406]) * 255.0
_STD = tf.constant([0.229, 0.224, 0.225]) * 255.0
_EVAL_CROP_FRACTION = 0.875
_FEATURES = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
             "image/class/label": tf.io.FixedLenFeature([], tf.int64)}


def _normalize(image, image_size):
    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    return (image - _MEAN) / _STD


def train_image(jpeg, image_size):
    """Random resized crop and flip of a JPEG-encoded image, normalized, float32."""
    shape = tf.image.extract_jpeg_shape(jpeg)
    whole = tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4])
    begin, crop, _ = tf.image.sample_distorted_bounding_box(
        shape, bounding_boxes=whole, min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3),
        area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
    window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
    image = tf.image.decode_and_crop_jpeg(jpeg, window, channels=3)
    image = tf.image.random_flip_left_right(image)
    return _normalize(tf.cast(image, tf.float32), image_size)


def eval_image(jpeg, image_size):
    """Center crop (87.5% of the shorter side) of a JPEG-encoded image, normalized, float32."""
    shape = tf.image.extract_jpeg_shape(jpeg)
    height, width = shape[0], shape[1]
    side = tf.cast(tf.cast(tf.minimum(height, width), tf.float32) * _EVAL_CROP_FRACTION, tf.int32)
    window = tf.stack([(height - side + 1) // 2, (width - side + 1) // 2, side, side])
    image = tf.image.decode_and_crop_jpeg(jpeg, window, channels=3)
    return _normalize(tf.cast(image, tf.float32), image_size)


def parse_example(serialized):
    """A standard-layout record -> (JPEG bytes, label in 0..999)."""
    features = tf.io.parse_single_example(serialized, _FEATURES)
    return features["image/encoded"], tf.cast(features["image/class/label"], tf.int32) - 1


def split_files(data_dir, split):
    """The sorted files of ``split`` (``train`` or ``validation``) in the standard layout."""
    return sorted(tf.io.gfile.glob(os.path.join(data_dir, f"{SPLIT_PREFIX[split]}-*-of-*")))


def check_tfrecord_layout(data_dir):
    """Checks on every rank that ``data_dir`` has enough files and readable records.

    Rank 0 looks at the file lists and the first training record (its features and label),
    and broadcasts what is wrong, so every rank raises the same error.

    Raises:
        FileNotFoundError: no ``train-*-of-*`` or ``validation-*-of-*`` files.
        ValueError: fewer files than ranks, or a first record without the standard features
            or with a label outside 1..1000.
    """
    problem = None
    if hvd.rank() == 0:
        problem = _layout_problem(data_dir)
    problem = hvd.broadcast_object(problem, root_rank=0, name="recipes.imagenet_data.layout")
    if problem:
        error, message = problem
        raise {"missing": FileNotFoundError, "bad": ValueError}[error](message)


def _layout_problem(data_dir):
    world = hvd.size()
    for split in ("train", "validation"):
        files = split_files(data_dir, split)
        if not files:
            return ("missing", f"no ImageNet {split} files ({SPLIT_PREFIX[split]}-*-of-*) in "
                    f"{data_dir}. Convert the ILSVRC2012 tars with TensorFlow's "
                    "build_imagenet_data.py (models/research/slim or the TPU reference) into "
                    "train-00000-of-01024 ... and validation-00000-of-00128 ..., or use "
                    "--data-format tfds, or --synthetic for a benchmark without data.")
        if len(files) < world:
            return ("bad", f"{len(files)} {split} file(s) in {data_dir} but {world} ranks: "
                    "each rank reads whole files, so there must be at least one per rank. "
                    f"Run on at most {len(files)} ranks, or re-shard the data into more files.")
    first = split_files(data_dir, "train")[0]
    try:
        record = next(iter(tf.data.TFRecordDataset(first).take(1)))
        _, label = parse_example(record)
    except (StopIteration, tf.errors.OpError) as error:
        return ("bad", f"cannot read a standard ImageNet record (image/encoded, "
                f"image/class/label) from {first}: {str(error).splitlines()[0]}")
    if not 0 <= int(label) < NUM_CLASSES:
        return ("bad", f"{first}: image/class/label is {int(label) + 1}; expected 1..1000 "
                "(the standard layout; a 1001-class layout with 0 = background needs its "
                "labels mapped first)")
    return None


def _tfrecord_files(data_dir, split):
    """This rank's files: list_files in sorted order, sharded by rank."""
    files = tf.data.Dataset.list_files(
        os.path.join(data_dir, f"{SPLIT_PREFIX[split]}-*-of-*"), shuffle=False)
    return files.shard(hvd.size(), hvd.rank())


def _finish(records, training, image_size, batch_size, seed):
    """(JPEG, label) records -> batches of (image, one-hot label)."""
    preprocess = train_image if training else eval_image

    def to_example(jpeg, label):
        return preprocess(jpeg, image_size), tf.one_hot(label, NUM_CLASSES)

    if training:
        records = records.shuffle(10000, seed=seed, reshuffle_each_iteration=True)
    records = records.map(to_example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=not training)
    return records.batch(batch_size, drop_remainder=training).prefetch(tf.data.AUTOTUNE)


def tfrecord_dataset(data_dir, split, image_size, batch_size, seed=0):
    """This rank's batches of ``split`` from the standard TFRecord layout.

    Args:
        data_dir: the directory of ``train-*-of-*`` and ``validation-*-of-*`` files.
        split: ``"train"`` (augmented, shuffled, repeated forever) or ``"validation"``
            (center crop, one pass, in order).
        image_size: the side of the square images produced.
        batch_size: images per batch on this rank.
        seed: the shuffle seed (training).

    Returns:
        ``(dataset, file_names)``: the batched dataset, and the base names of this rank's files.
    """
    training = split == "train"
    files = _tfrecord_files(data_dir, split)
    names = [os.path.basename(f.decode()) for f in files.as_numpy_iterator()]
    if training:
        files = files.shuffle(len(names), seed=seed, reshuffle_each_iteration=True).repeat()
    records = files.interleave(
        lambda f: tf.data.TFRecordDataset(f, buffer_size=8 << 20), cycle_length=min(len(names), 16),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=not training)
    records = records.map(parse_example, num_parallel_calls=tf.data.AUTOTUNE)
    return _finish(records, training, image_size, batch_size, seed), names


def tfds_dataset(builder, split, image_size, batch_size, seed=0):
    """This rank's batches of ``split`` from tfds' ``imagenet2012`` (file-level sharding).

    Args:
        builder: the prepared ``imagenet2012`` builder (``tfds.builder(...)``).
        split: ``"train"`` or ``"validation"``, as for :func:`tfrecord_dataset`.
        image_size, batch_size, seed: as for :func:`tfrecord_dataset`.

    Returns:
        ``(dataset, file_names)``; ``file_names`` are this rank's record files.

    Raises:
        ValueError: when the split has fewer files than there are ranks.
    """
    import tensorflow_datasets as tfds

    training = split == "train"
    info = builder.info.splits[split]
    shards = info.num_shards
    if shards < hvd.size():
        raise ValueError(f"tfds imagenet2012 {split} has {shards} file(s) but there are "
                         f"{hvd.size()} ranks: each rank reads whole files. Run on at most "
                         f"{shards} ranks.")
    context = tf.distribute.InputContext(num_input_pipelines=hvd.size(),
                                         input_pipeline_id=hvd.rank())
    config = tfds.ReadConfig(input_context=context, shuffle_seed=seed,
                             interleave_cycle_length=min(16, shards))
    records = builder.as_dataset(split=split, shuffle_files=training, read_config=config,
                                 decoders={"image": tfds.decode.SkipDecoding()})
    records = records.map(lambda ex: (ex["image"], tf.cast(ex["label"], tf.int32)),
                          num_parallel_calls=tf.data.AUTOTUNE)
    if training:
        records = records.repeat()
    names = [os.path.basename(f) for f in info.filenames][hvd.rank()::hvd.size()]
    return _finish(records, training, image_size, batch_size, seed), names


def synthetic_dataset(image_size, batch_size, seed=0):
    """One batch of random images and labels in memory, repeated forever (a benchmark)."""
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(batch_size, image_size, image_size, 3)).astype(np.float32)
    labels = np.eye(NUM_CLASSES, dtype=np.float32)[rng.integers(0, NUM_CLASSES, batch_size)]
    return tf.data.Dataset.from_tensors((images, labels)).repeat()
