"""``python -m kerashvd.bench overlap``: how much of the gradients' reduction hides behind backprop.

Every rank trains the same ResNet-style CNN (``keras_bench.model``; widths 32/64/128 and batch
32 per rank by default) with ``train_on_batch`` on a fixed synthetic batch, in these
configurations, each timed step by step:

  compute only     a plain optimizer: no collective at all (each rank's own step; the
                   slowest rank's median counts, since a synchronous step waits for it)
  allreduce only   one grouped allreduce of tensors shaped as the gradients, alone in a
                   tf.function: the communication without the compute
  default          ``DistributedOptimizer(opt)``: gradient buckets (``bucket_cap_mb``,
                   default KERASHVD_BUCKET_CAP_MB or 1 MiB), each reduced while backprop
                   computes the others
  one collective   ``bucket_cap_mb=0``: all gradients in one collective, after backprop
  num_groups=8     Horovod's grouping (8 groups in layer order)
  cap=X            ``bucket_cap_mb=X``, for each X of ``--caps``

Each cycle runs one step of every configuration in turn, each step starting with all ranks
together (a barrier), so that the steps compared are seconds apart: on a machine shared with
other work, whose speed changes from one second to the next, ratios of neighbouring steps are
what can be compared. A step's time is the slowest rank's. It prints each configuration's
median step and quartiles over the cycles, and the ratio of the default step (and of the
others) to max(compute only, allreduce only) in the same cycle, as median and quartiles: 1.0
means the communication is fully hidden, (compute + allreduce) / max means none of it is, and
the load average says how busy the machine was. Last, one
default step as the timeline records it on rank 0 (``kerashvd.start_timeline``): for each
bucket, when it was submitted (its gradients existed), when every rank had submitted it, and
when it was reduced, in ms from the step's start.

Run it under a launcher (``kerashvdrun -np 2``; across nodes ``srun -N 2
--ntasks-per-node=1``); started alone it relaunches itself with ``kerashvdrun -np NP``.
tests/integration/multinode_bench.py runs it on the 2-node test cluster with shaped links
(``--parts overlap``).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from . import header
from ..runtime import bucket_cap
from ..training.optimizer.buckets import plan_buckets
from .keras_bench import model as resnet_cnn


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m kerashvd.bench overlap", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks to start when not under MPI (default 2)")
    p.add_argument("--widths", default="32,64,128", help="the CNN's widths (default 32,64,128)")
    p.add_argument("--batch", type=int, default=32, help="batch per rank (default 32)")
    p.add_argument("--cycles", type=int, default=30,
                   help="timed cycles, each one step of every configuration (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per configuration first")
    p.add_argument("--caps", default="", help="more bucket caps to compare, in MiB, e.g. 0.25,4")
    p.add_argument("--inter-op", type=int, default=0,
                   help="TF inter-op threads per rank (default 0: TensorFlow's choice, one per "
                        "core); with 1, TensorFlow computes the weight gradients of a branch only "
                        "after the rest of backprop, which leaves little to overlap")
    p.add_argument("--intra-op", type=int, default=1, help="TF intra-op threads per rank (default 1)")
    return p.parse_args(argv)


def _configurations(hvd, caps):
    """[(label, optimizer wrapper or None)] in the order each round runs them."""
    configs = [("compute only", None), ("allreduce only", None),
               ("default", lambda opt: hvd.DistributedOptimizer(opt, name="bench.default")),
               ("one collective", lambda opt: hvd.DistributedOptimizer(
                   opt, bucket_cap_mb=0, name="bench.one")),
               ("num_groups=8", lambda opt: hvd.DistributedOptimizer(
                   opt, num_groups=8, name="bench.groups"))]
    for cap in caps:
        configs.append((f"cap={cap:g}", lambda opt, cap=cap: hvd.DistributedOptimizer(
            opt, bucket_cap_mb=cap, name=f"bench.cap{cap:g}")))
    return configs


def _steppers(hvd, tf, keras, args, x, y):
    """{label: a function running one timed step}, and the default model."""
    widths = [int(w) for w in args.widths.split(",")]
    steppers, default = {}, None
    for label, wrap in _configurations(hvd, [float(c) for c in args.caps.split(",") if c]):
        keras.utils.set_random_seed(0)
        net = resnet_cnn(keras, widths)
        if label == "allreduce only":
            shapes = [tf.zeros(v.shape, v.dtype) for v in net.trainable_variables]

            @tf.function
            def reduce_all(tensors=shapes):
                return hvd.grouped_allreduce(tensors, name="bench.allreduce_only")

            steppers[label] = reduce_all
            continue
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        net.compile(optimizer=wrap(optimizer) if wrap else optimizer,
                    loss="sparse_categorical_crossentropy")
        steppers[label] = lambda net=net: net.train_on_batch(x, y)
        if label == "default":
            default = net
    return steppers, default


def _timed(step):
    start = time.perf_counter()
    step()
    return 1000 * (time.perf_counter() - start)


def _quartiles(values):
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return q1, median, q3


def _timeline_step(hvd, step, path):
    """Runs three default steps with the timeline on; returns the last step's buckets as
    [(key, tensors, KiB, submitted, ready, start, end)] in ms from the step's start, and its
    end, from rank 0's file (the others return None)."""
    before = time.monotonic()
    hvd.start_timeline(path)
    origin = (before + time.monotonic()) / 2  # the engine's steady clock is CLOCK_MONOTONIC
    marks = []
    for _ in range(3):
        marks.append(time.monotonic())
        step()
    marks.append(time.monotonic())
    time.sleep(0.3)  # the timeline's writer appends every 100 ms
    hvd.stop_timeline()
    if hvd.rank() != 0:
        return None
    with open(path) as f:
        events = json.load(f)
    begin, end = (1e6 * (m - origin) for m in marks[-2:])
    # `origin` is only known to within start_timeline's own time (up to a millisecond on a busy
    # machine), so the last step's phases are told from the step before it by their order,
    # not by `end`: each submission (NEGOTIATE) of a collective starts its row again, and
    # nothing is submitted after the last step.
    rows = {}
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        key = e.get("args", {}).get("tensor")
        if e.get("ph") != "X" or key is None or e["ts"] < begin - 2e3:
            continue
        row = rows.setdefault(key, {})
        if e["name"] == "NEGOTIATE":
            row.clear()
        row[e["name"]] = (e["ts"] - begin, e["ts"] + e["dur"] - begin)
    table = []
    for key, phases in rows.items():
        if "NEGOTIATE" not in phases or "ALLREDUCE" not in phases:
            continue
        finish = max(span[1] for span in phases.values())
        table.append((key, phases["NEGOTIATE"][0] / 1e3, phases["NEGOTIATE"][1] / 1e3,
                      phases["ALLREDUCE"][0] / 1e3, finish / 1e3))
    return sorted(table, key=lambda row: row[1]), (end - begin) / 1e3


def run(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    load_start = os.getloadavg()
    started = header.now()
    import numpy as np
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # each configuration's model traces its own step
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    import keras

    import kerashvd as hvd

    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(args.batch, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=args.batch).astype("int32")
    steppers, default = _steppers(hvd, tf, keras, args, x, y)
    for step in steppers.values():
        for _ in range(args.warmup):
            step()
    mine = []  # per cycle: {label: this rank's step in ms}
    for _ in range(args.cycles):
        cycle = {}
        for label, step in steppers.items():
            hvd.barrier()
            cycle[label] = _timed(step)
        mine.append(cycle)
    every = hvd.allgather_object(mine, name="bench.overlap.times")
    cycles = [{label: max(rank[c][label] for rank in every) for label in steppers}
              for c in range(args.cycles)]
    path = os.path.join(tempfile.gettempdir(), f"kerashvd-overlap-{os.getpid()}.json")
    hvd.barrier()
    timeline = _timeline_step(hvd, steppers["default"], hvd.broadcast_object(path))
    hosts = hvd.allgather_object(os.uname().nodename)
    if hvd.rank() == 0:
        os.remove(path)
        _report(args, cycles, timeline, default, tf, hosts, started,
                (load_start, os.getloadavg()))


def _report(args, cycles, timeline, net, tf, hosts, started, load):
    command = [sys.executable, "-m", "kerashvd.bench", "overlap"] + list(args.argv)
    sizes = [v.shape.num_elements() * tf.as_dtype(v.dtype).size for v in net.trainable_variables]
    buckets, end = timeline
    print(f"# Gradient reduction behind backprop: ResNet-style CNN, widths {args.widths}, "
          f"32x32x3, batch {args.batch}/rank; {sum(sizes) / 2**20:.2f} MiB of gradients in "
          f"{len(sizes)} tensors; TF threads: inter-op {args.inter_op or 'default'}, intra-op "
          f"{args.intra_op}; default: {len(buckets)} buckets of at most "
          f"{bucket_cap.cap_bytes() / 2**20:g} MiB")
    print("\n".join(header.lines(header.environment(), command, len(hosts), hosts, started)))
    print("# load average (1/5/15 min) at start: {:.1f} {:.1f} {:.1f}; at end: "
          "{:.1f} {:.1f} {:.1f}".format(*load[0], *load[1]))
    print(f"# {args.cycles} cycles, each one step of every configuration in turn; ms per step "
          "(the slowest rank's)")
    print(f"{'configuration':<18}{'median':>9}{'quartiles':>20}")
    for label in cycles[0]:
        q1, median, q3 = _quartiles([c[label] for c in cycles])
        print(f"{label:<18}{median:9.1f}{q1:12.1f} - {q3:6.1f}")
    print("step / max(compute only, allreduce only) in the same cycle, median (quartiles):")
    ratios = {label: [c[label] / max(c["compute only"], c["allreduce only"]) for c in cycles]
              for label in cycles[0] if label not in ("compute only", "allreduce only")}
    ratios["(compute + allreduce)"] = [(c["compute only"] + c["allreduce only"]) /
                                       max(c["compute only"], c["allreduce only"])
                                       for c in cycles]
    for label, values in ratios.items():
        q1, median, q3 = _quartiles(values)
        print(f"  {label:<22}{median:6.2f} ({q1:.2f} - {q3:.2f})")
    plan = plan_buckets(list(range(len(sizes))), sizes, ["float32"] * len(sizes),
                        bucket_cap.cap_bytes())
    print("One default step on rank 0 (ms from its start; submitted: this rank's gradients "
          "existed; ready: every rank's had):")
    print(f"{'collective':<34}{'tensors':>8}{'KiB':>8}{'submitted':>10}{'ready':>8}"
          f"{'reduced':>18}")
    for key, submitted, ready, start, finish in buckets:
        members = plan[int(key.split(".bucket")[1].split(".")[0])]
        print(f"{key:<34}{len(members):8d}{sum(sizes[i] for i in members) / 1024:8.1f}"
              f"{submitted:10.1f}{ready:8.1f}{start:9.1f} - {finish:6.1f}")
    compute = statistics.median(c["compute only"] for c in cycles)
    print(f"{'step ends':<34}{'':16}{end:10.1f}   (compute-only step: median {compute:.1f})")


def main(argv=None):
    argv = sys.argv[2:] if argv is None else list(argv)
    args = _parse(argv)
    args.argv = argv
    from .__main__ import relaunch

    status = relaunch(["overlap", *argv], args.np)
    if status is not None:
        return status
    run(args)
    return 0
