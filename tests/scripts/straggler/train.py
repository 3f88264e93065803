"""One rank of the straggler tests: trains with StragglerReportCallback and slows itself.

``python train.py [options]`` under mpiexec or srun. Every rank spends ``--input-seconds``
before each step (sleeping: its input); from epoch ``--slow-from`` on (1-based),
``--slow-rank`` sleeps ``--slow-seconds`` more, and
the processes on host ``--limit-host`` join the CPU-limited cgroup ``--limit-cgroup`` (a slow
node). After training, with ``--engine-cgroup``, rank ``--slow-rank`` moves only its engine
thread (``khvd-lane0``) into that CPU-limited cgroup and every rank runs grouped float16
allreduces, prescaled (the engine scales them one element at a time on that thread before it
starts the transfer, which is vectorized): a rank that is slow to communicate. Rank 0 prints one JSON line per report: {"epoch" (or "engine"),
"late": [[rank, host], ...], "comm": [...], "nodes": [...], "text": str(report)}.
"""

import argparse
import glob
import json
import os
import socket
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--input-seconds", type=float, default=0.02)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-seconds", type=float, default=0.2)
    p.add_argument("--slow-from", type=int, default=3)
    p.add_argument("--limit-host", default="")
    p.add_argument("--limit-cgroup", default="")
    p.add_argument("--engine-cgroup", default="")
    p.add_argument("--engine-steps", type=int, default=12)
    return p.parse_args()


def join_cgroup(cgroup, ids, file):
    """Moves the processes or threads ``ids`` into ``cgroup`` (its ``file``: cgroup.procs or
    tasks, cgroup v1 or v2 alike)."""
    for i in ids:
        with open(os.path.join(cgroup, file), "w") as f:
            f.write(str(i))


def engine_thread():
    for task in glob.glob("/proc/self/task/*"):
        with open(os.path.join(task, "comm")) as f:
            if f.read().strip() == "khvd-lane0":
                return int(os.path.basename(task))
    raise RuntimeError("no khvd-lane0 thread in this process")


def emit(hvd, key, report):
    if hvd.rank() == 0:
        numbers = "\n".join(
            f"    rank {r.rank}: late {r.late_collectives} {r.late_seconds:.3f} s, comm "
            f"{r.comm_collectives} {r.comm_seconds:.3f} s, median wait "
            f"{r.median_wait_seconds:.4f} s, transfer {r.transfer_seconds:.3f} s"
            for r in report.ranks)
        line = {key[0]: key[1], "text": f"{report}\n{numbers}", "nodes": list(report.nodes),
                "late": [[r.rank, r.host] for r in report.late_to_submit],
                "comm": [[r.rank, r.host] for r in report.slow_to_communicate]}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


def main():
    args = parse()
    import numpy as np
    import tensorflow as tf

    import kerashvd as hvd
    from kerashvd.training.keras_compat import keras

    hvd.init()
    epoch = {"now": 0}
    slow_here = hvd.rank() == args.slow_rank
    limited = args.limit_cgroup and socket.gethostname() == args.limit_host

    # Input in the step's own thread: every rank starts its step right after the previous
    # one's allreduce (a free-running input thread would keep its own phase on each rank).
    class Slowdown(keras.callbacks.Callback):
        def on_epoch_begin(self, index, logs=None):
            epoch["now"] = index + 1
            if limited and epoch["now"] == args.slow_from:
                join_cgroup(args.limit_cgroup, [os.getpid()], "cgroup.procs")

        def on_train_batch_begin(self, batch, logs=None):
            time.sleep(args.input_seconds)
            if slow_here and epoch["now"] >= args.slow_from:
                time.sleep(args.slow_seconds)

    rng = np.random.RandomState(hvd.rank())
    x = rng.uniform(-1, 1, (16 * args.steps, 32)).astype("float32")
    y = x.sum(axis=1, keepdims=True)

    class Emit(keras.callbacks.Callback):
        def __init__(self, reports):
            super().__init__()
            self.reports = reports

        def on_epoch_end(self, index, logs=None):
            emit(hvd, ("epoch", index + 1), self.reports.reports[-1])

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    reports = hvd.callbacks.StragglerReportCallback(verbose=0)
    model.fit(x, y, batch_size=16, epochs=args.epochs, verbose=0, shuffle=False,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), Slowdown(), reports,
                         Emit(reports)])
    if limited:  # back to full speed for the rest (the cgroup's parent: where it came from)
        join_cgroup(os.path.dirname(args.limit_cgroup), [os.getpid()], "cgroup.procs")

    if args.engine_cgroup:
        tensors = [tf.cast(tf.random.uniform([256 * 1024]), tf.float16) for _ in range(8)]
        hvd.barrier()
        if slow_here:
            join_cgroup(args.engine_cgroup, [engine_thread()], "tasks")
        hvd.straggler_report()
        for _ in range(args.engine_steps):
            # Scaled before the transfer, on the engine thread (its entry lag).
            hvd.grouped_allreduce(tensors, prescale_factor=0.5, name="engine_phase")
        report = hvd.straggler_report()
        if slow_here:
            join_cgroup(os.path.dirname(args.engine_cgroup), [engine_thread()], "tasks")
        emit(hvd, ("engine", True), report)
    hvd.barrier()


if __name__ == "__main__":
    main()
