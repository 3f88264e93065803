"""Keras callbacks and helpers for data-parallel training (shipped as ``kerashvd.callbacks``).

A typical callback list, in this order (Keras calls callbacks in list order, and the ones
that average or reduce metrics must run before the ones that read them)::

    callbacks = [
        hvd.callbacks.JoinCallback(),                         # only for uneven data: first
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),    # same start on every rank
        hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=3),
        hvd.callbacks.DistributedValidationCallback(),        # exact val_* over shards
        hvd.callbacks.MetricAverageCallback(),                # same logs on every rank
        keras.callbacks.EarlyStopping(patience=3),
        hvd.callbacks.ModelCheckpoint("ckpt/model.keras"),    # rank 0 writes, atomically
        hvd.callbacks.StragglerReportCallback(),              # which node is slow, per epoch
    ]
    model.fit(..., callbacks=callbacks, verbose=hvd.callbacks.verbose(1))

Progress output: pass ``verbose=hvd.callbacks.verbose(1)`` to ``fit``/``evaluate`` so only
rank 0 prints; the callbacks here that print do so on rank 0 only.

Keras 3 or Keras 2: the callbacks are callbacks of the Keras that ``tf.keras`` uses (tf_keras
when ``TF_USE_LEGACY_KERAS=1``; see ``kerashvd.training.keras_compat``), and refuse a model of the
other one with an error naming that variable.
"""

from .broadcast_global_variables import BroadcastGlobalVariablesCallback, broadcast_model_state
from .checkpoint_io import atomic_save
from .checkpoint_record import Checkpoint, latest_checkpoint
from .distributed_validation import DistributedValidationCallback, reduce_metric_states
from .join import JoinCallback, agree_steps_per_epoch
from .learning_rate_schedule import LearningRateScheduleCallback
from .learning_rate_warmup import LearningRateWarmupCallback
from .metric_average import MetricAverageCallback
from .model_checkpoint import BestModelCheckpoint, ModelCheckpoint
from .preemption import PREEMPTED_EXIT_CODE, Preempted, PreemptionCallback
from .progress import verbose
from .resume import batch_offset, fit_resumable, restore
from .straggler_report import StragglerReportCallback

__all__ = [
    "BestModelCheckpoint",
    "BroadcastGlobalVariablesCallback",
    "Checkpoint",
    "DistributedValidationCallback",
    "JoinCallback",
    "LearningRateScheduleCallback",
    "LearningRateWarmupCallback",
    "MetricAverageCallback",
    "ModelCheckpoint",
    "PREEMPTED_EXIT_CODE",
    "Preempted",
    "PreemptionCallback",
    "StragglerReportCallback",
    "agree_steps_per_epoch",
    "atomic_save",
    "batch_offset",
    "broadcast_model_state",
    "fit_resumable",
    "latest_checkpoint",
    "reduce_metric_states",
    "restore",
    "verbose",
]
