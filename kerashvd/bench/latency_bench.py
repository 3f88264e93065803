"""``python -m kerashvd.bench latency``: where a small allreduce's time goes, phase by phase.

Every rank runs ``--depth`` allreduces of ``--size`` bytes (float32 Sum) chained inside one
tf.function, each reducing the previous one's result, ``--calls`` times, with a timeline per
rank (``kerashvd.start_timeline("...{rank}...")``), and reads back from it, per allreduce, the
engine's phases:

  to cycle     submitted -> start of the negotiation cycle that found it ready everywhere
               (the engine thread's wake-up, a cycle already running, cycles that found a
               peer not ready yet)
  negotiate    that cycle's negotiation: the control plane's round trip(s), including the
               wait for the last rank to submit
  queue        ready -> its group starts (fusion planning)
  collective   the data collective (ALLREDUCE, with any fusion-buffer copies)
  complete     collective done -> its op's callback into TensorFlow returned
  to next      collective done -> the next allreduce of the chain submitted (the callback,
               then TensorFlow's own time between two ops; overlaps 'complete')

each as the mean and the median over the allreduces (the means add up to the time per
allreduce, the medians show the typical one), and per negotiation cycle with work pending the
control plane's polls, naps and time napped (the wait policy at work). Next to them, in the
same run: the time per allreduce of the chain with the timeline off (the figure to compare),
raw MPI's blocking allreduce of the same bytes (mpi4py ``Allreduce``), and raw MPI's
non-blocking bitwise-AND allreduce of 3 words completed with ``Wait`` (what one negotiation
round trip costs MPI alone). Run it across nodes inside ``srun -N 2`` (tests/multinode_bench.py
``--parts latency``); started alone it relaunches itself with ``kerashvdrun -np NP``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from . import header

# Engine phases read from each tensor's row, in the order they happen (kerashvd/timeline).
PHASES = ["LAST_CYCLE", "QUEUE", "ALLREDUCE", "COMPLETE"]


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m kerashvd.bench latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks to start when not under MPI (default 2)")
    p.add_argument("--size", default="4K", help="bytes per allreduce (K/M suffixes; default 4K)")
    p.add_argument("--depth", type=int, default=20, help="allreduces chained per call (default 20)")
    p.add_argument("--calls", type=int, default=30,
                   help="calls of the chain per round (default 30)")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds, each timing every measure in turn; medians are reported "
                        "(default 5)")
    return p.parse_args(argv)


def _bytes(text):
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * scale)


def phase_medians(events, prefix):
    """Medians (us) of each engine phase over the allreduces whose tensor names start with
    `prefix`, plus 'to cycle' and 'to next' (see the module docstring), from one rank's
    timeline events. Returns ({phase: (mean, median)}, number of allreduces)."""
    rows = {}
    for e in events:
        tensor = e.get("args", {}).get("tensor", "")
        if e.get("ph") == "X" and tensor.startswith(prefix):
            rows.setdefault(tensor, {})
            # One call of the chain after another: keep each call's phases apart by start time.
            rows[tensor].setdefault(e["name"], []).append((e["ts"], e["dur"]))
    samples = {name: [] for name in ["to cycle"] + PHASES + ["to next"]}
    count = 0
    names = sorted(rows, key=lambda t: int(t.rsplit(".", 1)[1]))
    for i, tensor in enumerate(names):
        phases = rows[tensor]
        for k, (ts, dur) in enumerate(phases.get("NEGOTIATE", [])):
            last = phases.get("LAST_CYCLE", [])
            if k < len(last):
                samples["to cycle"].append(last[k][0] - ts)
            count += 1
        for name in PHASES:
            samples[name].extend(dur for _, dur in phases.get(name, []))
        # The next allreduce of the chain is submitted once this one's op completed.
        if i + 1 < len(names):
            nexts = rows[names[i + 1]].get("NEGOTIATE", [])
            for (ts, dur), (next_ts, _) in zip(phases.get("COMPLETE", []), nexts):
                samples["to next"].append(next_ts - ts)
    nan = float("nan")
    return {k: (statistics.fmean(v), statistics.median(v)) if v else (nan, nan)
            for k, v in samples.items()}, count


def wait_stats(events):
    """(cycles, median polls, median naps, median us napped) over the NEGOTIATION events."""
    cycles = [e["args"] for e in events if e.get("name") == "NEGOTIATION"]
    if not cycles:
        return 0, 0, 0, 0
    med = lambda key: statistics.median(c[key] for c in cycles)  # noqa: E731
    return len(cycles), med("polls"), med("naps"), med("napped_us")


def run(args):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import kerashvd as hvd
    from mpi4py import MPI

    hvd.init()
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    nbytes, depth = _bytes(args.size), args.depth
    prefix = f"bench.latency.{nbytes}."
    x = tf.constant(np.ones(nbytes // 4, np.float32))

    @tf.function
    def chain(t):
        for i in range(depth):
            t = hvd.allreduce(t, op=hvd.Sum, name=f"{prefix}{i}")
        return t

    def timed(fn, calls):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return comm.allreduce(time.perf_counter() - start, op=MPI.MAX) / calls

    floor = tf.function(lambda t: t * 1.0)  # the call without its allreduces
    for _ in range(5):
        chain(x)
        floor(x)
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    words = np.zeros(3, np.uint64)
    folder = tempfile.mkdtemp(prefix="kerashvd-latency-") if rank == 0 else None
    folder = comm.bcast(folder)
    path = os.path.join(folder, "timeline.{rank}.json")
    # Each round times every measure in turn, so that the machine's drift hits them alike.
    rounds = {"chain": [], "mpi": [], "band": [], "traced": [], "floor": []}
    for i in range(args.rounds):
        rounds["chain"].append(timed(lambda: chain(x), args.calls) / depth)
        rounds["floor"].append(timed(lambda: floor(x), args.calls))
        rounds["mpi"].append(timed(lambda: comm.Allreduce(a, b), args.calls * depth))
        rounds["band"].append(timed(
            lambda: comm.Iallreduce(MPI.IN_PLACE, words, op=MPI.BAND).Wait(), args.calls * depth))
        if i == args.rounds // 2:  # one round's allreduces go into the timeline
            hvd.start_timeline(path)
            rounds["traced"].append(timed(lambda: chain(x), args.calls) / depth)
            hvd.stop_timeline()
    t_chain, t_mpi, t_band, t_traced, t_floor = (
        statistics.median(rounds[k]) for k in ("chain", "mpi", "band", "traced", "floor"))
    with open(path.replace("{rank}", str(rank))) as f:
        events = json.load(f)
    medians, count = phase_medians(events, prefix)
    waits = wait_stats(events)
    rows = comm.gather((medians, count, waits, os.uname().nodename), root=0)
    comm.Barrier()
    if rank == 0:
        hosts = [r[3] for r in rows]
        print("\n".join(header.lines(header.environment(),
                                     [sys.executable, "-m", "kerashvd.bench", "latency"] +
                                     sys.argv[2:], n, hosts)))
        print(f"# {depth} allreduces of {nbytes} B chained in one tf.function, {args.calls} "
              f"calls a round, median of {args.rounds} rounds: {t_chain * 1e6:.1f} us per "
              f"allreduce (timeline off); one round with the timeline on: {t_traced * 1e6:.1f} us; "
              f"a call of the same tf.function shape without allreduces: {t_floor * 1e6:.1f} us")
        print(f"# raw MPI: Allreduce of {nbytes} B {t_mpi * 1e6:.1f} us; Iallreduce BAND of 3 "
              f"words + Wait {t_band * 1e6:.1f} us; kerashvd / raw MPI = {t_chain / t_mpi:.2f}")
        print("# engine phases per allreduce (us; mean, then median), from each rank's timeline "
              "(cycles: negotiations with work pending; polls, naps, napped: their medians):")
        names = ["to cycle"] + [p.lower().replace("last_cycle", "negotiate") for p in PHASES] + \
            ["to next"]
        print(f"# {'rank':>4} {'node':<10} {'':>6} " + " ".join(f"{h:>10}" for h in names) +
              f" {'allreduces':>10} {'cycles':>7} {'polls':>6} {'naps':>5} {'napped':>7}")
        keys = ["to cycle"] + PHASES + ["to next"]
        for r, (medians, count, (cycles, polls, naps, napped), host) in enumerate(rows):
            for j, stat in enumerate(("mean", "median")):
                tail = (f" {count:>10} {cycles:>7} {polls:>6.0f} {naps:>5.0f} {napped:>7.0f}"
                        if j == 0 else "")
                print(f"  {r:>4} {host:<10} {stat:>6} " +
                      " ".join(f"{medians[k][j]:>10.1f}" for k in keys) + tail)
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
    hvd.shutdown()


def main(argv):
    args = _parse(argv)
    if not any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                                         "PMIX_RANK")) and args.np > 1:
        cmd = [sys.executable, "-m", "kerashvd.launcher.cli", "-np", str(args.np),
               sys.executable, "-m", "kerashvd.bench", "latency"] + list(argv)
        return subprocess.call(cmd)
    run(args)
    return 0
