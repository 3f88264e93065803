"""MNIST: a small convnet trained data-parallel on tensorflow-datasets' MNIST.

Run on 2 processes of this machine, or under SLURM:

    kerashvdrun -np 2 python recipes/mnist.py --data-dir ~/tensorflow_datasets
    mpiexec -n 2 python recipes/mnist.py
    srun --mpi=pmi2 -n 2 python recipes/mnist.py --checkpoint-dir ckpt --log-csv mnist.csv

Data: tfds' ``mnist`` (3.0.1) in ``--data-dir`` (default ``$TFDS_DATA_DIR`` or
``~/tensorflow_datasets``). Nothing is downloaded; on a machine with network access run
``python -c "import tensorflow_datasets as tfds; tfds.load('mnist', data_dir='DIR')"`` and
copy ``DIR/mnist`` to the cluster.

What each rank does: it reads its own part of the training split (``tfds.even_splits``, equal
sizes, so every rank runs the same number of steps), shuffles it every epoch in an order
that depends only on ``--seed``, the rank and the epoch, and trains with
``kerashvd.DistributedOptimizer``; the learning rate is scaled by the number of ranks and
warmed up over the first epochs. Validation runs on every rank's part of the test split and is
exact over the whole split (``DistributedValidationCallback``). Rank 0 prints progress and
appends one CSV row per epoch to ``--log-csv``.

Checkpoints (``--checkpoint-dir``): rank 0 saves at the end of every epoch, every
``--save-every`` batches if given, and when SLURM's walltime warning (SIGUSR1) or a
preemption/``scancel`` (SIGTERM) arrives, after the same batch on every rank (then the ranks
exit with code 75, which the sbatch templates turn into a requeue). The newest ``--keep``
files are kept. Rerun the same command to resume: it continues exactly where the last save
was made, even inside an epoch, and ends with the same weights as a run never interrupted.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # the recipes' helper modules, also when imported from elsewhere
    sys.path.insert(0, _HERE)

import resume_checkpoint  # noqa: E402  (imports kerashvd, not TensorFlow)

TINY = {"epochs": 2, "batch_size": 32, "warmup_epochs": 1}
DEFAULTS = {"epochs": 8, "batch_size": 64, "warmup_epochs": 3}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir",
                   help="tfds data directory (default: $TFDS_DATA_DIR or ~/tensorflow_datasets)")
    p.add_argument("--epochs", type=int, help=f"epochs in total (default {DEFAULTS['epochs']})")
    p.add_argument("--batch-size", type=int,
                   help=f"per-rank batch size (default {DEFAULTS['batch_size']})")
    p.add_argument("--lr", type=float, default=0.001,
                   help="Adam learning rate for one rank; scaled by the number of ranks")
    p.add_argument("--warmup-epochs", type=int,
                   help=f"epochs of learning-rate warmup (default {DEFAULTS['warmup_epochs']})")
    resume_checkpoint.add_arguments(p, keep=3)
    p.add_argument("--log-csv",
                   help="rank 0 appends one row per epoch here (loss, accuracy, lr, images/s, ...)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--compression", choices=("none", "fp16", "bf16"), default="none",
                   help="gradients cast to float16 or bfloat16 for the allreduce "
                        "(kerashvd.Compression); the engine reduces them in float32, so the "
                        "bytes across the link stay those of float32 (default none)")
    p.add_argument("--tiny", action="store_true",
                   help=f"a seconds-long run for tests: {TINY} unless given")
    args = p.parse_args(argv)
    for key, value in (TINY if args.tiny else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("epochs", "batch_size", "warmup_epochs", "keep", "save_every"):
        if getattr(args, key) is not None and getattr(args, key) <= 0:
            p.error(f"--{key.replace('_', '-')} must be positive; received {getattr(args, key)}")
    return args


def load_data(args):
    """This rank's training batches as a function of (epoch, first batch), the validation
    dataset (batched), and the steps per epoch."""
    import tensorflow as tf
    import tensorflow_datasets as tfds

    import kerashvd as hvd
    from tfds_data import data_root, require_prepared

    root = data_root(args.data_dir)
    require_prepared("mnist", root, "python -c \"import tensorflow_datasets as tfds; "
                                    f"tfds.load('mnist', data_dir='{root}')\"")
    # Shard before shuffling: each rank owns a distinct, equally large part of the split.
    train_split = tfds.even_splits("train", n=hvd.size(), drop_remainder=True)[hvd.rank()]
    # Validation parts may differ in size by one image; the validation callback sums exactly.
    val_split = tfds.even_splits("test", n=hvd.size())[hvd.rank()]

    def normalize(image, label):
        return tf.cast(image, tf.float32) / 255.0, label

    def load(split):
        return tfds.load("mnist", split=split, data_dir=root, as_supervised=True, download=False)

    train = load(train_split).map(normalize, num_parallel_calls=tf.data.AUTOTUNE).cache()
    train_images = int(train.cardinality())
    if train_images < args.batch_size:
        raise ValueError(f"each rank has {train_images} training images, fewer than --batch-size "
                         f"{args.batch_size}; use a smaller batch or fewer ranks")

    def train_batches(epoch, step):
        # The order is a function of (seed, rank, epoch) only, so a resumed run sees the same
        # batches; skipping `step` batches of the cached images costs no decoding.
        seed = (args.seed * 1_000_003 + epoch) * 1_009 + hvd.rank()
        return (train.shuffle(min(train_images, 10000), seed=seed, reshuffle_each_iteration=False)
                .batch(args.batch_size, drop_remainder=True).skip(step)
                .prefetch(tf.data.AUTOTUNE))

    val = (load(val_split).map(normalize, num_parallel_calls=tf.data.AUTOTUNE)
           .batch(args.batch_size).cache().prefetch(tf.data.AUTOTUNE))
    return train_batches, val, train_images // args.batch_size


def build_model():
    """The convnet of Horovod's Keras MNIST example (two convolutions, dropout, two dense).

    Built lazily, at its first batch, like Horovod's example (no ``keras.Input``).
    """
    import keras

    return keras.Sequential([
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Dropout(0.25),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ], name="mnist_convnet")


def main(argv=None):
    """Trains; returns the ``keras.callbacks.History`` (``None`` when nothing was left to do)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)

    import keras

    import kerashvd as hvd
    from training_log import EpochLog

    hvd.init()
    keras.utils.set_random_seed(args.seed + hvd.rank())  # weights come from rank 0 anyway
    train_batches, val, steps = load_data(args)

    # The global batch is size() times larger: scale the learning rate with it.
    lr = args.lr * hvd.size()
    model = build_model()
    compression = getattr(hvd.Compression, args.compression)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(lr),
                                                     compression=compression),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    initial_epoch, initial_step = resume_checkpoint.restore_latest(
        model, args.checkpoint_dir, steps, input_shape=(None, 28, 28, 1),
        required=args.require_checkpoint)
    if initial_epoch >= args.epochs:
        if hvd.rank() == 0:
            print(f"Nothing to do: {initial_epoch} epoch(s) done, --epochs {args.epochs}")
        return None

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=args.warmup_epochs,
                                                 steps_per_epoch=steps, verbose=1),
        hvd.callbacks.DistributedValidationCallback(),
        hvd.callbacks.MetricAverageCallback(),
        EpochLog(args.batch_size, csv_path=args.log_csv),
    ]
    callbacks += resume_checkpoint.callbacks(args)
    history = hvd.callbacks.fit_resumable(
        model, train_batches, epochs=args.epochs, steps_per_epoch=steps,
        initial_epoch=initial_epoch, initial_step=initial_step, validation_data=val,
        callbacks=callbacks, verbose=hvd.callbacks.verbose(2))
    if hvd.rank() == 0:
        print(f"ranks={hvd.size()} epochs={args.epochs} "
              f"final val_accuracy={history.history['val_accuracy'][-1]:.4f}", flush=True)
    return history


if __name__ == "__main__":
    main()
