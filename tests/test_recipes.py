"""Recipes are tested code: each runs its tiny mode on 2 processes through kerashvdrun."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO


def kerashvdrun():
    return os.path.join(os.path.dirname(sys.executable), "kerashvdrun")


@pytest.mark.mpi
def test_quickstart_trains_on_two_ranks():
    cmd = [kerashvdrun(), "-np", "2", sys.executable, os.path.join(REPO, "recipes", "quickstart.py"), "--tiny"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    match = re.search(r"ranks=2 final val_accuracy=([0-9.]+)", output)
    assert match, output[-5000:]
    assert float(match.group(1)) > 0.8, output[-3000:]
