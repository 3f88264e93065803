"""Horovod's elastic Keras MNIST example (``examples/elastic/tensorflow2/
tensorflow2_keras_mnist_elastic.py``), as Horovod users write it, with only the import changed.

It follows that example step by step: ``hvd.init()``, the GPU pinning snippet, MNIST from
``tf.keras.datasets`` (one file per rank), a ``Sequential`` convnet without ``keras.Input``,
Adam at ``0.001 * hvd.size()`` wrapped in ``hvd.DistributedOptimizer``, ``compile(...,
experimental_run_tf_function=False)``, one ``fit`` step to create the optimizer's state, a
``hvd.elastic.KerasState`` with a reset callback that rescales the learning rate with
``tf.keras.backend.set_value(state.model.optimizer.lr, ...)`` and runs one more ``fit`` step,
the three elastic callbacks, ``ModelCheckpoint('./checkpoint-{epoch}.h5')`` on rank 0, and
``@hvd.elastic.run`` around ``fit(epochs=24 - state.epoch)``.

It is a Keras 2 script (``experimental_run_tf_function``, ``optimizer.lr``, ``.h5`` files), so
it runs with ``TF_USE_LEGACY_KERAS=1`` (tf_keras), exactly as Horovod's. The sizes Horovod
writes as constants (500 batches per epoch over the world, 24 epochs, batches of 128) are
options here, with those defaults, so that a test can run it in seconds; the data set comes
from ``offline_mnist.py`` there (no network on test machines).

Usage: ``kerashvdrun --min-np 1 --max-np 2 --host-discovery-script hosts.sh python
keras_mnist_elastic.py [--batches-per-epoch 500] [--epochs 24] [--batch-size 128]``.
"""

import argparse

import tensorflow as tf
from packaging import version

import kerashvd as hvd  # was: import horovod.tensorflow.keras as hvd

parser = argparse.ArgumentParser(description='Tensorflow 2.0 Keras MNIST Example')

parser.add_argument('--use-mixed-precision', action='store_true', default=False,
                    help='use mixed precision for training')
parser.add_argument('--batches-per-epoch', type=int, default=500,
                    help='batches of an epoch, over all ranks')
parser.add_argument('--epochs', type=int, default=24)
parser.add_argument('--batch-size', type=int, default=128)

args = parser.parse_args()

if args.use_mixed_precision:
    if version.parse(tf.__version__) >= version.parse('2.4.0'):
        from tensorflow.keras import mixed_precision
        mixed_precision.set_global_policy('mixed_float16')

# Start the ranks' communication.
hvd.init()

# One GPU per rank (kerashvd pins by itself too; the lines must still work).
gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

(mnist_images, mnist_labels), _ = \
    tf.keras.datasets.mnist.load_data(path='mnist-%d.npz' % hvd.rank())

dataset = tf.data.Dataset.from_tensor_slices(
    (tf.cast(mnist_images[..., tf.newaxis] / 255.0, tf.float32),
     tf.cast(mnist_labels, tf.int64))
)
dataset = dataset.repeat().shuffle(10000).batch(args.batch_size)

model = tf.keras.Sequential([
    tf.keras.layers.Conv2D(32, [3, 3], activation='relu'),
    tf.keras.layers.Conv2D(64, [3, 3], activation='relu'),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Dropout(0.25),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation='relu'),
    tf.keras.layers.Dropout(0.5),
    tf.keras.layers.Dense(10, activation='softmax')
])

# The learning rate grows with the number of ranks (so does the global batch).
scaled_lr = 0.001 * hvd.size()
opt = tf.optimizers.Adam(scaled_lr)

# Average the gradients over the ranks.
opt = hvd.DistributedOptimizer(
    opt, backward_passes_per_step=1, average_aggregated_gradients=True)

# Keras 2 needs experimental_run_tf_function=False for the wrapped optimizer to be used.
model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
              optimizer=opt,
              metrics=['accuracy'],
              experimental_run_tf_function=False)

# One step creates the model's weights and the optimizer's state, which the state below
# keeps and every world synchronizes.
model.fit(dataset, steps_per_epoch=1, epochs=1, callbacks=None)

state = hvd.elastic.KerasState(model, batch=0, epoch=0)


def on_state_reset():
    tf.keras.backend.set_value(state.model.optimizer.lr, 0.001 * hvd.size())
    # One step with the new world (new ranks meet the others' collectives here).
    state.model.fit(dataset, steps_per_epoch=1, epochs=1, callbacks=None)


state.register_reset_callbacks([on_state_reset])

callbacks = [
    hvd.elastic.UpdateEpochStateCallback(state),
    hvd.elastic.UpdateBatchStateCallback(state),
    hvd.elastic.CommitStateCallback(state),
]

# Rank 0 alone writes checkpoints.
if hvd.rank() == 0:
    callbacks.append(tf.keras.callbacks.ModelCheckpoint('./checkpoint-{epoch}.h5'))


# Train; the steps of an epoch are shared among the ranks.
@hvd.elastic.run
def train(state):
    state.model.fit(dataset, steps_per_epoch=args.batches_per_epoch // hvd.size(),
                    epochs=args.epochs - state.epoch, callbacks=callbacks,
                    verbose=1)


train(state)
