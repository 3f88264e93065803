"""Runs ``kerashvdrun`` without importing TensorFlow, to keep the launcher tests fast.

``kerashvd/__init__.py`` imports TensorFlow; the launcher package does not need it. This
script registers an empty ``kerashvd`` package object whose path is the real one, so that
``kerashvd.launcher.cli`` imports alone. Usage: ``python kerashvdrun_light.py ARGS...``.
"""

import os
import sys
import types

_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "kerashvd")
_stub = types.ModuleType("kerashvd")
_stub.__path__ = [_PACKAGE]
sys.modules["kerashvd"] = _stub

from kerashvd.launcher.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
