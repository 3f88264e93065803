"""Resuming a recipe from the latest checkpoint that ``hvd.callbacks.ModelCheckpoint`` wrote."""

import kerashvd as hvd


def restore_latest(model, checkpoint_dir, input_shape=None, required=False):
    """Loads the latest checkpoint of ``checkpoint_dir`` into ``model`` on rank 0.

    Every rank builds and compiles the model in code; rank 0 then loads the checkpoint's
    weights and optimizer state (a ``.keras`` file holds both), and
    ``BroadcastGlobalVariablesCallback`` copies them to the other ranks when ``fit`` starts.
    Only rank 0 reads the file, so the checkpoint directory need not be shared between nodes.
    Every rank must call this (rank 0 broadcasts the record).

    Args:
        model: a compiled model.
        checkpoint_dir: the directory of ``ModelCheckpoint``'s files, or ``None``.
        input_shape: the batch shape to build a lazily built model with before loading.
            Every rank builds it then, so the broadcast runs when ``fit`` starts, as for a
            model built eagerly. (With rank 0 built and the others not, kerashvd defers the
            broadcast into the first step, and that step's gradients on the other ranks come
            from their own initial weights.)
        required: raise when ``checkpoint_dir`` holds no checkpoint (or does not exist),
            instead of starting from scratch (``latest_checkpoint(required=True)``).

    Returns:
        The number of epochs already done (0 without a checkpoint): ``fit(initial_epoch=...)``.
    """
    if not checkpoint_dir:
        return 0
    ckpt = hvd.callbacks.latest_checkpoint(checkpoint_dir, required=required)
    if ckpt is None:
        return 0
    if not model.built:
        model.build(input_shape)
    if hvd.rank() == 0:
        model.optimizer.build(model.trainable_variables)
        model.load_weights(ckpt.path)
        print(f"Resuming from {ckpt.path} after epoch {ckpt.epoch}", flush=True)
    return ckpt.epoch
