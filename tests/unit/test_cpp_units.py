"""The engine's C++ unit tests (ops/core/tests): GoogleTest, built with CMake and run, no MPI
needed (skipped, saying so, where GoogleTest is not installed: Debian's libgtest-dev).

They cover the framework-free parts of the engine with ranks as threads of one process:
fusion planning, the response cache, the negotiation messages, the controller's cycle
(agreement, mismatches, failed requests, shutdown, a dead or aborted peer), the process-set
registry (agreement, disagreement, a rank that never calls), a whole lane on fake
transports (results, negotiated shutdown, abort) and a whole engine on a fake world group
(the world's and a set's lanes, the membership check, shutdown). One to three minutes to
build from scratch on two cores, under a second to run. The build uses the wheel's compiler
settings (ops/cmake/compile_settings.cmake) and stays in build/cpp-tests, so later runs only
recompile what changed.
"""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO
SOURCE = os.path.join(REPO, "ops", "core", "tests")
BUILD = os.path.join(REPO, "build", "cpp-tests")

pytestmark = pytest.mark.slow


def _tool(name):
    """`name` from this Python's environment (the test extra's cmake/ninja), else the PATH."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.access(here, os.X_OK) else shutil.which(name)


def _run(command, timeout):
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    return result.returncode, output


def test_engine_unit_tests():
    cmake = _tool("cmake")
    if cmake is None:
        pytest.fail("cmake not found: install the test extra (pip install '.[test]')")
    configure = [cmake, "-S", SOURCE, "-B", BUILD]
    ninja = _tool("ninja")
    if ninja is not None and not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    rc, output = _run(configure, timeout=120)
    if rc != 0 and "GoogleTest not found" in output:
        pytest.skip("GoogleTest is not installed (Debian/Ubuntu: apt-get install libgtest-dev; "
                    ".ci/run installs it)")
    assert rc == 0, f"configuring the C++ tests failed:\n{output}"
    rc, output = _run([cmake, "--build", BUILD, "-j", str(os.cpu_count() or 2)], timeout=600)
    assert rc == 0, f"building the C++ tests failed:\n{output}"

    binary = os.path.join(BUILD, "kerashvd_core_tests")
    rc, output = _run([binary, "--gtest_color=no"], timeout=180)
    assert rc == 0, f"C++ unit tests failed (exit {rc}):\n{output}"
    assert "[  PASSED  ]" in output and "FAILED" not in output, output
