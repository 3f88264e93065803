"""``kerashvd.keras_compat``, the path the documentation names: the module
:mod:`kerashvd.training.keras_compat`.

It moved with the rest of the Keras integration; this name stays for scripts that import
``keras`` (or ``USES_TF_KERAS``, ``KERAS_NAME``) from here. Importing it gives the very same
module object.
"""

import sys

from .training import keras_compat as _keras_compat

sys.modules[__name__] = _keras_compat
