"""Loads every checkpoint file in a directory and prints one JSON line (used by tests/multiprocess/test_failures.py).

Usage: ``python check_checkpoints.py CKPT_DIR``. Prints ``{"files": {name: iterations or
error}, "record": the kerashvd_checkpoint.json record}``. A single process (size 1).
"""

import json
import os
import sys

import kerashvd as hvd

hvd.init()
directory = sys.argv[1]
files = {}
for name in sorted(os.listdir(directory)):
    path = os.path.join(directory, name)
    if name == "kerashvd_checkpoint.json":
        continue
    try:
        files[name] = int(hvd.load_model(path).optimizer.iterations)
    except Exception as err:  # reported, so the test shows which file is broken
        files[name] = f"{type(err).__name__}: {err}"
with open(os.path.join(directory, "kerashvd_checkpoint.json")) as f:
    record = json.load(f)
print("CHECK " + json.dumps({"files": files, "record": record}), flush=True)
