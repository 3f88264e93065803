"""Quick start: a small Keras classifier trained data-parallel on synthetic data.

Run on 2 processes:

    kerashvdrun -np 2 python recipes/quickstart.py

Each rank generates the same synthetic data set (so nothing is downloaded), keeps its shard,
and trains with ``kerashvd.DistributedOptimizer``; rank 0 prints progress and the final
validation accuracy, which is exact over the whole validation set.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def make_data(samples, features, classes, seed=0):
    """Gaussian blobs: one centre per class (fixed), samples drawn with `seed`; the same on
    every rank."""
    import numpy as np

    centres = np.random.default_rng(1234).normal(0.0, 1.0, size=(classes, features))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=samples)
    points = centres[labels] + rng.normal(0.0, 1.0, size=(samples, features))
    return points.astype("float32"), labels.astype("int32")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--samples", type=int, default=4096, help="training samples in total")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate for one rank")
    p.add_argument("--tiny", action="store_true", help="a seconds-long run for tests")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.tiny:
        args.epochs, args.samples = 2, 512

    import keras
    import kerashvd as hvd

    hvd.init()
    keras.utils.set_random_seed(1234)
    features, classes = 16, 4
    x, y = make_data(args.samples, features, classes)
    x_val, y_val = make_data(args.samples // 4, features, classes, seed=1)
    x, y = hvd.data.shard_arrays(x, y)
    x_val, y_val = hvd.data.shard_arrays(x_val, y_val)

    model = keras.Sequential([
        keras.Input((features,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(classes, activation="softmax"),
    ])
    # Scale the learning rate with the number of ranks: the global batch is size() times larger.
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9))
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=0),
        # Validation metrics over the whole validation set, reduced from every rank's shard.
        hvd.callbacks.DistributedValidationCallback(),
        hvd.callbacks.MetricAverageCallback(),
    ]
    history = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=(x_val, y_val), callbacks=callbacks,
                        verbose=2 if hvd.rank() == 0 else 0)
    accuracy = history.history["val_accuracy"][-1]
    if hvd.rank() == 0:
        print(f"ranks={hvd.size()} final val_accuracy={accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
