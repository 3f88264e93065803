"""The public API is explicit: kerashvd.__all__ matches the checked-in list, and every name
in it resolves and has a docstring with an example (house style 2 and 3)."""

import os

import kerashvd

HERE = os.path.dirname(os.path.abspath(__file__))


def test_all_matches_checked_in_list():
    with open(os.path.join(HERE, "public_api.txt")) as f:
        expected = [line.strip() for line in f if line.strip()]
    assert sorted(kerashvd.__all__) == sorted(expected), (
        "kerashvd.__all__ changed; if intended, update tests/unit/public_api.txt")


def test_every_public_name_resolves_and_is_documented():
    for name in kerashvd.__all__:
        value = getattr(kerashvd, name)
        if isinstance(value, int):
            continue  # reduce-op constants
        assert (value.__doc__ or "").strip(), f"kerashvd.{name} has no docstring"


def test_import_does_not_load_tensorflow():
    import subprocess
    import sys

    code = "import sys, kerashvd; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
