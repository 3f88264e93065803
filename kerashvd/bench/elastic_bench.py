"""``python -m kerashvd.bench elastic``: what elastic commits cost a training step.

Started without a launcher, it runs itself under ``kerashvdrun --min-np N --max-np N`` (the
elastic mode, so every commit includes its host check: one broadcast), and each rank trains
inside ``hvd.elastic.run``. For each model, the configurations take turns over several rounds
(``fit`` of ``--steps`` batches each; the order rotates from round to round), so that the
machine's drift does not bias them:

  none     no commit
  every    ``CommitStateCallback(state)``: a commit after every batch
  every10  ``CommitStateCallback(state, batches_per_commit=10)``

Reported per model (rank 0): its parameters and the MiB a commit keeps (model and optimizer
variables), the time of ``state.commit()`` itself (median of 20, between barriers: the
snapshot and the host check's broadcast; the copy of the variables that the snapshot defers
is paid by the next step), the median step time of each configuration (median over rounds of
each round's median step), the commit's cost per step against ``none`` in the same rounds, and
the time to serialize a commit for hand-over (what a survivor sends kerashvdrun). Models: ``mnist`` (the
MNIST recipe's convnet, Adam) and ``resnet50`` (Keras' ResNet-50, random weights, SGD with
momentum, on 64x64 inputs: the commit's size is that of the 224x224 model, the step shorter).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

from . import header

MODELS = ("mnist", "resnet50")
CONFIGS = (("none", None), ("every", 1), ("every10", 10))


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m kerashvd.bench elastic", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " +
                   ", ".join(MODELS))
    p.add_argument("--steps", type=int, default=20, help="batches per fit (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--batch", type=int, default=32, help="batch per rank (default 32)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _model(name, keras, hvd):
    if name == "mnist":
        model = keras.Sequential([
            keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(),
            keras.layers.Dropout(0.25), keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"), keras.layers.Dropout(0.5),
            keras.layers.Dense(10, activation="softmax")])
        optimizer, shape = keras.optimizers.Adam(0.001), (28, 28, 1)
    else:
        model = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
        optimizer, shape = keras.optimizers.SGD(0.01, momentum=0.9), (64, 64, 3)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer),
                  loss="sparse_categorical_crossentropy")
    return model, shape


def _worker(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    import kerashvd as hvd
    from kerashvd.training.keras_compat import keras

    hvd.init()
    hosts = hvd.allgather_object(socket.gethostname())
    if hvd.rank() == 0:  # for the output's header
        print(json.dumps({"environment": header.environment(), "hosts": hosts}), flush=True)

    class StepTimes(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

        def on_train_begin(self, logs=None):
            self.ends = [time.perf_counter()]

    for name in args.models.split(","):
        model, shape = _model(name, keras, hvd)
        rng = np.random.default_rng(hvd.rank())
        x = rng.random((args.batch, *shape), dtype=np.float32)
        data = tf.data.Dataset.from_tensors((x, rng.integers(0, 10, args.batch))).repeat()
        model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)  # build, trace, warm up
        state = hvd.elastic.KerasState(model, epoch=0, batch=0)
        medians = {config: [] for config, _ in CONFIGS}

        @hvd.elastic.run
        def measure(state):
            timer = StepTimes()
            for round_ in range(args.rounds):
                for config, every in CONFIGS[round_ % 3:] + CONFIGS[:round_ % 3]:
                    callbacks = [timer] + ([hvd.elastic.CommitStateCallback(state, every)]
                                           if every else [])
                    model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0,
                              callbacks=callbacks)
                    steps = np.diff(timer.ends)[2:]  # the first steps of a fit start it up
                    medians[config].append(float(np.median(steps)))

        measure(state)
        commits = []
        for _ in range(20):
            hvd.barrier()
            started = time.perf_counter()
            state.commit()
            commits.append(time.perf_counter() - started)
        started = time.perf_counter()
        number, make_bytes = state._handover()
        size = len(make_bytes())
        serialize = time.perf_counter() - started
        if hvd.rank() == 0:
            print(json.dumps({
                "model": name, "params": int(model.count_params()),
                "commit_mib": sum(np.asarray(t).nbytes for t in
                                  state._saved_model + state._saved_optimizer) / 2**20,
                "handover_mib": size / 2**20, "serialize_s": serialize,
                "commit_ms": 1e3 * statistics.median(commits),
                "step_ms": {c: 1e3 * statistics.median(v) for c, v in medians.items()},
                "ratios": {c: statistics.median(a / b for a, b in zip(v, medians["none"]))
                           for c, v in medians.items()}}), flush=True)


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.worker:
        return _worker(args)
    kerashvdrun = os.path.join(os.path.dirname(sys.executable), "kerashvdrun")
    cmd = [kerashvdrun, "--min-np", str(args.np), "--max-np", str(args.np),
           "-x", "OMP_NUM_THREADS=1", sys.executable, "-m", "kerashvd.bench", "elastic",
           "--worker", "--models", args.models, "--steps", str(args.steps),
           "--rounds", str(args.rounds), "--batch", str(args.batch)]
    started = header.now()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    rows = [line for line in lines if "model" in line]
    if proc.returncode != 0 or not rows:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        return proc.returncode or 1
    run = next(line for line in lines if "environment" in line)
    command = [sys.executable, "-m", "kerashvd.bench", "elastic"] + \
        (sys.argv[2:] if argv is None else list(argv))
    print("\n".join(header.lines(run["environment"], command, args.np, run["hosts"], started)))
    print(f"# ranks started with: {' '.join(cmd)}")
    print(f"# {args.np} ranks, batch {args.batch}/rank, {args.steps} steps x {args.rounds} "
          "rounds; step = median ms; cost = (step / step without commits) - 1, median of "
          "the rounds")
    print(f"{'model':>9} {'params':>10} {'MiB':>6} {'commit ms':>9} {'none':>8} {'every':>8} "
          f"{'cost':>7} {'every10':>8} {'cost':>7} {'serialize s':>11}")
    for r in rows:
        s, q = r["step_ms"], r["ratios"]
        print(f"{r['model']:>9} {r['params']:>10} {r['commit_mib']:>6.1f} "
              f"{r['commit_ms']:>9.2f} {s['none']:>8.1f} {s['every']:>8.1f} "
              f"{q['every'] - 1:>+7.1%} {s['every10']:>8.1f} {q['every10'] - 1:>+7.1%} "
              f"{r['serialize_s']:>11.3f}")
    return 0
