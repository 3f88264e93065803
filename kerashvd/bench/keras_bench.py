"""``python -m kerashvd.bench keras``: Keras training throughput with and without kerashvd.

One run measures, each in fresh processes and one after the other:
  plain   plain Keras, one process, no kerashvd
  hvd1    kerashvd with DistributedOptimizer, one process
  hvdN    kerashvd on N processes (default 2)
and prints images/second, the overhead of kerashvd at size 1 against plain Keras, and the
scaling efficiency (total images/second of N ranks over N times one rank's). The model is a
small ResNet-style CNN on synthetic 32x32x3 data, batch 64 per rank, one intra-op thread per
rank.

Two baselines without kerashvd put the efficiency in context:
  side    N plain Keras processes side by side, never communicating: what the machine's
          cores, caches and memory bandwidth allow N processes at once;
  sync    N plain Keras processes under mpiexec that meet in an MPI barrier (mpi4py, waited
          for without spinning) after every step and exchange nothing: about what any
          synchronous data-parallel training can reach here, since every step then lasts as
          long as the slowest rank's.

Each round runs every configuration once; the figures are the best of the rounds, and the
ratios within each round (runs next to each other in time) are printed too, with their
median, since this machine's speed drifts between rounds.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _model(keras):
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

    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    for filters, stride in [(16, 1), (32, 2), (64, 2)]:
        x = block(x, filters, stride)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))


def worker(mode, batch, steps, warmup):
    """Runs one configuration in this process; prints a JSON line with images/second."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras

    hvd = comm = None
    if mode == "sync":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    if mode == "hvd":
        import kerashvd as hvd

        hvd.init()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch * 8, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=batch * 8).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).repeat()
    model = _model(keras)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    callbacks = []
    if hvd is not None:
        optimizer = hvd.DistributedOptimizer(optimizer)
        callbacks.append(hvd.callbacks.BroadcastGlobalVariablesCallback(0))
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            if comm is not None:  # wait without spinning (a blocking MPI call busy-polls)
                request = comm.Ibarrier()
                while not request.Test():
                    time.sleep(50e-6)
            if step == warmup - 1:
                self.start = time.perf_counter()
            self.end = time.perf_counter()

    clock = Clock()
    model.fit(dataset, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=callbacks + [clock])
    rate = steps * batch / (clock.end - clock.start)
    size, rank = ((hvd.size(), hvd.rank()) if hvd else
                  (comm.Get_size(), comm.Get_rank()) if comm else (1, 0))
    if rank == 0:
        total = rate * size  # every rank processes its own batch each step
        print(json.dumps({"mode": mode, "ranks": size, "images_per_second": total}), flush=True)


def _check(proc, cmd, err):
    """Raises, with the end of its stderr, when a run failed; its stderr is hidden otherwise
    (TensorFlow's startup notices of every process)."""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with code {proc.returncode}:\n{err[-3000:]}")


def _result(out):
    """The last JSON line a worker printed."""
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def _run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
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
    p.add_argument("--repeats", type=int, default=2,
                   help="rounds of runs of every configuration; best kept, and the ratios "
                        "within each round printed with their median")
    p.add_argument("--worker", choices=["plain", "hvd", "sync"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker, args.batch, args.steps, args.warmup)
        return 0

    me = [sys.executable, "-m", "kerashvd.bench", "keras", "--batch", str(args.batch),
          "--steps", str(args.steps), "--warmup", str(args.warmup)]
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    configs = {
        "plain": me + ["--worker", "plain"],
        "hvd1": me + ["--worker", "hvd"],
        f"hvd{args.np}": [mpiexec, "-n", str(args.np)] + me + ["--worker", "hvd"],
        "sync": [mpiexec, "-n", str(args.np)] + me + ["--worker", "sync"],
    }
    # Same TensorFlow allocator for every configuration (kerashvd turns TF's pooling CPU
    # allocator on by default; plain Keras must get it too for a fair comparison).
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    best, rounds = {}, []
    for _ in range(args.repeats):  # interleaved, so slow drift of the machine hits all alike
        rates = {name: _run(cmd)["images_per_second"] for name, cmd in configs.items()}
        # The machine's own limit: N plain processes side by side, with no communication,
        # compete only for cores, caches and memory bandwidth.
        rates["side"] = _run_side_by_side(configs["plain"], args.np)
        rounds.append(rates)
        for name, rate in rates.items():
            best[name] = max(best.get(name, 0.0), rate)
    plain, one, many = best["plain"], best["hvd1"], best[f"hvd{args.np}"]
    print(f"# Keras ResNet-style CNN, 32x32x3, batch {args.batch}/rank, 1 intra-op thread/rank, "
          f"best of {args.repeats}")
    print(f"# command: python -m kerashvd.bench keras {' '.join(argv or sys.argv[2:])}; "
          f"TF_CPU_ALLOCATOR_USE_BFC={os.environ['TF_CPU_ALLOCATOR_USE_BFC']}")
    print(f"plain Keras, 1 process      {plain:9.1f} images/s")
    print(f"kerashvd, 1 rank            {one:9.1f} images/s   overhead {100 * (1 - one / plain):5.1f}%")
    print(f"kerashvd, {args.np} ranks           {many:9.1f} images/s   scaling efficiency "
          f"{100 * many / (args.np * one):5.1f}%")
    print(f"plain Keras, {args.np} processes side by side, no communication: "
          f"{best['side']:9.1f} images/s = {100 * best['side'] / (args.np * plain):5.1f}% of "
          f"{args.np}x one process (the machine's own limit)")
    print(f"plain Keras, {args.np} processes meeting in an MPI barrier after every step, no "
          f"data exchanged: {best['sync']:9.1f} images/s = {100 * best['sync'] / (args.np * plain):5.1f}% "
          f"of {args.np}x one process (synchronous training without its communication); kerashvd "
          f"reaches {100 * many / best['sync']:5.1f}% of it")
    # The same ratios within each round, whose runs were next to each other in time: a
    # machine whose speed drifts between rounds biases the best-of figures above, not these.
    ratios = {
        "overhead at 1 rank": [100 * (1 - r["hvd1"] / r["plain"]) for r in rounds],
        "scaling efficiency": [100 * r[f"hvd{args.np}"] / (args.np * r["hvd1"]) for r in rounds],
        "kerashvd / barrier-only": [100 * r[f"hvd{args.np}"] / r["sync"] for r in rounds],
    }
    for label, values in ratios.items():
        print(f"per round, {label}: " + " / ".join(f"{v:.1f}%" for v in values)
              + f" (median {statistics.median(values):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
