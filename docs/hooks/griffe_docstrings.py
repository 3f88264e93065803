"""Griffe extension: kerashvd's docstrings as the API reference should read them.

Griffe reads the source without running it. Three habits of kerashvd's code need a word to it:

1. ``Example:`` sections. Each public name's docstring ends with a runnable example headed
   ``Example:``, its ``>>>`` lines at the heading's indentation (so that doctest and a reader
   see them as they are). Griffe's Google-style parser reads ``>>>`` lines as Python sessions
   only inside an ``Examples:`` section whose lines are indented under the heading; anywhere
   else they are Markdown, where ``>>>`` becomes a quote and ``['a', 'b']`` a link. The section
   is rewritten into that shape before the docstring is parsed.
2. Docstrings set at run time. A few public objects get theirs when their module runs: a class
   whose body assigns ``__doc__`` (``SyncBatchNormalization``, one docstring for its Keras 3 and
   Keras 2 classes), or a module attribute made by a call (``gloo_built = _not_built(...)``, the
   ``Checkpoint`` namedtuple). For those, and only those, the module is imported and the
   object's own docstring taken. ``callbacks/`` is imported as ``kerashvd.callbacks``, the name
   it ships under.

3. Sphinx roles. Docstrings name other objects as ``:class:`ProcessSet``` or
   ``:func:`~kerashvd.init```, which Markdown shows as a stray ``:class:``; they become code
   (``ProcessSet``, ``init``).

mkdocs.yml gives this extension to mkdocstrings; ``docs/hooks/api_reference.py`` loads it for
its own checks, so both see the same docstrings.
"""

import importlib
import inspect
import re

import griffe

_HEADING = re.compile(r"^Examples?:[ \t]*$")
_NEXT_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:[ \t]*$")  # e.g. "Raises:" after the example
_ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj):`(~?)([^`]+)`")
# Where a package of the source tree is imported from, where it is not its own name.
_IMPORTED_AS = {"callbacks": "kerashvd.callbacks"}


def examples_section(text):
    """``text`` (a docstring, dedented) with each ``Example:`` section indented under
    ``Examples:``.

    >>> examples_section("Summary.\\n\\nExample:\\n\\n>>> 1 + 1\\n2")
    'Summary.\\n\\nExamples:\\n    >>> 1 + 1\\n    2'
    """
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if not _HEADING.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        out.append("Examples:")
        i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        while i < len(lines) and not _NEXT_SECTION.match(lines[i]):
            out.append("    " + lines[i] if lines[i].strip() else "")
            i += 1
    return "\n".join(out)


def without_roles(text):
    """``text`` with Sphinx roles made code spans (``~`` keeps the last part of the name).

    >>> without_roles("See :class:`ProcessSet` and :func:`~kerashvd.init`.")
    'See `ProcessSet` and `init`.'
    """
    return _ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`",
                     text)


def readable(text):
    """A docstring's text as the reference shows it (both rewrites above)."""
    return examples_section(without_roles(text))


def _public(obj):
    return not any(part.startswith("_") for part in obj.path.split(".")[1:])


def _set_at_run_time(obj):
    """Whether ``obj``'s docstring, absent from the source, is set when its module runs."""
    if obj.is_class:
        return "__doc__" in obj.members
    return obj.is_attribute and obj.parent.is_module and isinstance(obj.value, griffe.ExprCall)


def _runtime_docstring(obj):
    """The docstring of the imported ``obj`` if it is a class's or function's own, else None."""
    package, _, rest = obj.path.partition(".")
    module_path = obj.parent.path.replace(package, _IMPORTED_AS.get(package, package), 1)
    value = getattr(importlib.import_module(module_path), obj.name, None)
    if inspect.isclass(value):
        doc = value.__dict__.get("__doc__")
    elif inspect.isfunction(value):
        doc = value.__doc__
    else:
        return None  # an instance's __doc__ is its class's
    return inspect.cleandoc(doc) if doc and doc.strip() else None


def _objects(module):
    for member in module.members.values():
        if member.is_alias:
            continue
        yield member
        if member.is_module:
            yield from _objects(member)


class KerashvdDocstrings(griffe.Extension):
    """Reads ``Example:`` sections as examples, and takes run-time docstrings where needed."""

    def on_instance(self, *, obj, **kwargs):
        """Runs as griffe creates each object from the source."""
        if obj.docstring is not None:
            obj.docstring.value = readable(obj.docstring.value)

    def on_package(self, *, pkg, **kwargs):
        """Runs once a package is loaded: fills in the docstrings set at run time."""
        for obj in _objects(pkg):
            if obj.docstring is None and _public(obj) and _set_at_run_time(obj):
                doc = _runtime_docstring(obj)
                if doc is not None:
                    obj.docstring = griffe.Docstring(readable(doc), parent=obj)
