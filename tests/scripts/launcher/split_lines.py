"""Every rank writes COUNT lines, each in two pieces: its text, a pause of 2 ms, its newline.

That is how print() writes with PYTHONUNBUFFERED=1, and what lets the lines of ranks writing
at once interleave unless something joins each line's pieces. No TensorFlow, no MPI.

Usage: ``python split_lines.py COUNT``.
"""

import os
import sys
import time

rank = int(os.environ["PMI_RANK"])
for i in range(int(sys.argv[1])):
    os.write(1, f"rank {rank} line {i} {'x' * 40}".encode())
    time.sleep(0.002)
    os.write(1, b"\n")
