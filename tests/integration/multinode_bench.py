"""``python -m kerashvd.bench`` across nodes with shaped links, as one command.

    sudo python tests/integration/multinode_bench.py [--rates 1gbit] [--parts allreduce,keras]
        [--layouts 2x1,2x2,2x2-cyclic,3x2,3x2-cyclic] [--passes 1]
        [--allreduce-args "--sizes 64K,256K,1M,4M,16M,64M"] [--keras-args "--repeats 2"]
    sudo python tests/integration/multinode_bench.py --rates 200mbit,50mbit --parts overlap
        [--overlap-args "--cycles 40 --caps 0.25,4"]

Starts the test cluster of tests/fixtures/multinode_cluster.py (3 nodes when a layout needs them, else
2; root and the SLURM packages needed), and for each rate limits both directions of every
node's link with a token bucket (``tc qdisc ... tbf rate R``: on the node's eth0, what it
sends, and on the bridge's end of its veth, what it receives; ``none``: no limit), then runs,
each in one SLURM job:

- ``allreduce``, for each layout of ``--layouts`` (``NxL``: N nodes x L ranks, ranks in blocks,
  SLURM's default; ``NxL-cyclic``: ``--distribution=cyclic``, rank r on node r mod N), the
  list ``--passes`` times so that the layouts alternate through the run: ``srun -N N -n N*L
  python -m kerashvd.bench --hierarchical off,on,auto ...``: allreduce through kerashvd flat,
  node by node and as auto chooses, next to raw MPI of the same bytes, with the bytes each
  node sends across its link per allreduce, the 4 KiB latency and the 100 x 16 KiB step,
  measured in turn in one run;
- ``keras``, for each layout of ``--keras-layouts`` (default ``2x2``): ``python -m
  kerashvd.bench keras --np N*L --launcher "srun ... -N N -n N*L" --hierarchical ...``: Keras
  training scaling across the nodes against plain Keras in one process (the 1-process runs go
  where this script runs), and with ``--keras-args --mwms`` against tf.distribute's
  MultiWorkerMirroredStrategy on tf_keras across the same nodes;
- ``compression-allreduce``, for each layout of ``--compression-layouts``: ``srun ... python -m
  kerashvd.bench compression``: a float32 allreduce with each compression of
  ``--compressions``, its time, the bytes each node sends across its link and the error, next
  to raw MPI;
- ``compression``: the MNIST recipe (``recipes/mnist.py``) with each gradient compression of
  ``--compressions`` (``--compression none|fp16|bf16``), at each layout of
  ``--compression-layouts``, the compressions in turn ``--passes`` times, on a tfds ``mnist``
  directory of generated digits (tests/fixtures/datasets/mnist_tfds.py: 60000 training and 10000 test
  images unless ``--mnist-images`` says otherwise): each run's images/s (last epoch), the
  step time it gives and the final validation accuracy.
- ``latency``, for each layout of ``--layouts``: ``srun ... python -m kerashvd.bench latency``:
  a chain of 4 KiB allreduces in one tf.function, each engine phase's share of an allreduce
  read from every rank's timeline, next to raw MPI's allreduce and negotiation round trip;
- ``overlap``: ``srun -N 2 --ntasks-per-node=1 python -m kerashvd.bench overlap ...``: at 2
  nodes x 1 rank (the cores are not shared by two ranks of a node), the Keras step with the
  default gradient buckets next to compute only, allreduce only and one collective.

Prints each table under a header naming the rate and layout, and the machine's load average
before each job. Only a delay cannot be added: this machine's kernel has neither ``netem`` nor
``fq`` (tc says "Specified qdisc kind is unknown"), so the links keep the veth's own latency,
which the 4 KiB rows show. Everything runs on this one machine's cores: read the ratios
measured side by side, not the absolute figures.
"""

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/

from fixtures import multinode_cluster  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRUN = ["srun", "--mpi=pmi2", "--kill-on-bad-exit=1"]


def layout_options(layout):
    """srun's options for a layout 'NxL' (ranks in blocks) or 'NxL-cyclic'."""
    shape, _, placement = layout.partition("-")
    nodes, per_node = (int(v) for v in shape.split("x"))
    if placement not in ("", "cyclic"):
        raise ValueError(f"layout {layout!r}: expected NxL or NxL-cyclic")
    distribution = "cyclic" if placement else "block"
    return ["-N", str(nodes), "-n", str(nodes * per_node), f"--distribution={distribution}"]


def cluster_size(layouts):
    """Nodes the cluster needs for `layouts` (at least 2)."""
    return max([2] + [int(layout.split("x")[0]) for layout in layouts])
ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
# The lines of the overlap benchmark's tables (besides '#' and 'per round' lines).
OVERLAP_LINE = re.compile(r"(configuration|compute only|allreduce only|default|one collective|"
                          r"num_groups|cap=|step |One default step|collective|\S+\.bucket)")


def shape(cluster, rate, burst):
    """Limits every node's link to `rate` in both directions ('none': removes the limit)."""
    for node, veth in zip(cluster.nodes, cluster.veths):
        for prefix, dev in ((["ip", "netns", "exec", node], "eth0"), ([], veth)):
            if rate == "none":
                subprocess.run(prefix + ["tc", "qdisc", "del", "dev", dev, "root"],
                               capture_output=True, timeout=30)  # absent already: fine
                continue
            subprocess.run(prefix + ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                                     rate, "burst", burst, "latency", "10ms"],
                           check=True, capture_output=True, text=True, timeout=30)


def run_part(cluster, argv, what, timeout):
    """Runs `argv` against the cluster (a start that fails in MPI's start-up is tried again,
    as in the tests); prints its output; returns whether it succeeded."""
    def launch():
        return multinode_cluster.run_job(cluster, argv, env=ENV, timeout=timeout, cwd=REPO)

    ok, output = multinode_cluster.retry_start(launch, what)
    if ok:  # the tables, without the ranks' stderr (TensorFlow's notices)
        output = "".join(line for line in output.splitlines(keepends=True)
                         if line.startswith(("#", " ", "kerashvd", "plain", "per round", "tf_keras"))
                         or OVERLAP_LINE.match(line))
    print(output if ok else f"{what} failed:\n{output[-5000:]}", flush=True)
    return ok


def run(cluster, args):
    """Measures every rate of `args` (parsed by :func:`parser`) on a running cluster; leaves
    its links unlimited. Returns the number of parts that failed."""
    parts = args.parts.split(",")
    layouts = args.layouts.split(",")
    python = sys.executable
    failed = 0
    try:
        for rate in args.rates.split(","):
            shape(cluster, rate, args.burst)
            links = "no limit" if rate == "none" else rate + " each way (tc tbf)"
            if "allreduce" in parts:
                for layout in layouts * args.passes:
                    options = layout_options(layout)
                    print(f"## links: {links}; layout {layout}: srun {' '.join(options)} "
                          f"({', '.join(cluster.nodes[:int(options[1])])}); load average "
                          f"{os.getloadavg()[0]:.2f} before the job", flush=True)
                    failed += not run_part(
                        cluster, [*SRUN, *options, python, "-m", "kerashvd.bench",
                                  "--hierarchical", args.hierarchical,
                                  *shlex.split(args.allreduce_args)],
                        f"allreduce bench at {rate}, {layout}", args.timeout)
            if "latency" in parts:
                for layout in layouts * args.passes:
                    options = layout_options(layout)
                    print(f"## links: {links}; layout {layout}: srun {' '.join(options)}; load "
                          f"average {os.getloadavg()[0]:.2f} before the job", flush=True)
                    failed += not run_part(
                        cluster, [*SRUN, *options, python, "-m", "kerashvd.bench", "latency",
                                  *shlex.split(args.latency_args)],
                        f"latency bench at {rate}, {layout}", args.timeout)
            if "overlap" in parts:
                print(f"## links: {links}; 2 nodes x 1 rank ({', '.join(cluster.nodes[:2])})",
                      flush=True)
                failed += not run_part(
                    cluster, [*SRUN, "-N", "2",
                              "--ntasks-per-node=1", python, "-m", "kerashvd.bench", "overlap",
                              *shlex.split(args.overlap_args)], f"overlap bench at {rate}",
                    args.timeout)
            if "compression-allreduce" in parts:
                for layout in args.compression_layouts.split(",") * args.passes:
                    options = layout_options(layout)
                    print(f"## links: {links}; layout {layout}: srun {' '.join(options)}; load "
                          f"average {os.getloadavg()[0]:.2f} before the job", flush=True)
                    failed += not run_part(
                        cluster, [*SRUN, *options, python, "-m", "kerashvd.bench",
                                  "compression", "--compressions", args.compressions,
                                  *shlex.split(args.compression_args)],
                        f"compression bench at {rate}, {layout}", args.timeout)
            if "compression" in parts:
                failed += run_compression(cluster, args, links)
            if "keras" in parts:
                for layout in args.keras_layouts.split(","):
                    options = layout_options(layout)
                    print(f"## links: {links}; layout {layout}: Keras training, srun "
                          f"{' '.join(options)}; load average {os.getloadavg()[0]:.2f} before "
                          f"the job", flush=True)
                    launcher = " ".join([*SRUN, *options])
                    failed += not run_part(
                        cluster, [python, "-m", "kerashvd.bench", "keras", "--np", options[3],
                                  "--launcher", launcher, "--hierarchical",
                                  args.keras_hierarchical, "--timeout", str(args.timeout),
                                  *shlex.split(args.keras_args)],
                        f"keras bench at {rate}, {layout}", args.timeout * 12)
    finally:
        shape(cluster, "none", args.burst)
    return failed


def run_compression(cluster, args, links):
    """The MNIST recipe with each compression at each layout (see the module docstring);
    prints one table per layout. Returns the number of runs that failed."""
    import tempfile

    from fixtures.datasets.mnist_tfds import write_mnist

    train, test = (int(v) for v in args.mnist_images.split(","))
    data = tempfile.mkdtemp(prefix="khvd-mnist-")
    os.chmod(data, 0o755)
    write_mnist(data, train, test)
    failed = 0
    results = {}  # (layout, compression) -> [(images/s, val_accuracy), ...]
    compressions = args.compressions.split(",")
    layouts = args.compression_layouts.split(",")
    recipe = os.path.join(REPO, "recipes", "mnist.py")
    for _ in range(args.passes):
        for layout in layouts:
            for compression in compressions:
                options = layout_options(layout)
                print(f"## links: {links}; MNIST recipe, layout {layout}, --compression "
                      f"{compression}; load average {os.getloadavg()[0]:.2f} before the job",
                      flush=True)
                ok, output = multinode_cluster.retry_start(lambda: multinode_cluster.run_job(
                    cluster, [*SRUN, *options, sys.executable, recipe, "--data-dir", data,
                              "--compression", compression, *shlex.split(args.mnist_args)],
                    env=ENV, timeout=args.timeout, cwd=REPO), f"mnist {layout} {compression}")
                rate = re.findall(r"Epoch \d+: ([0-9.]+) images/s in total", output)
                accuracy = re.search(r"final val_accuracy=([0-9.]+)", output)
                val_loss = re.findall(r"val_loss: ([0-9.]+(?:e[-+]?\d+)?)", output)  # 4.9e-04
                if not ok or not rate or not accuracy or not val_loss:
                    print(f"failed:\n{output[-5000:]}", flush=True)
                    failed += 1
                    continue
                results.setdefault((layout, compression), []).append(
                    (float(rate[-1]), float(accuracy.group(1)), float(val_loss[-1])))
    for layout in layouts:
        nodes, per_node = (int(v) for v in layout.split("-")[0].split("x"))
        batch = re.search(r"--batch-size[ =](\d+)", args.mnist_args)
        global_batch = int(batch.group(1) if batch else 64) * nodes * per_node
        print(f"# MNIST recipe at {layout} ({links}), {' '.join(args.mnist_args.split())}; "
              f"medians of {args.passes} run(s); step = global batch {global_batch} / images/s")
        print(f"# {'compression':>11} {'images/s':>9} {'step(ms)':>9} {'vs none':>8} "
              f"{'val_accuracy, val_loss of each run':>36}")
        base = None
        for compression in compressions:
            runs = results.get((layout, compression))
            if not runs:
                continue
            rate = statistics.median(r[0] for r in runs)
            step = global_batch / rate * 1e3
            base = step if compression == "none" else base
            print(f"  {compression:>11} {rate:>9.1f} {step:>9.1f} "
                  f"{(step / base if base else float('nan')):>8.2f} "
                  f"{' '.join(f'{r[1]:.4f}, {r[2]:.2e}' for r in runs):>36}", flush=True)
    shutil.rmtree(data, ignore_errors=True)
    return failed


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1gbit",
                   help="link rates to measure, in tc's units, 'none' for no limit "
                        "(default 1gbit)")
    p.add_argument("--burst", default="256kb", help="tbf bucket size (default 256kb)")
    p.add_argument("--parts", default="allreduce,keras",
                   help="allreduce, latency, keras, overlap, compression-allreduce, "
                        "compression, or several separated by commas (default allreduce,keras)")
    p.add_argument("--layouts", default="2x1,2x2,2x2-cyclic,3x2,3x2-cyclic",
                   help="the allreduce part's layouts: NxL (N nodes x L ranks, in blocks) or "
                        "NxL-cyclic (default 2x1,2x2,2x2-cyclic,3x2,3x2-cyclic)")
    p.add_argument("--passes", type=int, default=1,
                   help="times the layouts are measured, in turn (default 1)")
    p.add_argument("--hierarchical", default="off,on,auto",
                   help="modes the allreduce part compares (default off,on,auto)")
    p.add_argument("--keras-hierarchical", default="off,on",
                   help="modes the keras part compares (default off,on)")
    p.add_argument("--allreduce-args", default="--sizes 64K,256K,1M,4M,16M,64M",
                   help="more arguments of python -m kerashvd.bench")
    p.add_argument("--keras-layouts", default="2x2",
                   help="the keras part's layouts, as --layouts (default 2x2)")
    p.add_argument("--keras-args", default="", help="more arguments of python -m kerashvd.bench keras")
    p.add_argument("--compressions", default="none,fp16,bf16",
                   help="the compression parts' compressions (default none,fp16,bf16)")
    p.add_argument("--compression-layouts", default="2x1,2x2",
                   help="the compression parts' layouts (default 2x1,2x2)")
    p.add_argument("--compression-args", default="",
                   help="more arguments of python -m kerashvd.bench compression")
    p.add_argument("--mnist-images", default="60000,10000",
                   help="training and test images of the generated mnist (default 60000,10000)")
    p.add_argument("--mnist-args", default="--epochs 3 --warmup-epochs 1",
                   help="more arguments of recipes/mnist.py (default --epochs 3 "
                        "--warmup-epochs 1)")
    p.add_argument("--latency-args", default="",
                   help="more arguments of python -m kerashvd.bench latency")
    p.add_argument("--overlap-args", default="",
                   help="more arguments of python -m kerashvd.bench overlap")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds a job may take before it counts as hung in MPI's start and is "
                        "started again (default 900; the Keras runs get it each)")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    parts = args.parts.split(",")
    layouts = (args.layouts.split(",") if {"allreduce", "latency"} & set(parts) else []) + \
        (args.compression_layouts.split(",")
         if {"compression", "compression-allreduce"} & set(parts) else []) + \
        (args.keras_layouts.split(",") if "keras" in parts else [])
    for layout in layouts:
        layout_options(layout)  # a bad layout fails here, before the cluster starts
    cluster_gen = multinode_cluster._cluster(cluster_size(layouts))
    try:
        cluster = next(cluster_gen)
    except BaseException as err:  # pytest.skip outside pytest: say why and stop
        if type(err).__name__ == "Skipped":
            print(f"cannot start the test cluster: {err}", file=sys.stderr)
            return 2
        raise
    try:
        failed = run(cluster, args)
    finally:
        next(cluster_gen, None)  # tears the cluster down; raises if it did not stop cleanly
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
