"""A rank that records its pid, then sleeps, or (on one rank) exits with a given code.

Usage: ``python ranks.py PID_DIR [FAIL_RANK CODE]``. Every rank writes ``PID_DIR/RANK.pid``.
``FAIL_RANK`` waits until every rank has written its pid (so the others are surely running)
and exits with ``CODE``; the other ranks sleep for 60 s. No TensorFlow, no MPI.
"""

import os
import sys
import time

pid_dir = sys.argv[1]
rank = int(os.environ["PMI_RANK"])
size = int(os.environ["PMI_SIZE"])
with open(os.path.join(pid_dir, f"{rank}.pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(pid_dir, f"{rank}.pid.tmp"), os.path.join(pid_dir, f"{rank}.pid"))
print(f"rank {rank} started", flush=True)
if len(sys.argv) > 3 and rank == int(sys.argv[2]):
    deadline = time.time() + 30
    while len([n for n in os.listdir(pid_dir) if n.endswith(".pid")]) < size:
        if time.time() > deadline:
            break
        time.sleep(0.05)
    sys.exit(int(sys.argv[3]))
time.sleep(60)
print(f"rank {rank} was not stopped", flush=True)
