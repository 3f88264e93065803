"""A time limit on silence for every long-lived connection between the launcher and the ranks.

The launcher holds connections that carry nothing for most of a job: each rank's supervisor
watches the launcher through one (``reports.py``), and each rank of an elastic world is a
member of it through another (``handover.py``). When a host's link is cut or the host stops
(power, kernel panic), no FIN or RST crosses: without a limit both ends would wait on such a
connection for ever (the launcher for ranks it cannot reach, the ranks for a launcher they
cannot reach).

:func:`enable` turns on TCP keepalive with a probe every second from one second of silence
on, and ``TCP_USER_TIMEOUT``, so that the kernel ends a connection whose other end has not
answered for :func:`link_timeout` seconds, with or without data waiting to be sent: the
blocked ``recv`` then fails with ``ETIMEDOUT`` (:func:`timed_out` tells it from a close).
The probes are answered by the other host's kernel, so a busy or stopped (SIGSTOP) process
does not trip the limit; only a host that no longer answers does.

The limit follows ``KERASHVD_PEER_TIMEOUT`` (the engine's limit for a silent rank, which
every rank and the launcher see in their environment): two seconds less, at least one. A
host cut off is then named by the launcher before the ranks that lost their peers there
fail on their own, and a cut-off rank stops before it would notice by itself.

Standard library only: ``_supervisor.py`` imports it by path.
"""

import errno
import os
import socket

DEFAULT_PEER_TIMEOUT = 30.0  # the engine's default KERASHVD_PEER_TIMEOUT
MARGIN = 2.0  # seconds the launcher's limit stays below the peer timeout
_PROBE_EVERY = 1  # seconds


def link_timeout(environ=None):
    """Seconds of silence after which a connection of this job counts as lost.

    Args:
        environ: where to read ``KERASHVD_PEER_TIMEOUT`` (default ``os.environ``); a missing
            or malformed value counts as the engine's default, 30.

    Returns:
        ``KERASHVD_PEER_TIMEOUT - 2``, at least 1.

    Example:

    >>> link_timeout({"KERASHVD_PEER_TIMEOUT": "5"})
    3.0
    """
    environ = os.environ if environ is None else environ
    try:
        peer_timeout = float(environ.get("KERASHVD_PEER_TIMEOUT", "") or DEFAULT_PEER_TIMEOUT)
    except ValueError:
        peer_timeout = DEFAULT_PEER_TIMEOUT
    if not peer_timeout > 0 or peer_timeout == float("inf"):
        peer_timeout = DEFAULT_PEER_TIMEOUT
    return max(1.0, peer_timeout - MARGIN)


def enable(sock, timeout):
    """Makes the kernel end ``sock`` (a TCP socket) once its other end has not answered for
    ``timeout`` seconds. Options this system lacks are skipped."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    # Linux ends a connection by TCP_USER_TIMEOUT (milliseconds, an int) and ignores
    # TCP_KEEPCNT (at most 127) once it is set; elsewhere the probe count bounds the silence.
    for name, value in (("TCP_KEEPIDLE", _PROBE_EVERY), ("TCP_KEEPINTVL", _PROBE_EVERY),
                        ("TCP_KEEPCNT", min(127, max(1, int(timeout) // _PROBE_EVERY + 1))),
                        ("TCP_USER_TIMEOUT", min(2**31 - 1, int(timeout * 1000)))):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError:
            pass  # e.g. a Unix socket in a test, or an option the kernel refuses


def timed_out(error):
    """Whether ``error`` (an ``OSError`` from a socket) means the other end stopped
    answering, rather than that it closed the connection."""
    return isinstance(error, (TimeoutError, socket.timeout)) or \
        getattr(error, "errno", None) in (errno.ETIMEDOUT, errno.EHOSTUNREACH,
                                          errno.ENETUNREACH)
