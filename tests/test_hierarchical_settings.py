"""The hierarchical settings: init() keywords, KERASHVD_HIERARCHICAL_* and Horovod's
HOROVOD_HIERARCHICAL_* variables, and kerashvdrun's flags (no MPI: what they turn into)."""

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
