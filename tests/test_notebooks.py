"""Notebooks are tested code: each one in notebooks/ runs top to bottom in a fresh kernel.

They are stored without outputs (checked here too), and start their own MPI processes with
kerashvd.run, so the kernel itself stays a single process.
"""

import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO

NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb")))


@pytest.mark.mpi
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{os.path.basename(path)} is stored with outputs; clear them before committing")
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(path)}}).execute()
