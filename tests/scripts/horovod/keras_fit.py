"""A Horovod Keras training script, as Horovod users write them, with only the import changed.

It follows the structure of Horovod's Keras examples: ``hvd.init()``, the GPU pinning snippet,
a ``Sequential`` model without ``keras.Input`` (built lazily, in fit's first step), the
learning rate scaled by ``hvd.size()``, ``hvd.DistributedOptimizer``, the broadcast, metric
average and warmup callbacks, and checkpoints on rank 0 only. The data and the model
come from ``synthetic.py`` (no network here).

What differs with Keras 3, where Horovod's examples were written for Keras 2 (``tf.keras``
before TensorFlow 2.16): ``compile()`` has no ``experimental_run_tf_function`` argument, and
a whole-model checkpoint ends in ``.keras``. With ``TF_USE_LEGACY_KERAS=1`` (tf_keras) the
script runs exactly as Horovod's.

Usage: ``kerashvdrun -np 2 python keras_fit.py OUTPUT_DIR``. Prints one JSON line per rank.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

from synthetic import digits_dataset, lazy_model

import kerashvd as hvd  # was: import horovod.tensorflow.keras as hvd

LEGACY_KERAS = os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True")
output_dir = sys.argv[1]

hvd.init()

# The usual one-GPU-per-rank lines (kerashvd also pins by itself; they must still work).
gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

dataset = digits_dataset(hvd.rank())
mnist_model = lazy_model()

# Learning rate times the number of ranks (the global batch grows with it).
scaled_lr = 0.002 * hvd.size()
opt = tf.optimizers.Adam(scaled_lr)

opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=1, average_aggregated_gradients=True)

compile_extras = {"experimental_run_tf_function": False} if LEGACY_KERAS else {}
mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
                    optimizer=opt,
                    metrics=['accuracy'],
                    **compile_extras)

callbacks = [
    # Every rank starts from rank 0's weights.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    # From the single-rank rate up to the scaled one over the first epochs.
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2, verbose=1),
]

# One writer of checkpoints: rank 0.
if hvd.rank() == 0:
    extension = ".h5" if LEGACY_KERAS else ".keras"
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(
        os.path.join(output_dir, "checkpoint-{epoch}" + extension)))

verbose = 2 if hvd.rank() == 0 else 0

history = mnist_model.fit(dataset, steps_per_epoch=32 // hvd.size(), callbacks=callbacks,
                          epochs=4, verbose=verbose)

weights = float(sum(np.abs(w).sum() for w in mnist_model.get_weights()))
print(json.dumps({"rank": hvd.rank(), "losses": history.history["loss"],
                  "lr": float(tf.keras.backend.get_value(mnist_model.optimizer.learning_rate)),
                  "weights": weights}), flush=True)
