"""A Keras model and its optimizer as elastic state: :class:`TensorFlowKerasState`,
:class:`KerasState`.

A commit keeps a snapshot of every model variable (trainable, non-trainable such as batch
norm statistics, and the random generators' state) and every optimizer variable (slots,
iteration count, learning rate). The snapshot is a read of each variable, all in one
``tf.function`` call, which copies nothing when it is taken: TensorFlow copies a variable's
buffer before updating it in place while a read of it is still held, so the copy is paid by
the next training step, on the variable's device. Only when a commit is handed to the next
world are the values brought to host memory.
"""

import numpy as np
import tensorflow as tf

import kerashvd as hvd
from kerashvd.training.keras_compat import build_optimizer, keras, model_built, optimizer_variables

from .state import ObjectState, check_handover_shapes


class TensorFlowKerasState(ObjectState):
    """A Keras model, its optimizer and Python objects as elastic state.

    Args:
        model: a built Keras model (of the Keras ``tf.keras`` uses).
        optimizer: the optimizer, when it is not the one compiled into ``model`` (custom
            training loops).
        backend: accepted for Horovod compatibility (TensorFlow 1 sessions); unused.
        **kwargs: more attributes to keep (e.g. ``epoch=0, batch=0``), as in
            :class:`ObjectState`.

    Raises:
        ValueError: the model is not built (its weights do not exist yet).

    Example:

    >>> state = hvd.elastic.TensorFlowKerasState(model, optimizer, batch=0)  # doctest: +SKIP
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not model_built(model):
            raise ValueError(
                f"the model {model.name!r} is not built: its weights do not exist yet, so there "
                "is nothing to commit. Build it first (keras.Input as its first layer, "
                "model.build(input_shape), or one training step, as Horovod's examples do).")
        self.model = model
        self.optimizer = optimizer or getattr(model, "optimizer", None)
        self.backend = backend
        if self.optimizer is not None:
            build_optimizer(self.optimizer, model.trainable_variables)
        self._save_model()
        super().__init__(**kwargs)

    def _model_variables(self):
        return list(self.model.variables)

    def _optimizer_variables(self):
        return optimizer_variables(self.optimizer) if self.optimizer is not None else []

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._load_model()
        super().restore()

    def sync(self):
        hvd.broadcast_variables(self._model_variables() + self._optimizer_variables(),
                                root_rank=0, name="elastic.sync")
        self._save_model()
        super().sync()

    def _save_model(self):
        model, optimizer = self._model_variables(), self._optimizer_variables()
        key = tuple(map(id, model + optimizer))
        if getattr(self, "_snapshot_key", None) != key:  # variables added (e.g. built later)
            self._snapshot_key = key
            self._snapshot = tf.function(
                lambda: [tf.identity(tf.convert_to_tensor(v)) for v in model + optimizer])
        values = self._snapshot() if key else []
        self._saved_model, self._saved_optimizer = values[:len(model)], values[len(model):]

    def _load_model(self):
        for variables, saved in ((self._model_variables(), self._saved_model),
                                 (self._optimizer_variables(), self._saved_optimizer)):
            for variable, value in zip(variables, saved):
                variable.assign(value)

    def _handover_payload(self):
        return dict(super()._handover_payload(),
                    model=[np.asarray(t) for t in self._saved_model],
                    optimizer=[np.asarray(t) for t in self._saved_optimizer])

    def _take_payload(self, payload):
        check_handover_shapes("model", self._model_variables(), payload["model"])
        check_handover_shapes("optimizer", self._optimizer_variables(), payload["optimizer"])
        super()._take_payload(payload)
        self._saved_model = [tf.convert_to_tensor(x) for x in payload["model"]]
        self._saved_optimizer = [tf.convert_to_tensor(x) for x in payload["optimizer"]]


class KerasState(TensorFlowKerasState):
    """:class:`TensorFlowKerasState` under the name of Horovod's ``horovod.keras`` API.

    Args:
        model: a built Keras model.
        optimizer: the optimizer, when not compiled into ``model``.
        **kwargs: more attributes to keep.

    Example (Horovod's elastic Keras example, import changed)::

        state = hvd.elastic.KerasState(model, batch=0, epoch=0)
        state.register_reset_callbacks([on_state_reset])
    """

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=keras.backend, **kwargs)
