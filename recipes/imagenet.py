"""ImageNet: ResNet-50 trained data-parallel, with the schedule of Goyal et al. (2017).

Run on 2 processes of this machine, or under SLURM:

    kerashvdrun -np 2 python recipes/imagenet.py --data-dir /data/imagenet
    mpiexec -n 2 python recipes/imagenet.py --data-dir /data/imagenet
    srun --mpi=pmi2 python recipes/imagenet.py --data-dir /data/imagenet --checkpoint-dir ckpt
    kerashvdrun -np 2 python recipes/imagenet.py --synthetic       # throughput benchmark

Data (``--data-format``):

- ``tfrecord`` (default): the standard ImageNet TFRecord layout in ``--data-dir``:
  ``train-00000-of-01024`` ... and ``validation-00000-of-00128`` ..., written from the
  ILSVRC2012 tars by TensorFlow's ``build_imagenet_data.py``.
- ``tfds``: tensorflow-datasets' ``imagenet2012`` in ``--data-dir`` (default
  ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``), prepared once from the ILSVRC2012 tars
  (see ``--help`` of ``--data-format``).
- ``--synthetic``: random images in memory; no data needed.

Training: each rank reads its own files (see recipes/imagenet_data.py), ResNet-50
(``keras.applications``, random initialization) with SGD, momentum 0.9, label smoothing 0.1
and L2 weight decay on the convolution and dense kernels. The learning rate is
``0.1 * global_batch / 256``, reached by a linear warmup over the first 5 epochs and divided
by 10 at epochs 30, 60 and 80 (Goyal et al., "Accurate, Large Minibatch SGD", 2017).
Validation is exact over the whole validation set. Rank 0 prints images/s per rank and in
total, and appends one CSV row per epoch to ``--log-csv``.

Checkpoints (``--checkpoint-dir``): rank 0 saves at the end of every epoch, every
``--save-every`` batches if given, and on SLURM's walltime warning (SIGUSR1) or a preemption
(SIGTERM), after the same batch on every rank (the ranks then exit with code 75, which the
sbatch templates turn into a requeue); the newest ``--keep`` files are kept. A rerun resumes at
the saved batch with the model, optimizer and learning-rate schedule exactly where they were.
The data is not replayed exactly: for speed the input pipeline reads, shuffles and augments in
parallel without a fixed order, so the rest of a cut epoch is a fresh random draw from the
epoch's files (each epoch's file order is a function of ``--seed`` and the epoch).
"""

import argparse
import os
import statistics
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # the recipes' helper modules, also when imported from elsewhere
    sys.path.insert(0, _HERE)

import resume_checkpoint  # noqa: E402  (imports kerashvd, not TensorFlow)

# --tiny: seconds-long runs on tiny images for tests; DEFAULTS: the real thing.
TINY = {"image_size": 64, "batch_size": 4, "epochs": 1, "steps_per_epoch": 3,
        "warmup_epochs": 1}
DEFAULTS = {"image_size": 224, "batch_size": 64, "epochs": 90, "steps_per_epoch": None,
            "warmup_epochs": 5}
# --synthetic: one untimed epoch (tracing, warmup), then timed epochs of a few steps.
SYNTHETIC_TINY = {"epochs": 2, "steps_per_epoch": 3}
SYNTHETIC = {"epochs": 11, "steps_per_epoch": 10}
TFDS_HOWTO = ("python -c \"import tensorflow_datasets as tfds; tfds.builder('imagenet2012', "
              "data_dir='{root}').download_and_prepare(download_config=tfds.download."
              "DownloadConfig(manual_dir='DIR_WITH_ILSVRC2012_img_train.tar_AND_img_val.tar'))\"")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--data-dir", help="the TFRecord directory, or the tfds data directory")
    data.add_argument("--data-format", choices=("tfrecord", "tfds"), default="tfrecord",
                      help="standard TFRecord layout (default), or tfds imagenet2012, prepared "
                           "with: " + TFDS_HOWTO.format(root="DATA_DIR"))
    data.add_argument("--synthetic", action="store_true",
                      help="train on random in-memory images: a throughput benchmark")
    data.add_argument("--image-size", type=int, help="image side in pixels (default 224)")
    data.add_argument("--train-images", type=int, default=None,
                      help="images in the training set, for steps per epoch (tfrecord default "
                           "1281167; tfds reads it from the data set)")
    train = p.add_argument_group("training")
    train.add_argument("--batch-size", type=int, help="per-rank batch size (default 64)")
    train.add_argument("--epochs", type=int, help="epochs in total (default 90; --synthetic: 11, "
                                                  "the first one untimed)")
    train.add_argument("--steps-per-epoch", type=int,
                       help="steps per epoch (default: training images // global batch; "
                            "--synthetic: 10)")
    train.add_argument("--base-lr", type=float, default=0.1, help="learning rate per 256 images")
    train.add_argument("--warmup-epochs", type=int, help="linear warmup epochs (default 5)")
    train.add_argument("--decay-epochs", default="30,60,80",
                       help="epochs at which the learning rate is divided by 10")
    train.add_argument("--momentum", type=float, default=0.9)
    train.add_argument("--weight-decay", type=float, default=1e-4,
                       help="L2 coefficient of conv/dense kernels (gradient += wd * w)")
    train.add_argument("--label-smoothing", type=float, default=0.1)
    train.add_argument("--mixed-precision", action="store_true",
                       help="mixed_float16 policy with loss scaling (GPUs)")
    train.add_argument("--fp16-allreduce", action="store_true",
                       help="compress gradients to float16 for the allreduce")
    train.add_argument("--backward-passes-per-step", type=int, default=1,
                       help="accumulate gradients of this many batches locally per update")
    resume_checkpoint.add_arguments(train, keep=2)
    train.add_argument("--log-csv",
                       help="rank 0 appends one row per epoch (loss, accuracy, lr, images/s)")
    train.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tiny", action="store_true",
                   help=f"a seconds-long run for tests: {TINY} unless given")
    args = p.parse_args(argv)
    defaults = TINY if args.tiny else DEFAULTS
    if args.synthetic:
        defaults = {**defaults, **(SYNTHETIC_TINY if args.tiny else SYNTHETIC)}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.image_size < 32:
        p.error("--image-size must be at least 32 (ResNet-50's smallest input); "
                f"received {args.image_size}")
    for key in ("batch_size", "epochs", "warmup_epochs", "backward_passes_per_step", "keep",
                "save_every"):
        if getattr(args, key) is not None and getattr(args, key) <= 0:
            p.error(f"--{key.replace('_', '-')} must be positive; received {getattr(args, key)}")
    try:
        args.decay_epochs = sorted(int(e) for e in args.decay_epochs.split(",") if e.strip())
    except ValueError:
        p.error(f"--decay-epochs must be comma-separated integers; received {args.decay_epochs!r}")
    if args.decay_epochs and args.decay_epochs[0] < args.warmup_epochs:
        p.error(f"--decay-epochs must start after the warmup ({args.warmup_epochs} epochs); "
                f"received {args.decay_epochs}")
    if not args.synthetic and not args.data_dir and args.data_format == "tfrecord":
        p.error("--data-dir is required with --data-format tfrecord (or use --synthetic)")
    return args


def build_model(image_size, weight_decay):
    """ResNet-50 with float32 logits (also under mixed precision) and L2 on its kernels."""
    import keras

    base = keras.applications.ResNet50(weights=None, input_shape=(image_size, image_size, 3),
                                       classes=1000, classifier_activation=None)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(base.output)
    model = keras.Model(base.input, logits, name="resnet50")
    if weight_decay:
        l2 = keras.regularizers.L2(weight_decay / 2)  # d/dw (wd/2 * w^2) = wd * w
        for layer in model.layers:
            if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
                layer.kernel.regularizer = l2
    return model


def lr_callbacks(args, peak_lr, steps):
    """Warmup to ``peak_lr`` over ``warmup_epochs``, then /10 at each decay epoch."""
    import kerashvd as hvd

    callbacks = [hvd.callbacks.LearningRateWarmupCallback(
        peak_lr, warmup_epochs=args.warmup_epochs, steps_per_epoch=steps, verbose=1)]
    bounds = [args.warmup_epochs] + args.decay_epochs + [None]
    for i, (start, end) in enumerate(zip(bounds, bounds[1:])):
        callbacks.append(hvd.callbacks.LearningRateScheduleCallback(
            peak_lr, multiplier=0.1 ** i, start_epoch=start, end_epoch=end))
    return callbacks


def load_data(args):
    """(train_batches, validation or None, steps_per_epoch) for this rank, where
    ``train_batches(epoch, step)`` is the training data of ``epoch`` (see the module doc)."""
    import imagenet_data
    import kerashvd as hvd

    global_batch = args.batch_size * hvd.size()

    def seed(epoch):
        return (args.seed * 1_000_003 + epoch) * 1_009 + hvd.rank()

    if args.synthetic:
        train = imagenet_data.synthetic_dataset(args.image_size, args.batch_size, seed(0))
        return (lambda epoch, step: train), None, args.steps_per_epoch
    if args.data_format == "tfrecord":
        imagenet_data.check_tfrecord_layout(args.data_dir)

        def train_batches(epoch, step):
            return imagenet_data.tfrecord_dataset(
                args.data_dir, "train", args.image_size, args.batch_size, seed(epoch))[0]
        _, train_files = imagenet_data.tfrecord_dataset(
            args.data_dir, "train", args.image_size, args.batch_size, seed(0))
        val, val_files = imagenet_data.tfrecord_dataset(
            args.data_dir, "validation", args.image_size, args.batch_size)
        train_images = args.train_images or imagenet_data.TRAIN_IMAGES
    else:
        from tfds_data import data_root, require_prepared

        root = data_root(args.data_dir)
        builder = require_prepared("imagenet2012", root, TFDS_HOWTO.format(root=root))

        def train_batches(epoch, step):
            return imagenet_data.tfds_dataset(
                builder, "train", args.image_size, args.batch_size, seed(epoch))[0]
        _, train_files = imagenet_data.tfds_dataset(
            builder, "train", args.image_size, args.batch_size, seed(0))
        val, val_files = imagenet_data.tfds_dataset(
            builder, "validation", args.image_size, args.batch_size)
        train_images = args.train_images or builder.info.splits["train"].num_examples
    everyone = hvd.allgather_object((train_files, val_files), name="recipes.imagenet.files")
    if hvd.rank() == 0:
        for rank, (t, v) in enumerate(everyone):
            print(f"rank {rank} reads {len(t)} training file(s): {' '.join(t)}; "
                  f"{len(v)} validation file(s): {' '.join(v)}", flush=True)
    steps = args.steps_per_epoch or max(1, train_images // global_batch)
    return train_batches, val, steps


def compile_model(args, peak_lr):
    import keras

    import kerashvd as hvd

    if args.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model(args.image_size, args.weight_decay)
    optimizer = keras.optimizers.SGD(peak_lr, momentum=args.momentum)
    if args.mixed_precision:
        # Loss scaling inside the allreduce: every rank sees the same (in)finite gradients
        # and skips the same steps (the order kerashvd.DistributedOptimizer requires).
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer = hvd.DistributedOptimizer(
        optimizer, compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        backward_passes_per_step=args.backward_passes_per_step)
    model.compile(optimizer=optimizer,
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True,
                                                            label_smoothing=args.label_smoothing),
                  metrics=["accuracy", keras.metrics.TopKCategoricalAccuracy(5, name="top5")])
    return model


def report_benchmark(rows, size):
    """Rank 0's summary of a --synthetic run: mean images/s over the epochs after the first."""
    timed = rows[1:] or rows
    per_rank = [r["images_per_sec_per_rank"] for r in timed]
    total = [r["images_per_sec"] for r in timed]
    spread = (lambda v: statistics.stdev(v) if len(v) > 1 else 0.0)
    print(f"Img/sec per rank: {statistics.fmean(per_rank):.1f} +-{spread(per_rank):.1f}")
    print(f"Total img/sec on {size} rank(s): {statistics.fmean(total):.1f} +-{spread(total):.1f}",
          flush=True)


def main(argv=None):
    """Trains; returns the ``keras.callbacks.History`` (``None`` when nothing was left to do)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)

    import keras

    import kerashvd as hvd
    from training_log import EpochLog

    hvd.init()
    keras.utils.set_random_seed(args.seed + hvd.rank())  # weights come from rank 0 anyway
    train_batches, val, steps = load_data(args)
    global_batch = args.batch_size * hvd.size()
    peak_lr = args.base_lr * global_batch / 256
    model = compile_model(args, peak_lr)
    initial_epoch, initial_step = resume_checkpoint.restore_latest(
        model, args.checkpoint_dir, steps, required=args.require_checkpoint)
    if initial_epoch >= args.epochs:
        if hvd.rank() == 0:
            print(f"Nothing to do: {initial_epoch} epoch(s) done, --epochs {args.epochs}")
        return None
    if hvd.rank() == 0:
        print(f"ResNet-50 on {hvd.size()} rank(s): {args.image_size} px, batch {args.batch_size} "
              f"per rank ({global_batch} in total), {steps} steps per epoch, peak lr {peak_lr:g}, "
              f"{'synthetic data' if args.synthetic else args.data_format}", flush=True)

    log = EpochLog(args.batch_size, csv_path=args.log_csv)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), *lr_callbacks(args, peak_lr, steps)]
    if val is not None:
        callbacks.append(hvd.callbacks.DistributedValidationCallback())
    callbacks += [hvd.callbacks.MetricAverageCallback(), log]
    callbacks += resume_checkpoint.callbacks(args)
    # Validation reads each rank's files once, a dataset of unknown length: Keras warns when
    # it ends (training repeats forever, so the warning can only come from validation).
    warnings.filterwarnings("ignore", message="Your input ran out of data")
    history = hvd.callbacks.fit_resumable(
        model, train_batches, epochs=args.epochs, steps_per_epoch=steps,
        initial_epoch=initial_epoch, initial_step=initial_step, validation_data=val,
        callbacks=callbacks, verbose=hvd.callbacks.verbose(2))
    if hvd.rank() == 0:
        if args.synthetic:
            report_benchmark(log.rows, hvd.size())
        print(f"ranks={hvd.size()} final loss={history.history['loss'][-1]:.4f}", flush=True)
    return history


if __name__ == "__main__":
    main()
