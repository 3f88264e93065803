"""``python -m kerashvd.bench keras``: Keras training throughput with and without kerashvd.

One run measures, each in fresh processes and one after the other:
  plain   plain Keras, one process, no kerashvd
  hvd1    kerashvd with DistributedOptimizer, one process
  hvdN    kerashvd on N processes (default 2)
and prints images/second, the overhead of kerashvd at size 1 against plain Keras, and the
scaling efficiency (total images/second of N ranks over N times one rank's). The model is a
small ResNet-style CNN (``--model cnn``, the default) or Keras' ResNet-50 (``--model
resnet50``, 25.6 million weights, untrained) on synthetic ``--image-size`` square RGB images
(default 32), batch 64 per rank, one intra-op thread per rank.

Two baselines without kerashvd put the efficiency in context:
  side    N plain Keras processes side by side, never communicating: what the machine's
          cores, caches and memory bandwidth allow N processes at once;
  sync    N plain Keras processes under mpiexec that meet in an MPI barrier (mpi4py, waited
          for without spinning) after every step and exchange nothing: about what any
          synchronous data-parallel training can reach here, since every step then lasts as
          long as the slowest rank's.

Each round runs every configuration once; the figures are the best of the rounds, and the
ratios within each round (runs next to each other in time) are printed too, with their
median, since a machine's speed can drift between rounds. The output opens with the run's
'#' header (bench/header.py): date, host, CPUs, ranks and nodes, versions, command line.

tf.distribute, with ``--mwms``: the same model on Keras 2 (``tf_keras``, which
``MultiWorkerMirroredStrategy``'s ``fit`` needs; Keras 3's fails under it), in two more N-rank
configurations:
  tfk     kerashvd with DistributedOptimizer on tf_keras (``TF_USE_LEGACY_KERAS=1``)
  mwms    tf_keras under ``tf.distribute.MultiWorkerMirroredStrategy``, its ring
          collectives over gRPC, one worker per rank (the workers' addresses exchanged with
          mpi4py, then ``TF_CONFIG``); each worker trains on its own batch of the global one
and their ratio, kerashvd / MultiWorkerMirroredStrategy, per round.

Across nodes: ``--launcher "srun --mpi=pmi2 -N 2 --ntasks-per-node=2"`` starts the N-rank
runs (hvdN, sync, tfk, mwms) with that command instead of ``mpiexec -n N``, and ``--hierarchical off,on``
runs hvdN once per mode of the hierarchical collectives (KERASHVD_HIERARCHICAL_ALLREDUCE and
_ALLGATHER), each with its own scaling efficiency.

Engine settings side by side: ``--settings "KERASHVD_FUSION_THRESHOLD=1048576;KERASHVD_AUTOTUNE=1"``
runs hvdN once per variant (``;`` between variants, ``,`` between a variant's variables), e.g.
hand-picked settings against autotune; give ``--warmup`` at least the steps autotune takes, so
that the timed steps run with the settings it froze.
"""

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time

from . import header


def model(keras, widths=(16, 32, 64), size=32):
    """The benchmarks' ResNet-style CNN on `size` x `size` x 3 images: a stem convolution of
    ``widths[0]`` filters, then one residual block per width (the first at stride 1, the others
    at stride 2), global average pooling and a 10-way softmax."""
    def block(x, filters, stride):
        shortcut = x
        y = keras.layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
        y = keras.layers.BatchNormalization()(y)
        y = keras.layers.ReLU()(y)
        y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
        y = keras.layers.BatchNormalization()(y)
        if stride != 1 or shortcut.shape[-1] != filters:
            shortcut = keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False)(shortcut)
            shortcut = keras.layers.BatchNormalization()(shortcut)
        return keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))

    inputs = keras.Input((size, size, 3))
    x = keras.layers.Conv2D(widths[0], 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    for filters, stride in zip(widths, [1] + [2] * (len(widths) - 1)):
        x = block(x, filters, stride)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))


EMBEDDING_ROWS, EMBEDDING_WIDTH, TOKENS = 100_000, 64, 16


def build(keras, name, size):
    """The benchmark's model `name` for 10 classes: 'cnn' and 'resnet50' on `size` x `size` x
    3 images; 'embedding', one large embedding (EMBEDDING_ROWS x EMBEDDING_WIDTH, 25.6 MB of
    float32) of TOKENS ids a sample, averaged, under two dense layers."""
    if name == "resnet50":
        return keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=10)
    if name == "embedding":
        return keras.Sequential([
            keras.Input((TOKENS,), dtype="int32"),
            keras.layers.Embedding(EMBEDDING_ROWS, EMBEDDING_WIDTH),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10, activation="softmax")])
    return model(keras, size=size)


def inputs(rng, name, count, size):
    """`count` synthetic samples for the model `name` (see build)."""
    if name == "embedding":
        return rng.integers(0, EMBEDDING_ROWS, size=(count, TOKENS)).astype("int32")
    return rng.normal(size=(count, size, size, 3)).astype("float32")


def _mwms(tf, comm):
    """A MultiWorkerMirroredStrategy over the ranks of `comm`, one worker each: every rank
    takes a free port on its host, the ranks exchange their addresses, and TF_CONFIG names them
    (the strategy's gRPC server starts on that port)."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    host = socket.gethostbyname(socket.gethostname())
    workers = comm.allgather(f"{host}:{port}")
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                          "task": {"type": "worker", "index": comm.Get_rank()}})
    ring = tf.distribute.experimental.CommunicationImplementation.RING
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=ring))


def worker(mode, batch, steps, warmup, name="cnn", size=32, inter_op=1):
    """Runs one configuration in this process; prints a JSON line with images/second."""
    import contextlib

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        import tf_keras as keras
    else:
        import keras

    hvd = comm = strategy = None
    if mode in ("sync", "mwms"):
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    if mode == "mwms":
        strategy = _mwms(tf, comm)
    if mode == "hvd":
        import kerashvd as hvd

        hvd.init()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = inputs(rng, name, batch * 8, size)
    y = rng.integers(0, 10, size=batch * 8).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if strategy is not None:
        # fit() splits a global batch among the workers: each takes every N-th element of it.
        dataset = dataset.batch(batch * comm.Get_size(), drop_remainder=True).repeat()
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        dataset = dataset.with_options(options)
    else:
        dataset = dataset.batch(batch, drop_remainder=True).repeat()
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        net = build(keras, name, size)
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        callbacks = []
        if hvd is not None:
            optimizer = hvd.DistributedOptimizer(optimizer)
            callbacks.append(hvd.callbacks.BroadcastGlobalVariablesCallback(0))
        net.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            if mode == "sync":  # wait without spinning (a blocking MPI call busy-polls)
                request = comm.Ibarrier()
                while not request.Test():
                    time.sleep(50e-6)
            if step == warmup - 1:
                self.start = time.perf_counter()
            self.end = time.perf_counter()

    clock = Clock()
    net.fit(dataset, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=callbacks + [clock])
    rate = steps * batch / (clock.end - clock.start)
    size, rank = ((hvd.size(), hvd.rank()) if hvd else
                  (comm.Get_size(), comm.Get_rank()) if comm else (1, 0))
    # Where the ranks ran, and (kerashvd runs) rank 0's software, for the output's header.
    hosts = (hvd.allgather_object(socket.gethostname()) if hvd else
             comm.allgather(socket.gethostname()) if comm else [socket.gethostname()])
    if rank == 0:
        total = rate * size  # every rank processes its own batch each step
        result = {"mode": mode, "ranks": size, "images_per_second": total, "hosts": hosts,
                  "weights": net.count_params()}
        if hvd is not None:
            result["environment"] = header.environment()
        print(json.dumps(result), flush=True)


def _check(proc, cmd, err):
    """Raises, with the end of its stderr, when a run failed; its stderr is hidden otherwise
    (TensorFlow's startup notices of every process)."""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with code {proc.returncode}:\n{err[-3000:]}")


def _result(out):
    """The last JSON line a worker printed."""
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def _run(cmd, env=None, timeout=None):
    """Runs one configuration; returns its worker's result (see :func:`worker`)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else dict(os.environ, **env))
    except subprocess.TimeoutExpired as err:
        stderr = err.stderr.decode(errors="replace") if isinstance(err.stderr, bytes) else \
            err.stderr or ""
        raise RuntimeError(f"{' '.join(cmd)} did not end within {timeout} s:\n"
                           f"{stderr[-3000:]}") from None
    _check(proc, cmd, proc.stderr)
    return _result(proc.stdout)


def _run_side_by_side(cmd, n):
    """Runs n copies of cmd at once; returns their summed images/second."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    total = 0.0
    for proc in procs:
        out, err = proc.communicate()
        _check(proc, cmd, err)
        total += _result(out)["images_per_second"]
    return total


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m kerashvd.bench keras", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks for the scaled run (default 2)")
    p.add_argument("--batch", type=int, default=64, help="batch per rank (default 64)")
    p.add_argument("--steps", type=int, default=60, help="timed steps (default 60)")
    p.add_argument("--warmup", type=int, default=10, help="untimed first steps (default 10)")
    p.add_argument("--model", choices=["cnn", "resnet50", "embedding"], default="cnn",
                   help="the small ResNet-style CNN (default), Keras' ResNet-50, or one large "
                        "embedding (100,000 x 64) under two dense layers")
    p.add_argument("--image-size", type=int, default=32,
                   help="height and width of the synthetic images (default 32; ResNet-50 "
                        "needs at least 32)")
    p.add_argument("--inter-op", type=int, default=1,
                   help="TensorFlow inter-op threads per rank (default 1; 0: TensorFlow's "
                        "default, one per core). With 1, TensorFlow starts the gradient "
                        "buckets' collectives only after backprop")
    p.add_argument("--repeats", type=int, default=2,
                   help="rounds of runs of every configuration; best kept, and the ratios "
                        "within each round printed with their median")
    p.add_argument("--launcher", default=None,
                   help="command that starts the N-rank runs, followed by the worker's command "
                        "(default: 'mpiexec -n NP'; across nodes e.g. 'srun --mpi=pmi2 -N 2 "
                        "--ntasks-per-node=2')")
    p.add_argument("--hierarchical", default="",
                   help="run the N-rank kerashvd configuration once per hierarchical mode, "
                        "e.g. 'off,on' (default: once, with the environment's settings)")
    p.add_argument("--settings", default="",
                   help="run the N-rank kerashvd configuration once per variant of engine "
                        "variables: variants separated by ';', a variant's VAR=VALUE by ',', "
                        "e.g. 'KERASHVD_FUSION_THRESHOLD=0;KERASHVD_AUTOTUNE=1'")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds each run may take before it is stopped and the benchmark fails "
                        "(default: no limit)")
    p.add_argument("--no-baselines", action="store_true",
                   help="run kerashvd only (1 and N ranks: the scaling efficiency), without "
                        "the plain, side-by-side and barrier-only runs")
    p.add_argument("--mwms", action="store_true",
                   help="also run kerashvd and tf.distribute.MultiWorkerMirroredStrategy on "
                        "tf_keras on the N ranks (see above)")
    p.add_argument("--worker", choices=["plain", "hvd", "sync", "mwms"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.batch, args.steps, args.warmup, args.model, args.image_size,
               args.inter_op)
        return 0

    me = [sys.executable, "-m", "kerashvd.bench", "keras", "--batch", str(args.batch),
          "--steps", str(args.steps), "--warmup", str(args.warmup), "--model", args.model,
          "--image-size", str(args.image_size), "--inter-op", str(args.inter_op)]
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    launcher = shlex.split(args.launcher) if args.launcher else [mpiexec, "-n", str(args.np)]
    variants = _variants(args.hierarchical, args.settings)
    modes = [label for label, _ in variants]
    many = [f"hvd{args.np}"] if not modes else [f"hvd{args.np}.{m}" for m in modes]
    configs = {} if args.no_baselines else {"plain": me + ["--worker", "plain"]}
    configs["hvd1"] = me + ["--worker", "hvd"]
    envs = {}
    for name, (_, env) in zip(many, variants or [(None, None)]):
        configs[name] = launcher + me + ["--worker", "hvd"]
        if env:
            envs[name] = env
    if not args.no_baselines:
        configs["sync"] = launcher + me + ["--worker", "sync"]
    if args.mwms:
        legacy = {"TF_USE_LEGACY_KERAS": "1"}
        configs["tfk"] = launcher + me + ["--worker", "hvd"]
        configs["mwms"] = launcher + me + ["--worker", "mwms"]
        envs["tfk"], envs["mwms"] = legacy, legacy
    # Same TensorFlow allocator for every configuration (kerashvd turns TF's pooling CPU
    # allocator on by default; plain Keras must get it too for a fair comparison).
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    best, rounds = {}, []
    started = header.now()
    for _ in range(args.repeats):  # interleaved, so slow drift of the machine hits all alike
        results = {name: _run(cmd, envs.get(name), args.timeout) for name, cmd in configs.items()}
        rates = {name: r["images_per_second"] for name, r in results.items()}
        # The machine's own limit: N plain processes side by side, with no communication,
        # compete only for cores, caches and memory bandwidth.
        if not args.no_baselines:
            rates["side"] = _run_side_by_side(configs["plain"], args.np)
        rounds.append(rates)
        for name, rate in rates.items():
            best[name] = max(best.get(name, 0.0), rate)
    one = best["hvd1"]
    what = {"resnet50": "ResNet-50", "embedding": "embedding model"}.get(args.model,
                                                                           "ResNet-style CNN")
    data = (f"{TOKENS} ids a sample" if args.model == "embedding" else
            f"{args.image_size}x{args.image_size}x3")
    print(f"# Keras {what} ({results['hvd1']['weights']:,} weights), "
          f"{data}, batch {args.batch}/rank, "
          f"1 intra-op thread/rank, {args.inter_op or 'default'} inter-op thread(s)/rank, "
          f"best of {args.repeats}")
    command = [sys.executable, "-m", "kerashvd.bench", "keras"] + \
        (sys.argv[2:] if argv is None else list(argv))
    print("\n".join(header.lines(results["hvd1"]["environment"], command, f"1 and {args.np}",
                                 results[many[0]]["hosts"], started)))
    print(f"# {args.np}-rank runs started with: {' '.join(launcher)}")
    if args.no_baselines:
        print(f"kerashvd, 1 rank            {one:9.1f} images/s")
    else:
        plain = best["plain"]
        print(f"plain Keras, 1 process      {plain:9.1f} images/s")
        print(f"kerashvd, 1 rank            {one:9.1f} images/s   overhead "
              f"{100 * (1 - one / plain):5.1f}%")
    for name, mode in zip(many, modes or [None]):
        label = f"kerashvd, {args.np} ranks" + (f", {mode}" if mode else "")
        print(f"{label:<28}{best[name]:9.1f} images/s   scaling efficiency "
              f"{100 * best[name] / (args.np * one):5.1f}%")
    if not args.no_baselines:
        _print_baselines(args.np, best, plain, many, modes)
    if args.mwms:
        print(f"tf_keras, kerashvd, {args.np} ranks {best['tfk']:9.1f} images/s")
        print(f"tf_keras, MultiWorkerMirroredStrategy, {args.np} workers {best['mwms']:9.1f} "
              f"images/s; kerashvd reaches {best['tfk'] / best['mwms']:.2f}x of it")
    # The same ratios within each round, whose runs were next to each other in time: a
    # machine whose speed drifts between rounds biases the best-of figures above, not these.
    ratios = {}
    if not args.no_baselines:
        ratios["overhead at 1 rank"] = [100 * (1 - r["hvd1"] / r["plain"]) for r in rounds]
    for name, mode in zip(many, modes or [None]):
        suffix = f" ({mode})" if mode else ""
        ratios["scaling efficiency" + suffix] = [100 * r[name] / (args.np * r["hvd1"])
                                                 for r in rounds]
        if not args.no_baselines:
            ratios["kerashvd / barrier-only" + suffix] = [100 * r[name] / r["sync"]
                                                          for r in rounds]
    if args.mwms:
        ratios["kerashvd / MultiWorkerMirroredStrategy (tf_keras)"] = [
            100 * r["tfk"] / r["mwms"] for r in rounds]
    for label, values in ratios.items():
        print(f"per round, {label}: " + " / ".join(f"{v:.1f}%" for v in values)
              + f" (median {statistics.median(values):.1f}%)")
    return 0


def _variants(hierarchical, settings):
    """The N-rank runs' (label, environment) pairs of --hierarchical and --settings."""
    variants = []
    for mode in (m.strip() for m in hierarchical.split(",")):
        if mode:
            variants.append((f"hierarchical {mode}", {"KERASHVD_HIERARCHICAL_ALLREDUCE": mode,
                                                      "KERASHVD_HIERARCHICAL_ALLGATHER": mode}))
    for variant in (v.strip() for v in settings.split(";")):
        if not variant:
            continue
        pairs = [item.split("=", 1) for item in variant.split(",")]
        if any(len(pair) != 2 or not pair[0].strip() for pair in pairs):
            raise SystemExit(f"--settings: expected VAR=VALUE[,VAR=VALUE...] in each variant; "
                             f"received: {variant!r}")
        variants.append((variant, {k.strip(): v.strip() for k, v in pairs}))
    return variants


def _print_baselines(ranks, best, plain, many, modes):
    """The lines of the side-by-side and barrier-only runs (see the module docstring)."""
    print(f"plain Keras, {ranks} processes side by side, no communication: "
          f"{best['side']:9.1f} images/s = {100 * best['side'] / (ranks * plain):5.1f}% of "
          f"{ranks}x one process (the machine's own limit)")
    print(f"plain Keras, {ranks} processes meeting in an MPI barrier after every step, no "
          f"data exchanged: {best['sync']:9.1f} images/s = {100 * best['sync'] / (ranks * plain):5.1f}% "
          f"of {ranks}x one process (synchronous training without its communication); kerashvd "
          f"reaches " + ", ".join(f"{100 * best[name] / best['sync']:5.1f}%" for name in many)
          + " of it" + (f" ({', '.join(modes)})" if modes else ""))


if __name__ == "__main__":
    sys.exit(main())
