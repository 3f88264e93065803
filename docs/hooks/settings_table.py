"""MkDocs hook: the settings page's tables, made at build time from kerashvd's own tables.

The engine's settings live in one table in C++ (``ops/core/settings.cc``), which Python sees as
``kerashvd.config.SETTINGS``: each row has its ``init()`` keyword, ``KERASHVD_*`` variable
(and Horovod's, where there is one), ``kerashvdrun`` flag, unit, default, the values it
accepts and a help line. A page line ``<!-- kerashvd:settings-table -->`` becomes a Markdown
table of those rows, so the page can never disagree with the engine.

The variables kerashvd reads or sets besides the engine's (``KERASHVD_PIN_GPU``,
``KERASHVD_RESTART_COUNT``, ...) are the rest of what ``init()`` accepts in the environment
(``kerashvd.config``'s list of them): the page describes each in prose, and the build warns,
so that ``mkdocs build --strict`` fails, when one of them is not named on the page.

Needs kerashvd installed (its compiled engine module holds the table).
"""

import logging
import re

MARKER = re.compile(r"^<!-- kerashvd:settings-table -->$", re.MULTILINE)  # a line of its own
log = logging.getLogger("mkdocs.plugins.kerashvd.settings")


def _cell(text):
    """``text`` made safe for one cell of a Markdown table."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _with_unit(value, unit):
    if not value:
        return "none"
    return f"{value} {unit}" if unit else value


def _flag(row):
    """The flag as ``kerashvdrun --help`` shows it (kerashvd/launcher/engine_flags.py)."""
    if "on" in row:  # a switch or a mode: --NAME sets "on", --no-NAME "off"
        name = row["flag"].lstrip("-")
        return f"`--{name}` / `--no-{name}`"
    value = row["flag_unit"] or ("PATH" if row["kind"] == "path" else "N")
    return f"`{row['flag']} {value.upper()}`"


def settings_table(rows):
    """Returns the Markdown table of the engine's settings ``rows`` (``config.SETTINGS``)."""
    lines = ["| `init()` keyword | variable | `kerashvdrun` flag | default | accepts | what it does |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        variable = f"`{row['variable']}`"
        if row["horovod_variable"]:
            variable += f" (or Horovod's `{row['horovod_variable']}`)"
        lines.append("| " + " | ".join(_cell(c) for c in (
            f"`{row['key']}`", variable, _flag(row), _with_unit(row["default"], row["unit"]),
            row["expected"] + (f" ({row['unit']})" if row["unit"] else ""), row["help"])) + " |")
    return "\n".join(lines)


def on_page_markdown(markdown, page, **kwargs):
    """Replaces the marker line with the table; warns about undocumented variables."""
    if not MARKER.search(markdown):
        return markdown
    from kerashvd import config  # the installed engine's table

    markdown = MARKER.sub(lambda _: settings_table(config.SETTINGS.values()), markdown)
    for name in sorted(config._OTHER_VARIABLES):
        if name not in markdown:
            log.warning("%s: kerashvd reads %s, but the page does not describe it",
                        page.file.src_uri, name)
    return markdown
