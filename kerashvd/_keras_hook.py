"""kerashvd's Keras serializables, registered as soon as Keras is imported.

``keras.models.load_model`` finds custom classes (``DistributedOptimizer``,
``SyncBatchNormalization``) only if their modules have been imported, which registers them;
``import kerashvd`` imports neither TensorFlow nor Keras (so that ``kerashvdrun`` and
``kerashvd.run`` start quickly). So ``import kerashvd`` installs an import hook instead: once
both TensorFlow and the Keras that ``tf.keras`` uses (``keras``, or ``tf_keras`` with
``TF_USE_LEGACY_KERAS=1``) have finished importing -- by ``import keras``, ``import
tensorflow`` (which imports Keras 3 itself, half-way through its own import) or kerashvd --
``kerashvd.keras_compat`` is imported, and it imports the modules that register the classes
(:func:`register_serializables`). If both are imported already, that happens at once.

The hook wraps only those two modules' loaders (every other import goes through untouched;
``importlib.util.find_spec`` probes, which TensorFlow makes for ``keras``, execute nothing),
and removes itself once the classes are registered.
"""

import importlib
import importlib.abc
import os
import sys
import warnings

# What the classes of each Keras are registered by (see keras_compat for the selection).
_MODULES = {False: ("kerashvd.optimizer.keras3", "kerashvd.sync_batch_norm"),
            True: ("kerashvd.optimizer.keras2", "kerashvd.sync_batch_norm")}


def _selected_keras():
    """The module name of the Keras that tf.keras uses (TensorFlow's rule, as keras_compat)."""
    return "tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True") else "keras"


def register_serializables(uses_tf_keras):
    """Imports the modules whose classes are registered Keras serializables.

    Called at the end of ``kerashvd.keras_compat`` (the names those modules import from it
    exist by then, also while it is still being imported).
    """
    for name in _MODULES[bool(uses_tf_keras)]:
        importlib.import_module(name)


def _register_when_ready():
    """Registers once TensorFlow and the selected Keras are completely imported."""
    if _FINDER.executing or not all(name in sys.modules for name in _FINDER.names):
        return
    _uninstall()
    try:
        importlib.import_module("kerashvd.keras_compat")  # registers at its end
    except Exception as err:  # noqa: BLE001  (never break the user's `import keras`)
        warnings.warn(f"kerashvd could not register its Keras classes ({type(err).__name__}: "
                      f"{err}); keras.models.load_model of a model that uses them needs "
                      "`import kerashvd.keras_compat` first.", stacklevel=2)


class _Loader(importlib.abc.Loader):
    """Runs the wrapped loader, then registers kerashvd's classes if the time has come."""

    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        _FINDER.executing.add(self._name)
        try:
            self._loader.exec_module(module)
        finally:
            _FINDER.executing.discard(self._name)
            module.__spec__.loader = module.__loader__ = self._loader
        _register_when_ready()

    def __getattr__(self, name):  # resource readers and the like
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds TensorFlow and the selected Keras with the other finders, wrapping their loaders."""

    def __init__(self):
        self.names = ()
        self.executing = set()

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.names:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_FINDER = _Finder()


def _uninstall():
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def install():
    """Registers kerashvd's classes now if TensorFlow and the selected Keras are loaded, else
    as soon as they are."""
    if "kerashvd.keras_compat" in sys.modules:
        return  # imported (or being imported): it registers at its end
    _FINDER.names = ("tensorflow", _selected_keras())
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    _register_when_ready()
