"""A Horovod TensorFlow 2 custom training loop, as Horovod users write it, import changed.

It follows the structure of Horovod's TF2 examples: ``hvd.init()``, the GPU pinning snippet,
a ``Sequential`` model without ``keras.Input`` (its weights and the optimizer's are created
inside the first traced step), ``hvd.DistributedGradientTape``, and the broadcast of the
model's and the optimizer's variables at the end of the first step, inside the
``tf.function``. The data and the model come from ``synthetic.py`` (no network here).

What differs with Keras 3: an optimizer's ``variables`` is a list (Horovod's examples call
``opt.variables()``, which tf_keras allows). With ``TF_USE_LEGACY_KERAS=1`` (tf_keras) the
loop is exactly Horovod's.

Usage: ``kerashvdrun -np 2 python custom_loop.py``. Prints one JSON line per rank.
"""

import json
import os

import numpy as np
import tensorflow as tf

from synthetic import digits_dataset, lazy_model

import kerashvd as hvd  # was: import horovod.tensorflow as hvd

LEGACY_KERAS = os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True")

hvd.init()

# The usual one-GPU-per-rank lines (kerashvd also pins by itself; they must still work).
gpus = tf.config.experimental.list_physical_devices('GPU')
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

dataset = digits_dataset(hvd.rank())
mnist_model = lazy_model()
loss = tf.losses.SparseCategoricalCrossentropy()

# Learning rate times the number of ranks (the global batch grows with it).
opt = tf.optimizers.Adam(0.002 * hvd.size())


@tf.function
def training_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        probs = mnist_model(images, training=True)
        loss_value = loss(labels, probs)

    tape = hvd.DistributedGradientTape(tape)

    grads = tape.gradient(loss_value, mnist_model.trainable_variables)
    opt.apply_gradients(zip(grads, mnist_model.trainable_variables))

    # After the first step, when the lazily built model and the optimizer have their
    # variables, every rank takes rank 0's.
    if first_batch:
        hvd.broadcast_variables(mnist_model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables() if LEGACY_KERAS else opt.variables,
                                root_rank=0)

    return loss_value


# The same number of samples in all, whatever the number of ranks.
losses = []
for batch, (images, labels) in enumerate(dataset.take(160 // hvd.size())):
    loss_value = training_step(images, labels, batch == 0)
    losses.append(float(loss_value))
    if batch % 20 == 0 and hvd.local_rank() == 0:
        print('Step #%d\tLoss: %.6f' % (batch, loss_value))

weights = float(sum(np.abs(w).sum() for w in mnist_model.get_weights()))
# A short line: hydra forwards output in pieces of about 1 KiB, and longer lines printed by
# several ranks at once can interleave.
print(json.dumps({"rank": hvd.rank(), "losses": losses[:1] + losses[-5:], "weights": weights}),
      flush=True)
