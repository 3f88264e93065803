"""Recipes are tested code: each runs its tiny mode on 2 processes through kerashvdrun.

The data sets are small real ones written once per session (tests/fixtures/datasets/): a tfds
``mnist`` directory, the standard ImageNet TFRecord layout and a tfds ``imagenet2012``.
"""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO


def kerashvdrun():
    return os.path.join(os.path.dirname(sys.executable), "kerashvdrun")


def run_recipe(recipe, *args, np=2, timeout=600, check=True):
    """Runs recipes/<recipe> under kerashvdrun; returns (returncode, output)."""
    env = dict(os.environ, KERASHVD_STALL_CHECK_TIME="20", KERASHVD_STALL_SHUTDOWN_TIME="60",
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    cmd = [kerashvdrun(), "-np", str(np), sys.executable, os.path.join(REPO, "recipes", recipe),
           *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
    output = proc.stdout + proc.stderr
    if check:
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{output[-6000:]}"
    return proc.returncode, output


@pytest.mark.mpi
def test_quickstart_trains_on_two_ranks():
    _, output = run_recipe("quickstart.py", "--tiny")
    match = re.search(r"ranks=2 final val_accuracy=([0-9.]+)", output)
    assert match, output[-5000:]
    assert float(match.group(1)) > 0.8, output[-3000:]


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.mpi
@pytest.mark.slow
def test_mnist_trains_checkpoints_and_resumes(mnist_data_dir, tmp_path):
    """Tiny MNIST at 2 ranks from a real tfds data dir (gradients sent as bfloat16), then a
    rerun that resumes at epoch 3 (float32)."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "mnist.csv"
    common = ["--tiny", "--data-dir", mnist_data_dir, "--checkpoint-dir", ckpt, "--log-csv", log]
    _, output = run_recipe("mnist.py", *common, "--compression", "bf16")
    match = re.search(r"ranks=2 epochs=2 final val_accuracy=([0-9.]+)", output)
    assert match and float(match.group(1)) > 0.8, output[-4000:]  # chance is 0.1
    assert "Resuming" not in output
    assert output.count("images/s in total on 2 rank(s)") == 2, output[-4000:]
    rows = read_csv(log)
    assert list(rows[0]) == ["epoch", "loss", "accuracy", "val_loss", "val_accuracy", "lr",
                             "images_per_sec", "images_per_sec_per_rank", "seconds"]
    assert [r["epoch"] for r in rows] == ["1", "2"]
    assert all(float(r["images_per_sec"]) > 0 for r in rows)
    # The learning rate is scaled by the number of ranks (0.001 * 2) after the warmup.
    assert float(rows[-1]["lr"]) == pytest.approx(0.002, rel=1e-5)
    assert sorted(p.name for p in ckpt.glob("*.keras")) == ["model-001.keras", "model-002.keras"]

    _, output = run_recipe("mnist.py", *common, "--epochs", "3")
    assert re.search(r"Resuming from \S*model-002\.keras after epoch 2", output), output[-4000:]
    assert "Epoch 3/3" in output and "Epoch 1/" not in output, output[-4000:]
    rows = read_csv(log)
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    # Resumed weights and optimizer state keep improving; a fresh model's first epoch
    # (loss ~0.9) would be far above the second epoch's loss.
    assert float(rows[2]["loss"]) < float(rows[1]["loss"]), rows
    assert float(rows[2]["val_accuracy"]) > 0.8, rows


@pytest.mark.mpi
def test_mnist_without_data_says_what_to_download(tmp_path):
    code, output = run_recipe("mnist.py", "--tiny", "--data-dir", tmp_path, check=False, timeout=300)
    assert code != 0
    assert "FileNotFoundError: tfds data set 'mnist' is not prepared in" in output, output[-4000:]
    assert f"tfds.load('mnist', data_dir='{tmp_path}')" in output, output[-4000:]
    assert "on rank(s) [0, 1] of 2" in output, output[-4000:]


def rank_files(output):
    """{rank: (training files, validation files)} from the ImageNet recipe's output."""
    pattern = r"rank (\d+) reads \d+ training file\(s\): ([^;\n]*); \d+ validation file\(s\): (.*)"
    return {int(rank): (train.split(), val.split())
            for rank, train, val in re.findall(pattern, output)}


def check_sharding(output, all_train_files):
    """Every rank read its own training and validation files; together, all training files."""
    files = rank_files(output)
    assert sorted(files) == [0, 1], output[-4000:]
    (train0, val0), (train1, val1) = files[0], files[1]
    assert not set(train0) & set(train1) and not set(val0) & set(val1), files
    assert sorted(train0 + train1) == sorted(all_train_files), files
    assert val0 and val1, files


@pytest.mark.mpi
@pytest.mark.slow
def test_imagenet_tfrecord_then_tfds_resume(imagenet_tfrecord_dir, imagenet_tfds_dir, tmp_path):
    """Tiny ResNet-50 at 2 ranks: one epoch on the standard TFRecord layout, then a rerun that
    resumes from its checkpoint for a second epoch read from tfds' imagenet2012 (the model
    does not depend on where the images come from; one pair of runs covers both formats)."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "imagenet.csv"
    common = ["--tiny", "--image-size", "32", "--checkpoint-dir", ckpt, "--log-csv", log]
    _, output = run_recipe("imagenet.py", *common, "--data-dir", imagenet_tfrecord_dir)
    check_sharding(output, [n for n in os.listdir(imagenet_tfrecord_dir) if n.startswith("train-")])
    assert "ranks=2 final loss=" in output, output[-4000:]
    assert (ckpt / "model-001.keras").is_file()
    assert json.loads((ckpt / "kerashvd_checkpoint.json").read_text())["epoch"] == 1

    _, output = run_recipe("imagenet.py", *common, "--epochs", "2", "--data-format", "tfds",
                           "--data-dir", imagenet_tfds_dir)
    assert re.search(r"Resuming from \S*model-001\.keras after epoch 1", output), output[-4000:]
    assert "Epoch 2/2" in output and "Epoch 1/" not in output, output[-4000:]
    tfds_files = os.listdir(os.path.join(imagenet_tfds_dir, "imagenet2012", "5.1.0"))
    check_sharding(output, [n for n in tfds_files if "-train.tfrecord-" in n])
    rows = read_csv(log)
    assert [r["epoch"] for r in rows] == ["1", "2"]
    for row in rows:
        assert math.isfinite(float(row["loss"])) and math.isfinite(float(row["val_loss"])), rows
        assert float(row["images_per_sec"]) > 0
    assert json.loads((ckpt / "kerashvd_checkpoint.json").read_text())["epoch"] == 2


@pytest.mark.mpi
@pytest.mark.slow
def test_imagenet_synthetic_benchmark_mixed_precision():
    """--synthetic prints images/s per rank and in total; run with mixed precision, fp16
    gradient compression and local gradient accumulation, which must train through."""
    # 32 px, ResNet-50's smallest input: float16 convolutions are slow on CPUs (at --tiny's
    # 64 px this one test took 4 minutes of a CI run).
    _, output = run_recipe("imagenet.py", "--synthetic", "--tiny", "--image-size", "32",
                           "--mixed-precision", "--fp16-allreduce",
                           "--backward-passes-per-step", "2")
    per_rank = re.search(r"Img/sec per rank: ([0-9.]+) \+-([0-9.]+)", output)
    total = re.search(r"Total img/sec on 2 rank\(s\): ([0-9.]+) \+-([0-9.]+)", output)
    assert per_rank and total, output[-4000:]
    assert float(per_rank.group(1)) > 0
    # Both are printed to 0.1 img/s: on a loaded machine (0.2 img/s per rank) the rounding
    # alone can be a third of the value.
    assert float(total.group(1)) == pytest.approx(2 * float(per_rank.group(1)), rel=0.05, abs=0.16)
    assert re.search(r"ranks=2 final loss=[0-9.]+", output), output[-4000:]


@pytest.mark.mpi
def test_imagenet_fewer_files_than_ranks_is_an_error(imagenet_tfrecord_dir, tmp_path):
    for name in ("train-00000-of-00008", "validation-00000-of-00004"):
        shutil.copy(os.path.join(imagenet_tfrecord_dir, name), tmp_path / name)
    code, output = run_recipe("imagenet.py", "--tiny", "--data-dir", tmp_path, check=False,
                              timeout=300)
    assert code != 0
    assert "1 train file(s) in" in output and "but 2 ranks" in output, output[-4000:]
