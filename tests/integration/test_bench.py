"""The benchmarks run end to end (correctness of their output only; speed is not tested)."""

import re
import subprocess
import sys

from conftest import REPO, TF_NOTICE


def _run(args, timeout):
    proc = subprocess.run([sys.executable, "-m", "kerashvd.bench", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    # What a user reads is the table, without TensorFlow's startup notices of every process.
    assert not TF_NOTICE.search(proc.stdout + proc.stderr), proc.stderr[-3000:]
    return proc.stdout


def _check_header(out, args):
    """The '#' header that dates the run and says where and how it ran (bench/header.py)."""
    assert re.search(r"^# date: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(start\)$", out, re.M), out
    assert re.search(r"^# host: .+; CPUs: \d+ \(os.cpu_count\)", out, re.M), out
    assert re.search(r"^# versions: TensorFlow \S+, Keras \S+, kerashvd \S+ \(built for ", out,
                     re.M), out
    command = re.search(r"^# command: (.*)$", out, re.M)
    assert command and command.group(1).endswith("-m kerashvd.bench " + " ".join(args)), out


def test_allreduce_bench_prints_its_table_with_nothing_wrong():
    args = ["--sizes", "4K,1M", "--seconds", "0.05", "--repeats", "1"]
    out = _run(args, timeout=600)
    _check_header(out, args)
    assert re.search(r"^# ranks: 2 on 1 node: ", out, re.M), out
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s", line)]
    assert [int(r[0]) for r in rows] == [4096, 1 << 20], out
    assert all(r[5] == "0" for r in rows), out  # the #wrong column
    assert all(len(r) == 13 and r[10] == "0" for r in rows), out  # ... and the in-graph one's
    assert out.count("(#wrong 0)") == 2, out  # the two 100-tensor steps
    assert "single 4 KiB allreduce" in out and "chained 20 deep" in out, out
    assert "called as concrete functions" in out, out
    assert "raw MPI's in-place allreduce of the same 1,638,400 bytes" in out, out


def test_keras_bench_runs_every_configuration():
    args = ["keras", "--steps", "2", "--warmup", "1", "--batch", "8", "--repeats", "1", "--mwms"]
    out = _run(args, timeout=900)
    _check_header(out, args)
    assert re.search(r"^# ranks: 1 and 2 on 1 node: ", out, re.M), out
    for label in ("plain Keras, 1 process", "kerashvd, 1 rank", "kerashvd, 2 ranks",
                  "side by side", "meeting in an MPI barrier", "tf_keras, kerashvd, 2 ranks",
                  "tf_keras, MultiWorkerMirroredStrategy, 2 workers"):
        assert re.search(re.escape(label) + r".*\d+\.\d images/s", out), (label, out)
    for label in ("overhead at 1 rank", "scaling efficiency", "kerashvd / barrier-only",
                  "kerashvd / MultiWorkerMirroredStrategy (tf_keras)"):
        assert re.search(r"per round, " + re.escape(label) + r": -?\d+\.\d% \(median", out), out


def test_keras_bench_trains_resnet50_across_two_ranks():
    args = ["keras", "--model", "resnet50", "--steps", "1", "--warmup", "1", "--batch", "2",
            "--repeats", "1", "--no-baselines"]
    out = _run(args, timeout=900)
    _check_header(out, args)
    # Keras' ResNet-50 with 10 classes has 23,608,202 weights; the small CNN has 78,714.
    assert "# Keras ResNet-50 (23,608,202 weights), 32x32x3, batch 2/rank" in out, out
    assert re.search(r"^kerashvd, 2 ranks +\d+\.\d images/s +scaling efficiency", out, re.M), out


def test_keras_bench_trains_the_embedding_model_with_default_inter_op_threads():
    args = ["keras", "--model", "embedding", "--steps", "2", "--warmup", "1", "--batch", "8",
            "--repeats", "1", "--no-baselines", "--inter-op", "0"]
    out = _run(args, timeout=900)
    _check_header(out, args)
    # 100,000 x 64 embedding, 64 x 256 + 256 and 256 x 10 + 10 dense weights.
    assert ("# Keras embedding model (6,419,210 weights), 16 ids a sample, batch 8/rank, "
            "1 intra-op thread/rank, default inter-op thread(s)/rank") in out, out
    assert re.search(r"^kerashvd, 2 ranks +\d+\.\d images/s +scaling efficiency", out, re.M), out


def test_overlap_bench_prints_every_configuration_and_a_step_timeline():
    args = ["overlap", "--widths", "8,16", "--batch", "4", "--cycles", "2", "--warmup", "1",
            "--caps", "0.001"]
    out = _run(args, timeout=900)
    _check_header(out, args)
    assert re.search(r"^# ranks: 2 on 1 node: ", out, re.M), out
    assert re.search(r"^# load average \(1/5/15 min\) at start: [\d.]+ ", out, re.M), out
    for label in ("compute only", "allreduce only", "default", "one collective",
                  "num_groups=8", "cap=0.001"):
        assert re.search(r"^" + re.escape(label) + r" +\d+\.\d +\d+\.\d - +\d+\.\d$", out,
                         re.M), (label, out)
    for label in ("default", "one collective", "cap=0.001", "(compute + allreduce)"):
        assert re.search(r"^  " + re.escape(label) + r" +\d+\.\d\d \(\d+\.\d\d - \d+\.\d\d\)$",
                         out, re.M), (label, out[out.find("step / max"):])  # the ratio lines
    # The timeline of one default step: its buckets (one at the default cap, for a model
    # this small), each submitted, ready everywhere and reduced, then the step's end.
    rows = re.findall(r"^bench\.default\.bucket(\d+)\.float32 +(\d+) +([\d.]+) +([\d.]+) "
                      r"+([\d.]+) +([\d.]+) - +([\d.]+)$", out, re.M)
    assert [int(r[0]) for r in rows] == [0], out
    tensors = int(re.search(r"MiB of gradients in (\d+) tensors", out).group(1))
    assert int(rows[0][1]) == tensors and float(rows[0][2]) > 0, out  # all in one bucket
    submitted, ready, start, end = map(float, rows[0][3:])
    assert submitted <= ready <= start <= end, out
    assert re.search(r"^step ends +[\d.]+ +\(compute-only step: median [\d.]+\)$", out,
                     re.M), out


def test_latency_bench_reads_every_engine_phase_of_every_rank():
    # Carrying off and on, with a linger, compared in every round: kerashvd is initialized
    # again for each.
    args = ["latency", "--calls", "2", "--rounds", "1", "--depth", "3", "--linger", "0.05",
            "--carry", "0,16384"]
    out = _run(args, timeout=600)
    _check_header(out, args)
    assert re.search(r"^# raw MPI: Allreduce of 4096 B [\d.]+ us; Iallreduce BAND", out,
                     re.M), out
    for carry in ("0", "16384"):
        assert re.search(rf"^# KERASHVD_LINGER_TIME=0.05, KERASHVD_CARRY_BYTES={carry}: 3 "
                         r"allreduces of 4096 B chained .*: [\d.]+ us per allreduce", out,
                         re.M), out
    # Per variant, per rank: a mean and a median row with the seven phases, then the
    # allreduces of the recorded round (2 calls x 3) and the negotiations with work pending.
    # Carrying off, every allreduce has its collective and none is carried (nan); on, every
    # one is carried (the chain was called before the round) and has no collective.
    number = r"(-?\d+\.\d|nan)"
    means = re.findall(rf"^ +(\d) +\S+ +mean +{' +'.join([number] * 7)} +(\d+) +(\d+) ", out,
                       re.M)
    medians = re.findall(rf"^ +(\d) +\S+ +median +{' +'.join([number] * 7)}$", out, re.M)
    assert [r[0] for r in means] == ["0", "1", "0", "1"], out
    assert len(medians) == 4, out
    assert all(int(r[8]) == 6 and int(r[9]) >= 1 for r in means), out
    for r in means[:2]:  # off: to cycle .. allreduce, complete, to next measured; carried nan
        assert "nan" not in r[1:5] + r[6:8] and r[5] == "nan", out
    for r in means[2:]:  # on: allreduce nan, the others measured
        assert "nan" not in r[1:4] + r[5:8] and r[4] == "nan", out


def test_compression_bench_prints_each_compression_with_its_error():
    args = ["compression", "--sizes", "64K", "--seconds", "0.05", "--repeats", "1"]
    out = _run(args, timeout=600)
    _check_header(out, args)
    assert re.search(r"^# ranks: 2 on 1 node: ", out, re.M), out
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+65536\s", line)]
    assert len(rows) == 1 and len(rows[0]) == 15, out
    row = rows[0]
    # size, then time, across, vs none, error of none, fp16 and bf16, then raw MPI's time, across
    assert float(row[3]) == 1.0, out  # none against itself
    assert float(row[4]) < 1e-6 and 0 < float(row[8]) < 1e-2 and 0 < float(row[12]) < 2e-2, out
    # One host: MPI's bytes go through shared memory, not the network (what else the machine
    # sends meanwhile may show).
    assert all(float(row[i]) < 0.5 for i in (2, 6, 10, 14)), out
