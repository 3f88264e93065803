"""The documentation site (mkdocs.yml, docs/) builds with warnings as errors, and its checks work.

The build is ``python -m mkdocs build --strict``, as a contributor runs it. Its hooks
(docs/hooks/) generate the settings table from the engine's own and the API reference from the
public names, and warn about a public name without a docstring; MkDocs warns about a link to a
page or heading that does not exist, mkdocstrings about an unknown cross-reference. The second
build here breaks one of each in a copy of the sources and expects each to be named.
"""

import ast
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

README = os.path.join(REPO, "README.md")


def _build(root, site_dir):
    """Builds the site of ``root`` into ``site_dir``; returns (exit code, output)."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d",
         str(site_dir)], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


def _read(path):
    with open(path) as f:
        return f.read()


def _callbacks_all():
    tree = ast.parse(_read(os.path.join(REPO, "callbacks", "__init__.py")))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return ast.literal_eval(node.value)
    raise AssertionError("callbacks/__init__.py has no __all__")


@pytest.mark.slow
def test_site_builds_and_is_generated_from_the_code(tmp_path):
    code, output = _build(REPO, tmp_path / "site")
    assert code == 0, output
    site = tmp_path / "site"

    # The settings table is the engine's: every row, with its variable, flag and default.
    from kerashvd import config

    settings = _read(site / "settings" / "index.html")
    for row in config.SETTINGS.values():
        assert row["variable"] in settings and row["key"] in settings, row["key"]
        assert f"<code>{row['flag']}" in settings or row["flag"].lstrip("-") in settings

    # Every public name has its entry, under its public path.
    import kerashvd

    api = _read(site / "api" / "kerashvd" / "index.html")
    for name in kerashvd.__all__:
        assert f'id="kerashvd.{name}"' in api, name
    callbacks = _read(site / "api" / "callbacks" / "index.html")
    for name in _callbacks_all():
        assert f'id="kerashvd.callbacks.{name}"' in callbacks, name
    # ... with its docstring rendered, and its example as code.
    assert "Reduces a tensor over all ranks" in api
    assert 'class="language-pycon' in api or "highlight" in api

    # Nothing the site loads comes from outside it (no fonts or scripts from a CDN).
    for page in site.rglob("*.html"):
        outside = re.findall(r'(?:src|href)="(https?:)?//[^"]*"', _read(page))
        assert not outside, f"{page} loads from outside the site: {outside}"


@pytest.mark.slow
def test_missing_docstring_broken_link_and_reference_fail_the_build(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "_build_info.py")
    for name in ("docs", "kerashvd", "callbacks"):
        shutil.copytree(os.path.join(REPO, name), root / name, ignore=ignore)
    shutil.copy(os.path.join(REPO, "mkdocs.yml"), root)
    (root / "ops").mkdir()
    shutil.copy(os.path.join(REPO, "ops", "README.md"), root / "ops")

    world = root / "kerashvd" / "runtime" / "world.py"
    text = world.read_text()
    docstring = re.search(r'def local_size\(\):\n    """.*?"""\n', text, re.S)
    assert docstring, "kerashvd/runtime/world.py has no documented local_size() to break"
    world.write_text(text.replace(docstring.group(0), "def local_size():\n"))
    page = root / "docs" / "collectives.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md), "
                    "[a heading](keras.md#no-such-heading) and [a name][kerashvd.no_such_name].\n")

    code, output = _build(root, tmp_path / "site")
    assert code != 0
    warnings = "\n".join(line for line in output.splitlines()
                         if line.startswith(("WARNING", "ERROR")))
    for expected in ("kerashvd.local_size has no docstring", "no-such-page.md",
                     "no-such-heading", "kerashvd.no_such_name"):
        assert expected in warnings, output


def test_readme_is_a_front_page_that_links_into_the_docs():
    text = _read(README)
    assert len(text.splitlines()) <= 250
    # The two commands, exactly (.ci/run runs them).
    assert 'python -m pip install ".[test]" && kerashvdrun -np 2 python recipes/quickstart.py' in text
    assert "python -m pytest tests -q" in text
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert not re.match(r"[a-z]+://", link), f"README links outside the repository: {link}"
        assert os.path.exists(os.path.join(REPO, link)), f"README links to a missing {link}"
