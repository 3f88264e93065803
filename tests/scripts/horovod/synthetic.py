"""The data and the model both Horovod-style scripts here train (no network on test machines).

``digits_dataset(rank)``: 28x28 noise images, class k with a bright band at rows 2k..2k+4,
different on every rank, repeated, shuffled and batched as Horovod's examples do.
``lazy_model()``: an MNIST-sized ``Sequential`` without ``keras.Input``, so that its weights
are created at its first call, as in Horovod's examples.
"""

import numpy as np
import tensorflow as tf


def digits_dataset(rank, count=512, batch=32):
    rng = np.random.default_rng(rank)
    labels = rng.integers(0, 10, count)
    images = 0.5 * rng.random((count, 28, 28, 1)).astype("float32")
    for image, label in zip(images, labels):
        image[2 * label:2 * label + 5] += 0.5
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    return dataset.repeat().shuffle(count, seed=rank).batch(batch)


def lazy_model():
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, [3, 3], activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation='relu'),
        tf.keras.layers.Dense(10, activation='softmax')
    ])
