"""A rank that waits for SLURM's walltime warning (the sbatch templates' ``--signal=USR1@120``)
and exits 75 as the recipes do after saving, so the template requeues the job; in the requeued
run (``SLURM_RESTART_COUNT`` set) it reports and ends. Prints one line per event."""

import os
import signal
import sys
import time

rank, restarts = os.environ.get("PMI_RANK", "?"), int(os.environ.get("SLURM_RESTART_COUNT", "0"))
if restarts:
    print(f"rank {rank}: requeued run {restarts}", flush=True)
    sys.exit(0)
received = []
signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(time.monotonic()))
start = time.monotonic()
print(f"rank {rank}: waiting for SIGUSR1", flush=True)
while not received and time.monotonic() - start < float(sys.argv[1]):
    time.sleep(0.1)
if not received:
    print(f"rank {rank}: no SIGUSR1 within {sys.argv[1]} s", flush=True)
    sys.exit(1)
print(f"rank {rank}: SIGUSR1 {received[0] - start:.0f} s after the start", flush=True)
sys.exit(75)
