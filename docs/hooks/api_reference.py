"""MkDocs hook: the API reference pages, generated from the public names, and their checks.

A page of ``docs/api/`` holds, where the reference goes, a line of its own

    <!-- kerashvd:api MODULE -->

with MODULE ``kerashvd`` or one of its public submodules (``kerashvd.callbacks``, ...). The hook
replaces it with one mkdocstrings block (``::: path``) per public name of MODULE:

- ``kerashvd``: ``kerashvd.__all__``, each name rendered from the module that defines it. The
  package imports its names on first use (``import kerashvd`` imports nothing else), so the
  hook asks it where each one lives. Names that are modules link to their own page.
- a submodule: its ``__all__``, read from the source by griffe. Names it shares with
  ``kerashvd`` (``kerashvd.elastic.HorovodInternalError``) link to the entry there.

Each entry gets an anchor with its public path, so any page links to it as
``[allreduce][kerashvd.allreduce]`` or ``[ModelCheckpoint][kerashvd.callbacks.ModelCheckpoint]``,
whatever module defines it.

Checks, each a warning (``mkdocs build --strict`` fails on warnings):

- every public name, and every public method or property of a public class, has a docstring
  (griffe, which mkdocstrings reads the source with, would render an empty entry); members
  the site leaves out (mkdocstrings' ``filters``: private names, the Keras callback methods
  Keras calls) need none;
- every public submodule of ``kerashvd`` has a page holding its marker, and every marker names
  a public module.

The source checkout is what is documented: ``kerashvd/`` and ``callbacks/`` (which ships as
``kerashvd.callbacks``), found beside ``mkdocs.yml``. Griffe reads them with the extension in
``griffe_docstrings.py``, as mkdocstrings does.
"""

import importlib
import logging
import os
import re
import sys

import griffe

MARKER = re.compile(r"^<!-- kerashvd:api (\S+) -->$", re.MULTILINE)
# Where griffe finds a public module in the source tree, where it is not its own name.
SOURCE_PATHS = {"kerashvd.callbacks": "callbacks"}
log = logging.getLogger("mkdocs.plugins.kerashvd.api")

_state = {}


class Entry:
    """One public name: its public path, and the path griffe reads it at (None for a public
    submodule, which has a page of its own)."""

    def __init__(self, public_path, source):
        self.public_path, self.source = public_path, source
        self.name = public_path.rsplit(".", 1)[1]


def _public_names(root):
    """{name: module that defines it, relative to kerashvd} of ``kerashvd.__all__``."""
    sys.path.insert(0, root)
    try:
        kerashvd = importlib.import_module("kerashvd")
    finally:
        sys.path.remove(root)
    return {name: kerashvd._LAZY[name] for name in kerashvd.__all__}


def _loader(root):
    extensions = griffe.load_extensions(  # as mkdocs.yml gives them to mkdocstrings
        os.path.join(root, "docs", "hooks", "griffe_docstrings.py") + ":KerashvdDocstrings",
        "griffe_inherited_docstrings")
    loader = griffe.GriffeLoader(search_paths=[root], docstring_parser="google",
                                 extensions=extensions)
    for package in ("kerashvd", *SOURCE_PATHS.values()):
        loader.load(package)
    loader.resolve_aliases(external=False)
    return loader


def _object(loader, path):
    """The griffe object at ``path``, aliases followed; None where there is none."""
    try:
        obj = loader.modules_collection.get_member(path)
        return obj.final_target if obj.is_alias else obj
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _defined_at(public_path):
    """``module.qualname`` of the imported object at ``public_path``: for a name that its module
    also picks on first use (``kerashvd.DistributedOptimizer``, the class of the Keras that
    ``tf.keras`` uses), which griffe, reading the source, cannot follow."""
    module, name = public_path.rsplit(".", 1)
    obj = getattr(importlib.import_module(module), name)
    return f"{obj.__module__}.{obj.__qualname__}" if hasattr(obj, "__qualname__") else None


def _entries(module, loader, names):
    """The Entries of ``module``'s public names; None where the source has no such module."""
    if module == "kerashvd":
        entries = []
        for name, where in sorted(names.items()):
            source = "kerashvd" + where
            if source.endswith("." + name):
                entries.append(Entry(f"kerashvd.{name}", None))
                continue
            source = f"{source}.{name}"
            if _object(loader, source) is None:
                source = _defined_at(f"kerashvd.{name}") or source
            entries.append(Entry(f"kerashvd.{name}", source))
        return entries
    found = _object(loader, SOURCE_PATHS.get(module, module))
    if found is None or not found.is_module:
        return None
    return [Entry(f"{module}.{name}", f"{found.path}.{name}")
            for name in sorted(str(name) for name in found.exports or [])]


def _has_docstring(obj):
    return bool(obj.docstring and obj.docstring.value.strip())


def _missing_docstrings(entry, loader, leave_out):
    """Public paths of ``entry`` and its public members without a docstring (a plain class
    attribute needs none: the class's docstring describes it)."""
    obj = _object(loader, entry.source)
    if obj is None:
        return [f"{entry.public_path} (griffe finds no {entry.source} in the source)"]
    missing = [] if _has_docstring(obj) else [entry.public_path]
    if obj.is_class:
        for name, member in obj.members.items():
            if leave_out(name) or member.is_alias or member.inherited or _has_docstring(member):
                continue
            if member.is_function or (member.is_attribute and "property" in member.labels):
                missing.append(f"{entry.public_path}.{name}")
    return missing


def _left_out(config):
    """A test of a member's name against mkdocstrings' ``filters`` (``!^_``: leave out)."""
    options = config["plugins"]["mkdocstrings"].config["handlers"]["python"]["options"]
    patterns = [re.compile(f[1:]) for f in options.get("filters", []) if f.startswith("!")]
    return lambda name: any(pattern.search(name) for pattern in patterns)


def on_config(config, **kwargs):
    """Reads the public names and the source, and checks every docstring once."""
    root = os.path.dirname(os.path.abspath(config.config_file_path))
    names = _public_names(root)
    loader = _loader(root)
    modules = {"kerashvd"} | {f"kerashvd.{n}" for n, where in names.items()
                              if where.endswith("." + n)}
    entries = {module: _entries(module, loader, names) for module in sorted(modules)}
    leave_out = _left_out(config)
    for module, module_entries in entries.items():
        if module_entries is None:
            log.warning("%s is public but griffe finds no module for it in the source", module)
            continue
        for entry in module_entries:
            for path in _missing_docstrings(entry, loader, leave_out) if entry.source else ():
                log.warning("%s has no docstring: every public name is documented in its "
                            "docstring (summary, Args, Returns, Raises, example)", path)
    # What kerashvd's own page documents, by the path of the object itself.
    top_level = {_object(loader, e.source) for e in entries["kerashvd"] if e.source}
    _state.update(entries=entries, loader=loader, pages={},
                  top_level={obj.path for obj in top_level if obj is not None})
    return config


def _block(entry):
    return "\n".join([f"[](){{#{entry.public_path}}}", "", f"::: {entry.source}", "    options:",
                      f'      heading: "{entry.public_path}"', f'      toc_label: "{entry.name}"',
                      ""])


def _link(entry, text):
    return f"[](){{#{entry.public_path}}}\n\n### {entry.name}\n\n{text}\n"


def reference(module):
    """The Markdown that replaces ``module``'s marker."""
    parts = []
    for entry in _state["entries"][module]:
        if entry.source is None:  # a public submodule: its own page
            parts.append(_link(entry, f"The module `{entry.public_path}`: see "
                                      f"[its page]({entry.name}.md)."))
            continue
        obj = _object(_state["loader"], entry.source)
        if module != "kerashvd" and obj is not None and obj.path in _state["top_level"]:
            top = f"kerashvd.{entry.name}"
            parts.append(_link(entry, f"The same object as [`{top}`][{top}]."))
        else:
            parts.append(_block(entry))
    return "\n".join(parts)


def on_page_markdown(markdown, page, **kwargs):
    """Replaces each marker with the reference of the module it names."""

    def replace(match):
        module = match.group(1)
        if _state["entries"].get(module) is None:
            log.warning("%s: %s is not a public module of kerashvd", page.file.src_uri, module)
            return ""
        _state["pages"][module] = page.file.src_uri
        return reference(module)

    return MARKER.sub(replace, markdown)


def on_env(env, config, files, **kwargs):
    """Warns about a public module that no page documents (every page's markdown is read by
    now)."""
    for module, module_entries in sorted(_state["entries"].items()):
        if module_entries is not None and module not in _state["pages"]:
            log.warning("%s is public but no page holds '<!-- kerashvd:api %s -->' (add "
                        "docs/api/%s.md with that line and list it in mkdocs.yml's nav)",
                        module, module, module.rsplit(".", 1)[-1])
    return env
