"""``import kerashvd`` does nothing but import.

It must not change the process for other libraries: no environment variable set, no import
hook installed, no TensorFlow or Keras imported, no native library loaded. What used to happen
at import happens at ``init()`` or first use (README, "How it works").
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

CHECK = """
import json, os, sys
env, meta_path = dict(os.environ), list(sys.meta_path)
import kerashvd
print(json.dumps({
    "env_changed": sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k)),
    "meta_path_added": [repr(f) for f in sys.meta_path if f not in meta_path],
    "heavy": sorted({"tensorflow", "keras", "tf_keras", "kerashvd._core",
                     "kerashvd.runtime.lifecycle", "kerashvd.callbacks"} & set(sys.modules)),
    "kerashvd": sorted(m for m in sys.modules if m.startswith("kerashvd")),
}))
"""


def _run(code, **env):
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("KERASHVD_", "PMI_", "TF_CPP", "TF_CPU"))}
    environ.update(env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, env=environ, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_import_kerashvd_changes_no_environment_hook_or_import():
    result = json.loads(_run(CHECK).splitlines()[-1])
    assert result["env_changed"] == [], result
    assert result["meta_path_added"] == [], result
    assert result["heavy"] == [], result
    assert result["kerashvd"] == ["kerashvd"], result  # hvd.Sum etc. load on first use too


def test_init_sets_the_tensorflow_defaults_that_tensorflow_has_not_read():
    code = ("import os, kerashvd as hvd\n"
            "hvd.init()\n"
            "print(os.environ.get('TF_CPU_ALLOCATOR_USE_BFC'),"
            " os.environ.get('TF_CPP_MIN_LOG_LEVEL'))\n")
    assert _run(code).split()[-2:] == ["true", "1"]
    assert _run(code, TF_CPP_MIN_LOG_LEVEL="0").split()[-2:] == ["true", "0"]
    # Read at import: too late for the log level; the allocator is read when TF starts.
    assert _run("import tensorflow\n" + code).split()[-2:] == ["true", "None"]
    started = "import tensorflow as tf\ntf.constant(1.0) + 1\n" + code
    assert _run(started).split()[-2:] == ["None", "None"]


def test_public_names_still_resolve_on_first_use():
    code = ("import kerashvd as hvd\n"
            "print(hvd.size is hvd.runtime.world.size, hvd.NotInitializedError.__name__,"
            " callable(hvd.init))\n")
    assert _run(code).split()[-3:] == ["True", "NotInitializedError", "True"]


def test_documented_module_paths_are_the_moved_modules():
    """The README names kerashvd.config and kerashvd.keras_compat; they are the very modules of
    runtime/ and training/ (monkeypatching either patches both)."""
    code = ("import kerashvd.config, kerashvd.runtime.config, kerashvd.keras_compat\n"
            "import kerashvd.training.keras_compat\n"
            "print(kerashvd.config is kerashvd.runtime.config,"
            " kerashvd.keras_compat is kerashvd.training.keras_compat,"
            " kerashvd.keras_compat.keras.__name__)\n")
    assert _run(code).split()[-3:] == ["True", "True", "keras"]


def _editable_install():
    import importlib.metadata

    try:
        text = importlib.metadata.distribution("kerashvd").read_text("direct_url.json") or ""
    except importlib.metadata.PackageNotFoundError:
        return False
    return json.loads(text or "{}").get("dir_info", {}).get("editable", False)


def test_an_editable_install_imports_callbacks_from_the_checkout():
    """pyproject.toml maps the top-level callbacks/ to kerashvd.callbacks; scikit-build-core's
    editable (redirect) install follows the mapping, so an edited or new callbacks/x.py is
    imported without reinstalling."""
    if not _editable_install():
        pytest.skip("kerashvd is not installed editable (pip install -e .)")
    code = ("import json, kerashvd.callbacks as c, kerashvd.callbacks.progress as p\n"
            "print(json.dumps([c.__path__[0], p.__file__]))\n")
    path, progress = json.loads(_run(code).splitlines()[-1])
    assert os.path.realpath(path) == os.path.join(os.path.realpath(REPO), "callbacks")
    assert os.path.realpath(progress) == os.path.join(os.path.realpath(REPO), "callbacks",
                                                      "progress.py")
