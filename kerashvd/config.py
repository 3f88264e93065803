"""``kerashvd.config``, the path the documentation names: the module :mod:`kerashvd.runtime.config`.

The settings moved with the runtime; this name stays for scripts that read
``kerashvd.config.SETTINGS``. Importing it gives the very same module object.
"""

import sys

from .runtime import config as _config

sys.modules[__name__] = _config
