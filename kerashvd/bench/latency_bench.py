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
  carried      an allreduce carried in the negotiation's own message (CARRIED: its result
               written out; the collective then has no phase of its own)
  complete     collective done -> its op's callback into TensorFlow returned
  to next      collective done -> the next allreduce of the chain submitted (the callback,
               then TensorFlow's own time between two ops; overlaps 'complete')

each as the mean and the median over the allreduces (the means add up to the time per
allreduce, the medians show the typical one), and per negotiation cycle with work pending the
control plane's polls, naps and time napped (the wait policy at work). Next to them, in the
same run: the time per allreduce of the chain with the timeline off (the figure to compare),
raw MPI's blocking allreduce of the same bytes (mpi4py ``Allreduce``), and raw MPI's
non-blocking bitwise-AND allreduce of 3 words completed with ``Wait`` (what one negotiation
round trip costs MPI alone). ``--linger 0,0.05`` measures the chain with each
KERASHVD_LINGER_TIME in turn, every round, side by side, and ``--carry 0,16384`` with each
KERASHVD_CARRY_BYTES (0: every allreduce negotiated, then run; the default: carried). Run it across nodes inside ``srun -N
2`` (tests/integration/multinode_bench.py ``--parts latency``); started alone it relaunches
itself with ``kerashvdrun -np NP``.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from . import header
from .allreduce_bench import _bytes

# Engine phases read from each tensor's row, in the order they happen (kerashvd/timeline).
PHASES = ["LAST_CYCLE", "QUEUE", "ALLREDUCE", "CARRIED", "COMPLETE"]


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m kerashvd.bench latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2,
                   help="ranks to start when not under MPI (default 2)")
    p.add_argument("--size", default="4K", help="bytes per allreduce (K/M suffixes; default 4K)")
    p.add_argument("--depth", type=int, default=20, help="allreduces chained per call (default 20)")
    p.add_argument("--calls", type=int, default=30,
                   help="calls of the chain per round (default 30)")
    p.add_argument("--linger", default="",
                   help="KERASHVD_LINGER_TIME values (ms) to compare side by side, e.g. "
                        "0,0.05: kerashvd is initialized with each in turn in every round "
                        "(default: the environment's setting only)")
    p.add_argument("--carry", default="",
                   help="KERASHVD_CARRY_BYTES values to compare side by side, e.g. 0,16384 "
                        "(each with every --linger value; default: the environment's setting "
                        "only)")
    p.add_argument("--keep", default="",
                   help="a folder to keep the timelines in (timeline.<rank>.json), for a look "
                        "at single allreduces; default: discarded")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds, each timing every measure in turn; medians are reported "
                        "(default 5)")
    return p.parse_args(argv)


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

    lingers = [float(v) for v in args.linger.split(",")] if args.linger else [None]
    carries = [int(v) for v in args.carry.split(",")] if args.carry else [None]
    # Each variant: (the settings' label, init()'s keywords).
    variants = []
    for linger in lingers:
        for carry in carries:
            kwargs, label = {}, ""
            if linger is not None:
                kwargs["linger_ms"] = linger
                label += f"KERASHVD_LINGER_TIME={linger:g} "
            if carry is not None:
                kwargs["carry_bytes"] = carry
                label += f"KERASHVD_CARRY_BYTES={carry} "
            variants.append((label.strip().replace(" ", ", ") + ": " if label else "", kwargs))

    def init(kwargs):
        hvd.init(**kwargs)

    init(variants[0][1])
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
    folder = (args.keep or tempfile.mkdtemp(prefix="kerashvd-latency-")) if rank == 0 else None
    folder = comm.bcast(folder)
    path = os.path.join(folder, "timeline.{rank}.json")
    # Each round times every measure in turn (and kerashvd with each variant), so
    # that the machine's drift hits them alike.
    rounds = {"mpi": [], "band": [], "floor": []}
    traced = {}
    for i in range(args.rounds):
        for j, (_, kwargs) in enumerate(variants):
            if len(variants) > 1:
                hvd.shutdown()
                init(kwargs)
                for _ in range(3):
                    chain(x)
            rounds.setdefault(("chain", j), []).append(timed(lambda: chain(x), args.calls) / depth)
            if i == args.rounds // 2:  # one round's allreduces go into the timeline
                hvd.start_timeline(path.replace("timeline.", f"timeline.{j}."))
                traced[j] = timed(lambda: chain(x), args.calls) / depth
                hvd.stop_timeline()
        rounds["floor"].append(timed(lambda: floor(x), args.calls))
        rounds["mpi"].append(timed(lambda: comm.Allreduce(a, b), args.calls * depth))
        rounds["band"].append(timed(
            lambda: comm.Iallreduce(MPI.IN_PLACE, words, op=MPI.BAND).Wait(), args.calls * depth))
    t_mpi, t_band, t_floor = (statistics.median(rounds[k]) for k in ("mpi", "band", "floor"))
    results = []
    for j in range(len(variants)):
        with open(path.replace("timeline.", f"timeline.{j}.").replace("{rank}", str(rank))) as f:
            events = json.load(f)
        medians, count = phase_medians(events, prefix)
        results.append((statistics.median(rounds[("chain", j)]), traced[j], medians, count,
                        wait_stats(events)))
    rows = comm.gather((results, os.uname().nodename), root=0)
    comm.Barrier()
    if rank == 0:
        hosts = [r[1] for r in rows]
        print("\n".join(header.lines(header.environment(),
                                     [sys.executable, "-m", "kerashvd.bench", "latency"] +
                                     sys.argv[2:], n, hosts)))
        print(f"# raw MPI: Allreduce of {nbytes} B {t_mpi * 1e6:.1f} us; Iallreduce BAND of 3 "
              f"words + Wait {t_band * 1e6:.1f} us; a call of a tf.function without "
              f"allreduces: {t_floor * 1e6:.1f} us (medians of {args.rounds} rounds)")
        for j, (setting, _) in enumerate(variants):
            t_chain, t_traced = rows[0][0][j][0], rows[0][0][j][1]
            print(f"# {setting}{depth} allreduces of {nbytes} B chained in one tf.function, "
                  f"{args.calls} calls a round: {t_chain * 1e6:.1f} us per allreduce (median "
                  f"of {args.rounds} rounds, timeline off; one round with the timeline on: "
                  f"{t_traced * 1e6:.1f} us); kerashvd / raw MPI = {t_chain / t_mpi:.2f}")
            print("# engine phases per allreduce (us; mean, then median), from each rank's "
                  "timeline (cycles: negotiations with work pending; polls, naps, napped: "
                  "their medians):")
            names = ["to cycle"] + [p.lower().replace("last_cycle", "negotiate")
                                    for p in PHASES] + ["to next"]
            print(f"# {'rank':>4} {'node':<10} {'':>6} " + " ".join(f"{h:>10}" for h in names) +
                  f" {'allreduces':>10} {'cycles':>7} {'polls':>6} {'naps':>5} {'napped':>7}")
            keys = ["to cycle"] + PHASES + ["to next"]
            for r, (results, host) in enumerate(rows):
                _, _, medians, count, (cycles, polls, naps, napped) = results[j]
                for k, stat in enumerate(("mean", "median")):
                    tail = (f" {count:>10} {cycles:>7} {polls:>6.0f} {naps:>5.0f} {napped:>7.0f}"
                            if k == 0 else "")
                    print(f"  {r:>4} {host:<10} {stat:>6} " +
                          " ".join(f"{medians[key][k]:>10.1f}" for key in keys) + tail)
        if not args.keep:
            import shutil
            shutil.rmtree(folder, ignore_errors=True)
    hvd.shutdown()


def main(argv):
    from .__main__ import bench_main

    return bench_main("latency", _parse, run, argv)
