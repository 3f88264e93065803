"""Every engine setting of the engine's table (``kerashvd._core.SETTINGS``) is accepted by its
init() keyword, its ``KERASHVD_*`` variable and its kerashvdrun flag, and means the same value
through all three; a bad value is refused by each, saying what was expected and what was
received; an unknown setting is an error. No MPI except in the one test that calls init():
``build_config`` is what init() calls, and ``kerashvdrun --dry-run`` prints the command."""

import glob
import os
import re
import subprocess
import sys
import textwrap

import pytest

from kerashvd import _core
from kerashvd.runtime import config as _config
from kerashvd.launcher import cli

from conftest import REPO

ROWS = {row["key"]: row for row in _core.SETTINGS}
KEYS = sorted(ROWS)


def _sample(row):
    """(flag arguments, the variable's text, the init() keyword's value) of one value of
    ``row`` that is not its default."""
    kind = row["kind"]
    if kind in ("integer", "number"):
        flag_text = str(int(row["minimum"] / row["flag_scale"]) + 3)
        value = float(flag_text) * row["flag_scale"]
        value = int(round(value)) if kind == "integer" else value
        return [row["flag"], flag_text], f"{value:g}" if kind == "number" else str(value), value
    if kind == "switch":
        on = row["default"] != row["on"]
        name = row["flag"].lstrip("-")
        return [f"--{name}" if on else f"--no-{name}"], row["on" if on else "off"], on
    if kind == "mode":
        return [row["flag"]], row["on"], True
    path = "/tmp/khvd-settings-test.json"
    return [row["flag"], path], path, path


@pytest.fixture
def build(monkeypatch):
    """build_config with no KERASHVD_/HOROVOD_ variable but ``env``; returns the text of
    setting ``key`` in the config built from ``env`` and ``overrides``."""
    for name in list(os.environ):
        if name.startswith(("KERASHVD_", "HOROVOD_")):
            monkeypatch.delenv(name)

    def run(key, env=None, **overrides):
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        return _core.setting_text(_config.build_config(overrides), key)

    return run


def _dry_run(args, capsys):
    assert cli.main(["-np", "1", *args, "--dry-run", "python", "x.py"]) == 0
    return capsys.readouterr().err


def test_every_row_is_complete():
    assert KEYS, "the engine exports no settings"
    for row in ROWS.values():
        assert row["variable"].startswith("KERASHVD_") and row["flag"].startswith("--"), row
        assert row["help"] and row["expected"], row
    for field in ("variable", "flag"):
        values = [row[field] for row in ROWS.values()]
        assert len(set(values)) == len(values), f"two settings share a {field}"


@pytest.mark.parametrize("key", KEYS)
def test_keyword_variable_and_flag_set_the_same_value(key, build, capsys):
    row = ROWS[key]
    flag_args, text, keyword = _sample(row)
    assert build(key) == row["default"]
    assert build(key, **{key: keyword}) == text
    assert build(key, {row["variable"]: text}) == text
    assert f"-genv {row['variable']} {text} " in _dry_run(flag_args, capsys)
    if row["horovod_variable"]:
        assert build(key, {row["horovod_variable"]: text}) == text


@pytest.mark.parametrize("key", [k for k in KEYS if ROWS[k]["kind"] != "path"])
def test_bad_values_are_refused_by_all_three(key, build, capsys):
    row = ROWS[key]
    bad = "-7" if row["kind"] in ("integer", "number") else "maybe"
    with pytest.raises(ValueError) as err:
        build(key, {row["variable"]: bad})
    assert f"{row['variable']} must be {row['expected']}" in str(err.value)
    assert f"received '{bad}'" in str(err.value)
    keyword = -7 if row["kind"] in ("integer", "number") else bad
    with pytest.raises(ValueError) as err:
        build(key, **{key: keyword})
    assert f"{key} must be {row['expected']}" in str(err.value)
    assert str(err.value).endswith(f"received {keyword!r}")
    if row["kind"] in ("switch", "mode"):
        return  # their flags take no value
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["-np", "1", row["flag"], bad, "--dry-run", "python", "x.py"])
    assert exit_info.value.code == 2
    assert f"{row['flag']}: expected {row['flag_expected']}, received '{bad}'" in \
        capsys.readouterr().err


def test_unknown_settings_are_errors(build, capsys):
    with pytest.raises(ValueError, match=r"init\(\) got unknown setting\(s\) \['cycle_time'\]"):
        build("cycle_time_ms", cycle_time=5)
    with pytest.raises(ValueError, match="Unknown kerashvd setting.*KERASHVD_CYCLE_TIME_MS"):
        build("cycle_time_ms", {"KERASHVD_CYCLE_TIME_MS": "5"})
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["-np", "1", "--cycle-period-ms", "5", "--dry-run", "python", "x.py"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --cycle-period-ms" in capsys.readouterr().err


def test_variables_of_the_slurm_templates_are_known(build):
    """A variable the templates read (KERASHVD_MAX_REQUEUES) reaches the job's ranks too, so
    init() must accept it."""
    names = set()
    for template in glob.glob(os.path.join(REPO, "recipes", "slurm", "*.sbatch")):
        with open(template) as f:
            names |= set(re.findall(r"KERASHVD_[A-Z_]+", f.read()))
    assert "KERASHVD_MAX_REQUEUES" in names
    for name in sorted(names):
        build("cycle_time_ms", {name: "1"})  # raises for an unknown KERASHVD_ variable


def test_help_lists_every_flag_with_its_variable(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for row in ROWS.values():
        assert row["flag"] in text and f"Sets {row['variable']}" in text, row["flag"]


@pytest.mark.mpi
def test_init_accepts_every_setting_at_once(tmp_path):
    """The real init() (one process) with every setting given as a keyword."""
    keywords = {key: _sample(row)[2] for key, row in ROWS.items()}
    keywords["timeline"] = str(tmp_path / "timeline.json")
    script = textwrap.dedent(f"""
        import kerashvd as hvd
        import tensorflow as tf

        hvd.init(**{keywords!r})
        assert float(hvd.allreduce(tf.constant(2.0), op=hvd.Sum)) == 2.0
        hvd.shutdown()
        print("DONE")
    """)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERASHVD_", "HOROVOD_", "PMI_", "HYDRA_", "MPI_"))}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("DONE"), \
        proc.stdout + proc.stderr[-4000:]
    assert (tmp_path / "timeline.json").exists()


def test_keywords_take_numpy_numbers_and_paths(build, tmp_path):
    import pathlib

    import numpy as np

    assert build("cycle_time_ms", cycle_time_ms=np.float64(2.5)) == "2.5"
    assert build("cache_capacity", cache_capacity=np.int64(7)) == "7"
    path = pathlib.Path(tmp_path) / "t.json"
    assert build("timeline", timeline=path) == str(path)


def test_numbers_beyond_int64_mean_no_limit(build):
    assert float(build("fusion_threshold_bytes", fusion_threshold_bytes=1e20)) >= 2**63 - 1024
    assert float(build("timeline_max_mb", {"KERASHVD_TIMELINE_MAX_MB": "1e30"})) > 8e12


def test_a_stall_ends_by_default(build):
    """A collective that some ranks never submit stops kerashvd on every rank after 10 minutes
    unless told otherwise (tests/multiprocess/test_errors_multiprocess.py shows it firing): longer than
    any healthy wait, and never for ever."""
    row = ROWS["stall_shutdown_seconds"]
    assert row["default"] == "600" and build("stall_shutdown_seconds") == "600", row
    assert "0: never" in row["help"], row


def test_bucket_cap_by_variable_and_flag(build, capsys):
    """The one Python-side setting with a flag (kerashvd/runtime/bucket_cap.py): init()
    accepts its variable and refuses a bad value naming it, as for the engine's settings;
    the flag sets the variable. Its keyword belongs to DistributedOptimizer and
    DistributedGradientTape (tests/parallel/test_buckets.py)."""
    from kerashvd.runtime import bucket_cap

    build("cycle_time_ms", {"KERASHVD_BUCKET_CAP_MB": "0.25"})
    assert bucket_cap.cap_bytes() == 1 << 18
    for bad in ("-1", "lots", "inf"):
        with pytest.raises(ValueError) as err:
            build("cycle_time_ms", {"KERASHVD_BUCKET_CAP_MB": bad})
        assert "KERASHVD_BUCKET_CAP_MB must be a number of MiB >= 0" in str(err.value)
        assert f"received '{bad}'" in str(err.value)
    assert "-genv KERASHVD_BUCKET_CAP_MB 4 " in _dry_run(["--bucket-cap-mb", "4"], capsys)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["-np", "1", "--bucket-cap-mb", "-2", "--dry-run", "python", "x.py"])
    assert exit_info.value.code == 2
    assert "--bucket-cap-mb: expected a number of MiB >= 0, received '-2'" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "Sets KERASHVD_BUCKET_CAP_MB" in " ".join(capsys.readouterr().out.split())
