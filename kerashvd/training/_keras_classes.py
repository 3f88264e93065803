"""kerashvd's Keras serializables, and how ``keras.saving.load_model`` comes to know them.

Keras finds a custom class in a saved file (``kerashvd>DistributedOptimizer``,
``kerashvd>SyncBatchNormalization``) only once the module defining it has run, which
registers it (``keras.saving.register_keras_serializable``). ``import kerashvd`` imports
neither Keras nor those modules, so in a fresh process they are registered by:

- ``kerashvd.load_model`` (imports them before loading);
- ``kerashvd.init()``, when the Keras that ``tf.keras`` uses is imported already (the package
  adds :func:`register_if_keras_imported` to ``init()``: the runtime does not import this
  layer);
- any use of ``kerashvd.DistributedOptimizer`` or ``kerashvd.SyncBatchNormalization``;
- :func:`register` itself.

This replaces an import hook (a ``sys.meta_path`` finder wrapping Keras' loader) that did it
at ``import keras``: importing a library should not change how other libraries import.
"""

import sys

from ._keras_choice import keras_module_name

def register():
    """Registers kerashvd's Keras classes with the Keras that ``tf.keras`` uses.

    Imports TensorFlow and that Keras. Calling it again does nothing.

    Example:

    >>> from kerashvd.training import _keras_classes
    >>> _keras_classes.register()  # then keras.saving.load_model(...) knows them
    """
    # Imported here: they import TensorFlow and Keras, which `import kerashvd` must not.
    from . import sync_batch_norm  # noqa: F401
    from .optimizer import DistributedOptimizer  # noqa: F401


def register_if_keras_imported():
    """:func:`register` when that Keras is imported already (kerashvd then adds no import).

    Returns:
        Whether the classes were registered.
    """
    if keras_module_name() not in sys.modules:
        return False
    register()
    return True
