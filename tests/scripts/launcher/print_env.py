"""Prints ``NAME=VALUE`` for the KERASHVD_* variables and the names given as arguments."""

import os
import sys

rank = os.environ.get("PMI_RANK")
names = sorted(n for n in os.environ if n.startswith("KERASHVD_")) + sys.argv[1:]
for name in names:
    print(f"rank{rank} {name}={os.environ.get(name)}", flush=True)
