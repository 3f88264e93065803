"""``import kerashvd`` does nothing but import.

It must not change the process for other libraries: no environment variable set, no import
hook installed, no TensorFlow or Keras imported, no native library loaded. What used to happen
at import happens at ``init()`` or first use (docs/how-it-works.md).
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
LAYERS = ["runtime", "collectives", "training"]  # each may import the ones before it
# The imports that go up a layer, each for a reason; anything else fails the test below.
UPWARD = {
    # init() registers the Keras classes when Keras is imported already (the module imports
    # no Keras itself; keras.saving.load_model then knows them).
    ("kerashvd.runtime.lifecycle", "kerashvd.training._keras_classes"),
    # resolve() checks a collective's process set and raises the collectives' error type.
    ("kerashvd.runtime.process_sets", "kerashvd.collectives._local_errors"),
}


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


def _imports(name, path, is_package, modules, top_level_only):
    """The kerashvd modules that `name` imports (all its imports, or only module-level ones)."""
    import ast

    tree = ast.parse(open(path).read(), path)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # also imports under a module-level if/try
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


def _layer(module):
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else None


def test_lower_layers_never_import_higher_ones():
    modules = _package_modules()
    upward = set()
    for name, (path, is_package) in modules.items():
        own = _layer(name)
        for target in _imports(name, path, is_package, modules, top_level_only=False):
            if own is not None and _layer(target) is not None and _layer(target) > own:
                upward.add((name, target))
    assert upward == UPWARD, f"imports that go up a layer: {sorted(upward - UPWARD)}"


def test_no_import_cycles():
    """Module-level imports form no cycle (importing a module also runs the packages above it,
    which a module's own packages have begun already)."""
    def packages(module):
        parts = module.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}

    modules = _package_modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        edges = _imports(name, path, is_package, modules, top_level_only=True)
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
