"""The hierarchical settings: init() keywords, KERASHVD_HIERARCHICAL_* and Horovod's
HOROVOD_HIERARCHICAL_* variables, and kerashvdrun's flags (no MPI: what they turn into); and
MPI's algorithm for the flat allreduce as auto reads it."""

import json
import os
import subprocess
import sys

import pytest

VARIABLES = ("KERASHVD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE",
             "KERASHVD_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER")


@pytest.fixture
def config(monkeypatch):
    """build_config with the hierarchical variables cleared first; returns (allreduce,
    allgather) mode names."""
    from kerashvd import _core
    from kerashvd.runtime import config as _config

    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def build(env=None, **overrides):
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        c = _config.build_config(overrides)
        return (_core.setting_text(c, "hierarchical_allreduce"),
                _core.setting_text(c, "hierarchical_allgather"))

    return build


def test_default_is_auto(config):
    assert config() == ("auto", "auto")


@pytest.mark.parametrize("value, mode", [("on", "on"), ("1", "on"), ("TRUE", "on"),
                                         ("off", "off"), ("0", "off"), ("no", "off"),
                                         ("auto", "auto")])
def test_variables_take_the_usual_spellings(config, value, mode):
    assert config({"KERASHVD_HIERARCHICAL_ALLREDUCE": value}) == (mode, "auto")
    assert config({"HOROVOD_HIERARCHICAL_ALLGATHER": value})[1] == mode


def test_keywords_override_variables(config):
    env = {"KERASHVD_HIERARCHICAL_ALLREDUCE": "on", "HOROVOD_HIERARCHICAL_ALLGATHER": "1"}
    assert config(env, hierarchical_allreduce=False, hierarchical_allgather="auto") == \
        ("off", "auto")
    assert config(env, hierarchical_allreduce=True) == ("on", "on")


def test_horovods_variable_and_ours_must_agree(config):
    assert config({"KERASHVD_HIERARCHICAL_ALLREDUCE": "on",
                   "HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}) == ("on", "auto")
    with pytest.raises(ValueError, match="KERASHVD_HIERARCHICAL_ALLREDUCE='off' and "
                                         "HOROVOD_HIERARCHICAL_ALLREDUCE='1' disagree"):
        config({"KERASHVD_HIERARCHICAL_ALLREDUCE": "off", "HOROVOD_HIERARCHICAL_ALLREDUCE": "1"})


def test_bad_values_name_the_setting(config):
    with pytest.raises(ValueError, match="KERASHVD_HIERARCHICAL_ALLGATHER must be 'auto'.*"
                                         "received 'sometimes'"):
        config({"KERASHVD_HIERARCHICAL_ALLGATHER": "sometimes"})
    with pytest.raises(ValueError, match="hierarchical_allreduce must be 'auto'.*received 2"):
        config(hierarchical_allreduce=2)


def test_kerashvdrun_flags(capsys):
    from kerashvd.launcher import cli

    assert cli.main(["-np", "2", "--hierarchical-allreduce", "--no-hierarchical-allgather",
                     "--dry-run", "python", "x.py"]) == 0
    command = capsys.readouterr().err
    assert "-genv KERASHVD_HIERARCHICAL_ALLREDUCE on " in command
    assert "-genv KERASHVD_HIERARCHICAL_ALLGATHER off " in command
    assert cli.main(["-np", "2", "--dry-run", "python", "x.py"]) == 0
    assert "HIERARCHICAL" not in capsys.readouterr().err  # neither flag: auto, nothing set


# MPI's algorithm for the flat allreduce, as MPICH's variable sets it -> what auto's link model
# makes of it, and whether a 16 MiB allreduce at 2 nodes x 2 ranks in blocks then runs node by
# node (MPICH's reduce-scatter + allgather already moves the least across the links there).
MPI_ALGORITHMS = [("auto", "MPICH's default", False),
                  ("sched_recursive_doubling", "recursive doubling", True),
                  ("sched_reduce_scatter_allgather", "reduce-scatter + allgather", False),
                  ("tsp_ring", "ring", True),
                  ("sched_smp", "smp (node-aware)", False),
                  ("tsp_recexch_reduce_scatter_recexch_allgatherv", "unknown", True)]


def test_auto_reads_mpis_algorithm_through_mpi_t():
    """One process per setting (MPICH reads its variables once): kerashvd._core reads the
    value MPICH took, through MPI_T, and the link model decides from it."""
    code = ("import json; from kerashvd import _core; print(json.dumps(["
            "_core.flat_allreduce_algorithm(), "
            "_core.allreduce_path([0, 0, 1, 1], 'auto', 16 << 20, 4 << 20)['hierarchical'], "
            "_core.allreduce_path([0, 1, 0, 1], 'auto', 16 << 20, 4 << 20)['hierarchical']]))")
    for name, algorithm, blocks_node_by_node in MPI_ALGORITHMS:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MPIR_")}
        env["MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM"] = name
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        read, blocks, cyclic = json.loads(proc.stdout.splitlines()[-1])
        assert read == {"name": name, "algorithm": algorithm}, name
        assert blocks == blocks_node_by_node, name
        assert cyclic == (name != "sched_smp"), name  # only MPICH's node-aware one is as good
