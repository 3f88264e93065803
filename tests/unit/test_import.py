"""``import kerashvd`` does nothing but import.

It must not change the process for other libraries: no environment variable set, no import
hook installed, no TensorFlow or Keras imported, no native library loaded. What used to happen
at import happens at ``init()`` or first use (docs/how-it-works.md).
"""

import json
import os
import shutil
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
    """The documentation names kerashvd.config and kerashvd.keras_compat; they are the very
    modules of runtime/ and training/ (monkeypatching either patches both)."""
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


# -- the package's layers (docs/how-it-works.md) ---------------------------------------------
def _lint_imports(root, *args):
    """Runs import-linter (the contracts under [tool.importlinter] in pyproject.toml) on the
    checkout at `root`; returns (exit code, its report)."""
    tool = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    if not os.path.exists(tool):
        tool = shutil.which("lint-imports")
    assert tool, "lint-imports not found: install the test extra (pip install '.[test]')"
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ["COLUMNS"] = "200"  # import-linter wraps its lines at the terminal's width
    out = subprocess.run([tool, "--no-cache", "--no-logo", *args], capture_output=True,
                         text=True, cwd=root, env=environ, timeout=120)
    return out.returncode, out.stdout + out.stderr


def test_layers_hold():
    """runtime < collectives < training (with data, straggler, timeline) < launcher < elastic <
    bench and the documented aliases; callbacks/ between the library and elastic; nothing
    below elastic reaches the library through the package's public names."""
    code, report = _lint_imports(REPO)
    assert code == 0 and "0 broken" in report, report


# One import against each contract, and how import-linter names it when it breaks.
BAD_IMPORTS = [
    ("kerashvd/runtime/world.py", "from ..training import tape\n",
     "kerashvd.runtime is not allowed to import kerashvd.training"),
    ("kerashvd/collectives/reduce_ops.py", "import kerashvd as hvd\n",
     "kerashvd.collectives.reduce_ops is not allowed to import kerashvd"),
    ("callbacks/progress.py", "from kerashvd.elastic import state\n",
     "callbacks.progress -> kerashvd.elastic.state"),
    ("kerashvd/data.py", "from . import timeline\n",
     "kerashvd.data is not allowed to import kerashvd.timeline"),
]


@pytest.mark.parametrize("path, line, message", BAD_IMPORTS, ids=[p for p, _, _ in BAD_IMPORTS])
def test_an_import_against_the_layers_breaks_a_contract(tmp_path, path, line, message):
    if _editable_install():
        pytest.skip("an editable install imports kerashvd from the checkout whatever the path, "
                    "so a changed copy cannot be checked (the wheel install of .ci/run can)")
    for name in ("kerashvd", "callbacks"):
        shutil.copytree(os.path.join(REPO, name), tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(REPO, "pyproject.toml"), tmp_path)
    with open(tmp_path / path, "a") as f:
        f.write(line)
    code, report = _lint_imports(str(tmp_path))
    assert code == 1 and message in report, report


def _package_modules():
    """{module name: (path, is a package)} for every module of kerashvd/ in the checkout."""
    modules = {}
    root = os.path.join(REPO, "kerashvd")
    for folder, _, files in os.walk(root):
        package = "kerashvd" + folder[len(root):].replace(os.sep, ".")
        for name in files:
            if name.endswith(".py"):
                init = name == "__init__.py"
                modules[package if init else f"{package}.{name[:-3]}"] = (
                    os.path.join(folder, name), init)
    return modules


def _module_level_imports(name, path, is_package, modules):
    """The kerashvd modules that `name` imports when it is imported (also under a module-level
    if/try; not inside functions or classes)."""
    import ast

    tree = ast.parse(open(path).read(), path)
    nodes = [n for top in tree.body for n in ast.walk(top)
             if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules)
    return {m for m in found if m in modules}


def test_no_import_cycles():
    """Module-level imports form no cycle (importing a module also runs the packages above it,
    which a module's own packages have begun already)."""
    def packages(module):
        parts = module.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}

    modules = _package_modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        edges = _module_level_imports(name, path, is_package, modules)
        edges |= {p for target in edges for p in packages(target)}
        graph[name] = edges - packages(name) - {name}
    done, path = set(), []

    def visit(module):
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        path.append(module)
        for target in sorted(graph[module]):
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
