"""Host lists (``-H host1:n1,host2:n2`` or ``--hostfile``): parsing, slot counting, and "is it
all this machine"."""

import dataclasses
import re
import socket

# A host name or IPv4/IPv6-free address as hydra accepts it in -hosts.
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


@dataclasses.dataclass(frozen=True)
class Host:
    """One entry of a host list: a name and how many processes (slots) it may run."""

    name: str
    slots: int

    def __str__(self):
        return f"{self.name}:{self.slots}"


def parse_hosts(text, flag="-H"):
    """Parses ``"host1:n1,host2:n2"`` (``:n`` optional, default 1) into a list of :class:`Host`.

    Args:
        text: the value of ``-H/--hosts``.
        flag: where ``text`` came from, for the messages.

    Returns:
        A non-empty list of :class:`Host`, in the order given.

    Raises:
        ValueError: for an empty list, an empty or malformed name, a slot count that is not a
            positive integer, or a host named twice; the message shows the bad entry.

    Example:

    >>> parse_hosts("node1:4,node2")
    [Host(name='node1', slots=4), Host(name='node2', slots=1)]
    """
    example = "Expected a comma-separated list like 'node1:4,node2:4' (':slots' defaults to 1)"
    entries = [e.strip() for e in (text or "").split(",")]
    if not text or not text.strip() or any(not e for e in entries):
        raise ValueError(f"{example}; received an empty entry in {flag} {text!r}.")
    return _checked([(entry, f"{flag} {text!r}") for entry in entries], example)


def parse_hostfile(path):
    """Reads a host file: one host a line, ``name slots=N`` (Horovod's and Open MPI's form),
    ``name:N`` or ``name`` (1 slot); ``#`` starts a comment, blank lines are skipped.

    Returns:
        A non-empty list of :class:`Host`, in file order.

    Raises:
        ValueError: for an unreadable or empty file, or a bad line (the message names the
            file and the line number).

    Example: a file holding the lines ``node1 slots=4`` and ``node2:2`` gives
    ``[Host(name='node1', slots=4), Host(name='node2', slots=2)]``.
    """
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise ValueError(f"Cannot read the host file {path!r}: {err.strerror}.") from None
    hosts = parse_host_lines(lines, path)
    if not hosts:
        raise ValueError(f"The host file {path!r} lists no host. {_LINES_EXAMPLE}.")
    return hosts


_LINES_EXAMPLE = "Expected one host per line, as 'node1 slots=4', 'node1:4' or 'node1'"


def parse_host_lines(lines, source, default_slots=1):
    """Parses host lines as in a host file (see :func:`parse_hostfile`); ``source`` names
    where they came from in messages (``source:LINE``), and a host given without a slot count
    gets ``default_slots``. An empty list (or only comments) gives ``[]``.

    Raises:
        ValueError: for a bad line or a host named twice.

    Example:

    >>> parse_host_lines(["node1 slots=4", "node2"], "discovery", default_slots=2)
    [Host(name='node1', slots=4), Host(name='node2', slots=2)]
    """
    entries = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) == 2 and parts[1].startswith("slots="):
            line = f"{parts[0]}:{parts[1][len('slots='):]}"
        elif len(parts) != 1:
            raise ValueError(f"{_LINES_EXAMPLE}; received {line!r} at {source}:{number}.")
        elif ":" not in line:
            line = f"{line}:{default_slots}"
        entries.append((line, f"{source}:{number}"))
    return _checked(entries, _LINES_EXAMPLE)


def _checked(entries, example):
    """[(entry "name[:slots]", where it came from)] -> [Host], each checked."""
    hosts, seen = [], set()
    for entry, where in entries:
        name, sep, slots_text = entry.partition(":")
        if not _NAME.match(name):
            raise ValueError(f"{example}; received the host name {name!r} in {where}.")
        if sep:
            if not slots_text.isdigit() or int(slots_text) < 1:
                raise ValueError(
                    f"{example}; the slot count must be a positive integer, "
                    f"received {entry!r} in {where}.")
            slots = int(slots_text)
        else:
            slots = 1
        if name in seen:
            raise ValueError(
                f"Host {name!r} appears twice in {where}; give it once with the sum of its "
                "slots (e.g. 'node1:8').")
        seen.add(name)
        hosts.append(Host(name, slots))
    return hosts


def check_slots(hosts, np, flag="-H", np_name="-np"):
    """Raises ``ValueError`` unless ``hosts`` have at least ``np`` slots in total.

    ``flag`` names where the hosts came from in the message (``-H`` or ``--hostfile``), and
    ``np_name`` the process count.

    Example:

    >>> check_slots(parse_hosts("a:2,b:2"), 4)
    """
    total = sum(h.slots for h in hosts)
    if total < np:
        listed = ",".join(str(h) for h in hosts)
        raise ValueError(
            f"{np_name} {np} needs {np} slots, but {flag} {listed} provides only {total}. "
            f"Add hosts or slots to {flag}, or lower {np_name}.")


def is_local(name):
    """Returns whether ``name`` is this machine (``localhost``, its host name or FQDN)."""
    return name in _LOCAL_NAMES or name in {socket.gethostname(), socket.getfqdn()}
