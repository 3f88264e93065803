"""The base class of kerashvd's callbacks: a callback of the Keras that tf.keras uses."""

from kerashvd.training._xla import turn_off_jit_compile
from kerashvd.training.keras_compat import KERAS_NAME, keras

__all__ = ["Callback"]


class Callback(keras.callbacks.Callback):
    """A ``keras.callbacks.Callback`` of the selected Keras that refuses the other Keras' models.

    Keras 3 and tf_keras are separate class hierarchies, and each one's ``fit`` fails on the
    other's callbacks with an ``AttributeError`` about a private method. kerashvd's callbacks
    follow ``tf.keras`` (``kerashvd.training.keras_compat``), so a model of the other Keras
    means that ``TF_USE_LEGACY_KERAS`` does not match the model; ``set_model`` says so.

    Raises:
        TypeError: from ``set_model``, for a model of the other Keras.

    Example:

    >>> from kerashvd.callbacks._callback import Callback
    >>> class Count(Callback):  # a Keras 3 or tf_keras callback, as tf.keras is
    ...     def on_epoch_end(self, epoch, logs=None):
    ...         self.epochs = epoch + 1
    """

    def set_model(self, model):
        if not isinstance(model, keras.Model):
            raise TypeError(
                f"kerashvd.callbacks.{type(self).__name__} is a {KERAS_NAME} callback (kerashvd "
                "uses the Keras that tf.keras uses, chosen by TF_USE_LEGACY_KERAS), but the model "
                f"is a {type(model).__module__}.{type(model).__name__}. Set TF_USE_LEGACY_KERAS=1 "
                "before starting Python to train tf_keras models, or leave it unset for Keras 3.")
        turn_off_jit_compile(model)
        super().set_model(model)
