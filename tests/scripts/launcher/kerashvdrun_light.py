"""Runs the checkout's ``kerashvdrun``, as the installed ``kerashvdrun`` script does.

The repository root goes first on ``sys.path`` (as for ``python -m pytest`` run there), so
the launcher is this checkout's; ``kerashvd`` finds the compiled files of the installed build
itself (``kerashvd/__init__.py``). ``import kerashvd`` imports nothing heavy (no TensorFlow,
no Keras) and the launcher loads only the small compiled engine module for its settings
table, so this starts as fast as the real command. Usage: ``python kerashvdrun_light.py
ARGS...``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

from kerashvd.launcher.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
