"""Autotune of the gradient buckets' cap: tried online during the first steps, then frozen.

With autotune on (``hvd.init(autotune=True)``, ``KERASHVD_AUTOTUNE=1``, ``kerashvdrun
--autotune``) and the optimizer's buckets left to their default (no ``bucket_cap_mb``, no
``KERASHVD_BUCKET_CAP_MB``, no ``num_groups``/``groups``), the cap is tuned as the engine tunes
its fusion threshold (ops/core/autotune.h): rank 0 measures, every rank applies rank 0's
choice at the same step, the trials are logged, and the results do not change.

The cap is part of the traced step: which gradients share a collective is decided when the
step is traced. So the step is traced once with the bucket plan of every candidate cap, each
plan a branch of one ``tf.switch_case`` on an index that every rank holds alike. TensorFlow
lowers the switch into per-tensor switches, so each bucket of the chosen plan still starts as
soon as its gradients exist, and the branches not taken run nothing. Every plan sums every
element in rank order, so every plan gives the same bits (buckets.py): the trial steps update
the weights exactly as an untuned run does.

The protocol, inside the traced step, after the chosen plan's collectives:
1. Each call of the step (an optimizer update) is one sample: the time since the previous
   update ended (``tf.timestamp()``), so the whole step, compute included, is measured.
2. Trial t (candidate t) runs for ``warmup + measured`` updates: ``warmup`` =
   ``autotune_warmup_samples`` (default 1; the first update after a switch also carries the
   previous trial's tail), ``measured`` = 3 x ``autotune_steps_per_sample`` (default 15). Its
   score is the median of its measured samples on rank 0.
3. After each update rank 0's next index (the next trial's, or after the last trial the
   best-scoring one: the first candidate, the configured cap, wins ties) is broadcast to every
   rank (a collective of one int); every rank applies it from the next update on. Once the
   last trial has ended on every rank (the update counts are the same everywhere) the index is
   frozen and the broadcast is no longer run: autotune then costs one switch per tensor.
4. Rank 0 (every rank where the path contains ``{rank}``) appends a row per trial to
   ``<autotune_log_file>.buckets.csv`` (a log file ``a.csv`` gives ``a.buckets.csv``; none
   without a log file): the trial, its cap, the median seconds per update, and a last row with
   the choice.

The candidates are the configured cap and 0.25, 1, 4, 16 and 64 MiB and no cap, those that
give this model a plan of their own (the same plan is tried once, under its first cap). Only
the world's reducers are tuned (not those of a process set).
"""

import os

import tensorflow as tf

from ...collectives import tensors as _collectives
from ...runtime import bucket_cap, lifecycle
from ...runtime.world import rank as _rank

CANDIDATES_MB = (0.25, 1.0, 4.0, 16.0, 64.0, 0.0)
SAMPLES_PER_TRIAL = 3  # as the engine's Tuner: measured samples = 3 x steps per sample

def settings():
    """(tune, log path, warmup updates, measured updates per trial) of the running engine:
    tune where autotune is on and ``KERASHVD_BUCKET_CAP_MB`` is not set. Like every engine
    setting, autotune must be set alike on every rank (kerashvdrun and SLURM's environment
    do): ranks that differ trace different collectives, and their first step fails with the
    stall error naming them."""
    on = lifecycle.engine_setting("autotune")
    if on is None:
        return False, "", 1, SAMPLES_PER_TRIAL
    tune = on == "1" and os.environ.get(bucket_cap.VARIABLE) is None
    return (tune, lifecycle.engine_setting("autotune_log_file"),
            int(lifecycle.engine_setting("autotune_warmup_samples")),
            SAMPLES_PER_TRIAL * int(lifecycle.engine_setting("autotune_steps_per_sample")))


def log_path(autotune_log, rank):
    """Where ``rank`` logs the bucket trials, for the engine's autotune log ``autotune_log``:
    rank 0 only, or every rank where the path contains ``{rank}`` (as the engine's log); ""
    for none."""
    if not autotune_log or (rank != 0 and "{rank}" not in autotune_log):
        return ""
    root, ext = os.path.splitext(autotune_log.replace("{rank}", str(rank)))
    return f"{root}.buckets{ext or '.csv'}"


def candidate_plans(plan_for, configured_mb):
    """[(cap MiB, plan)] of the configured cap and CANDIDATES_MB, one per distinct plan
    (``plan_for(cap_bytes)`` returns the plan of a cap), the configured one first."""
    out, seen = [], []
    for mb in (configured_mb,) + tuple(c for c in CANDIDATES_MB if c != configured_mb):
        plan = plan_for(bucket_cap.cap_bytes(mb))
        groups = [indices for _, indices in plan]  # labels aside: no cap is one bucket too
        if groups not in seen:
            seen.append(groups)
            out.append((mb, plan))
    return out


_tuners = {}  # (engine start, reducer name, caps) -> BucketTuner


def tuner(name, caps_mb, process_set):
    """The BucketTuner of the reducers named ``name`` with candidates ``caps_mb`` in the running
    engine: made once, so that its variables exist before the traces that use them (a
    ``tf.function`` traces twice when its first call makes variables, and a custom loop makes a
    new DistributedGradientTape at each trace). Reducers of one name issue collectives of one
    name, so they share it."""
    key = (lifecycle.engine_start(), name, tuple(caps_mb))
    if key not in _tuners:
        for old in [k for k in _tuners if k[0] != key[0]]:
            del _tuners[old]  # an earlier engine's
        _, log, warmup, measured = settings()
        _tuners[key] = BucketTuner(name, caps_mb, warmup, measured, log_path(log, _rank()),
                                   process_set)
    return _tuners[key]


class BucketTuner:
    """The state and the per-update step of the protocol above, for one reducer.

    Args:
        name: the reducer's prefix (its collectives' names start with it).
        caps_mb: the candidates' caps in MiB, in trial order.
        warmup: updates of each trial left out of its score.
        measured: updates of each trial that are scored.
        log: the CSV path this rank appends to ("" for none: log_path).
        process_set: the reducer's process set (the broadcast runs among its ranks).
    """

    def __init__(self, name, caps_mb, warmup, measured, log, process_set):
        self.name, self.caps_mb = name, list(caps_mb)
        self.warmup, self.measured = max(1, int(warmup)), max(1, int(measured))
        self.log, self.process_set = log, process_set
        trials, per = len(self.caps_mb), self.warmup + self.measured
        with tf.init_scope():
            self.index = tf.Variable(0, dtype=tf.int32, trainable=False,
                                     name="bucket_tune_index")
            self.updates = tf.Variable(0, dtype=tf.int64, trainable=False,
                                       name="bucket_tune_updates")
            self.frozen = tf.Variable(False, trainable=False, name="bucket_tune_frozen")
            self.last = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                    name="bucket_tune_last")
            self.samples = tf.Variable(tf.zeros([trials, self.measured], tf.float64),
                                       trainable=False, name="bucket_tune_samples")
        self._per = per
        if self.log:
            with open(self.log, "a") as f:
                f.write("trial,bucket_cap_mb,updates,median_seconds_per_update,chosen\n")

    def choose(self, branches):
        """The outputs of the branch of the current index (``tf.switch_case``)."""
        return tf.switch_case(self.index.read_value(), branches)

    def after_update(self, outputs):
        """Records this update and picks the next index (see the protocol), once every tensor
        of ``outputs`` exists; returns ``outputs``. Once frozen, it runs nothing more."""
        with tf.control_dependencies(tf.nest.flatten(outputs)):
            tf.cond(self.frozen.read_value(), lambda: tf.constant(False), self._record)
        return outputs

    def _record(self):
        trials, per = len(self.caps_mb), self._per
        now = tf.timestamp()
        count = self.updates.read_value()
        trial, position = count // per, count % per
        elapsed = tf.where(tf.equal(count, 0), tf.constant(0.0, tf.float64),
                           now - self.last.read_value())
        scored = tf.logical_and(trial < trials, position >= self.warmup)
        slot = tf.stack([tf.minimum(trial, trials - 1),
                         tf.maximum(position - self.warmup, 0)])

        def store():
            with tf.control_dependencies([self.samples.scatter_nd_update(slot[None],
                                                                          elapsed[None])]):
                return tf.constant(True)

        record = tf.cond(scored, store, lambda: tf.constant(False))
        with tf.control_dependencies([record]):
            medians = self._medians()
            best = tf.cast(tf.argmin(medians), tf.int32)  # the first of equal scores
            following = count + 1
            proposal = tf.where(following // per < trials, tf.cast(following // per, tf.int32),
                                best)
            agreed = _collectives.broadcast(proposal, root_rank=0,
                                            name=f"{self.name}.bucket_tune",
                                            process_set=self.process_set)
            ended = following // per >= trials
            logged = self._log(position, trial, medians, ended, agreed)
            with tf.control_dependencies(logged):
                updates = [self.index.assign(agreed), self.updates.assign(following),
                           self.last.assign(now), self.frozen.assign(ended)]
        with tf.control_dependencies(updates):
            return tf.constant(True)

    def _medians(self):
        ordered = tf.sort(self.samples.read_value(), axis=1)
        return ordered[:, self.measured // 2] if self.measured % 2 else (
            ordered[:, self.measured // 2 - 1] + ordered[:, self.measured // 2]) / 2.0

    def _log(self, position, trial, medians, ended, chosen):
        """Rank 0's rows: one when a trial's last update ends, one when the search ends."""
        if not self.log:
            return []
        caps = tf.constant(self.caps_mb, tf.float64)
        stream = "file://" + self.log
        trials = len(self.caps_mb)

        def row(t, mark):
            t = tf.cast(t, tf.int32)
            line = tf.strings.format("{},{},{},{},{}", (t, caps[t], self.measured, medians[t],
                                                        mark), summarize=-1)
            with tf.control_dependencies([tf.print(line, output_stream=stream)]):
                return tf.constant(True)

        def skip():
            return tf.constant(False)

        trial_row = tf.cond(tf.logical_and(trial < trials, tf.equal(position, self._per - 1)),
                            lambda: row(trial, 0), skip)
        with tf.control_dependencies([trial_row]):
            final_row = tf.cond(ended, lambda: row(chosen, 1), skip)
        return [trial_row, final_row]
