"""The recipes' checkpoints: their options, their callbacks, and resuming from the latest.

Used by recipes/mnist.py and recipes/imagenet.py alike (docs/resuming.md).
"""

import os

import kerashvd as hvd


def add_arguments(parser, keep):
    """Adds ``--checkpoint-dir``, ``--save-every``, ``--keep`` (default ``keep``) and
    ``--require-checkpoint`` to ``parser`` (a parser or an argument group)."""
    parser.add_argument("--checkpoint-dir",
                        help="rank 0 saves model-EPOCH.keras here every epoch and on SLURM's "
                             "walltime or preemption signal; a rerun resumes from it")
    parser.add_argument("--save-every", type=int, metavar="BATCHES",
                        help="also save every this many batches inside an epoch")
    parser.add_argument("--keep", type=int, default=keep,
                        help=f"keep the newest this many checkpoint files (default {keep})")
    parser.add_argument("--require-checkpoint", action="store_true",
                        help="fail instead of starting from scratch when --checkpoint-dir holds "
                             "no checkpoint (for resubmitted jobs)")


def callbacks(args):
    """The saving callbacks for the options of :func:`add_arguments` (none without a
    directory): a ``ModelCheckpoint`` and the ``PreemptionCallback`` that saves through it."""
    if not args.checkpoint_dir:
        return []
    checkpoint = hvd.callbacks.ModelCheckpoint(
        os.path.join(args.checkpoint_dir, "model-{epoch:03d}.keras"),
        save_freq=args.save_every or "epoch", max_to_keep=args.keep)
    return [checkpoint, hvd.callbacks.PreemptionCallback(checkpoint)]


def restore_latest(model, checkpoint_dir, steps_per_epoch, input_shape=None, required=False):
    """Loads the latest checkpoint of ``checkpoint_dir`` into ``model`` (see
    ``hvd.callbacks.restore``: rank 0 reads it, the broadcast callback shares it when ``fit``
    starts, and the file is checked against its record). Every rank must call this.

    Args:
        model: a compiled model.
        checkpoint_dir: the directory of ``ModelCheckpoint``'s files, or ``None``.
        steps_per_epoch: batches per epoch (a save after an epoch's last batch resumes at
            the next epoch).
        input_shape: the batch shape to build a lazily built model with before loading.
        required: raise when ``checkpoint_dir`` holds no checkpoint (or does not exist),
            instead of starting from scratch.

    Returns:
        ``(epoch, step)``, the position to resume at (``(0, 0)`` without a checkpoint): pass
        them to ``hvd.callbacks.fit_resumable``.
    """
    if not checkpoint_dir:
        if required:
            raise ValueError("--require-checkpoint needs --checkpoint-dir")
        return 0, 0
    ckpt = hvd.callbacks.latest_checkpoint(checkpoint_dir, required=required)
    epoch, step = hvd.callbacks.restore(model, ckpt, input_shape=input_shape)
    if step >= steps_per_epoch:
        epoch, step = epoch + 1, 0
    if ckpt is not None and hvd.rank() == 0:
        where = f"after epoch {epoch}" if not step else f"at batch {step + 1} of epoch {epoch + 1}"
        print(f"Resuming from {ckpt.path} {where}", flush=True)
    return epoch, step
