"""Per-rank supervisor: runs one rank's command and makes a failure stop the whole job.

Run by mpiexec on every rank, by path and with the standard library only (no TensorFlow, not
even the kerashvd package)::

    python -I _supervisor.py [--report HOST:PORT --token T] [--prefix-output] -- command...

Why it exists: hydra stops the other ranks when one is killed by a signal or exits without
MPI_Finalize, but not when one exits with a non-zero code after a clean finalize (a Python
exception in a kerashvd script does exactly that, through its atexit shutdown), nor when the
process never used MPI. Measured with mpich 5.0.2: the other ranks ran on for their full 30 s.

Protocol, per rank:
1. Start the command as a child that inherits every file descriptor (hydra's PMI_FD among
   them) and dies with the supervisor (PR_SET_PDEATHSIG), so that hydra's SIGKILL of the
   supervisor never leaves the child behind. SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 received
   by the supervisor (hydra forwards the launcher's signals) are passed on to the child; once
   the child has ended they are ignored, because a supervisor killed by a late SIGTERM while
   exiting makes hydra SIGKILL the other ranks and print its "BAD TERMINATION" banner. The
   first three mean the job is being stopped (step 4); SIGUSR1 does not: hydra sends it to
   every other process when one fails while its auto-cleanup is off (kerashvdrun's elastic
   mode), as MPICH's notice of a failed process.
2. Copy the child's stdout and stderr line by line, each line passed on in one write, so that
   lines of different ranks cannot interleave within a line: a program may write a line in
   pieces (with PYTHONUNBUFFERED=1, common in batch jobs, print() writes its text and the
   newline separately), and hydra passes every piece on as it comes. From stderr, leave out
   TensorFlow's startup notices (see _is_tf_notice: lines TensorFlow writes at import and
   device setup before it reads TF_CPP_MIN_LOG_LEVEL, the same on every rank) unless
   TF_CPP_MIN_LOG_LEVEL is 0. With --prefix-output, put "[rank] " before every line. (hydra
   itself still cuts a line of more than about 1 KiB into pieces, which can interleave with
   another rank's output.)
3. With --report, hold a connection to the launcher ("TOKEN RANK watch HOST", reports.py)
   while the child runs. It closes when the launcher process ends, however it ends (SIGKILL,
   a notebook kernel that dies), and times out when the launcher's host stops answering for
   the link timeout (keepalive.py: a cut link): the supervisor then stops the child as the
   launcher would have (SIGTERM, then SIGKILL after a grace time), so no rank trains on as an
   orphan. Once the child has ended, the supervisor writes "bye" on it (after its failure
   report, if any): a watch that ends without it tells the launcher that this rank was lost
   (watches.py).
4. When the child ends with a non-zero status and the supervisor was not told to stop, send
   one line "TOKEN RANK RETURNCODE HOST" to the launcher's report address; the launcher stops
   the job on the first report and returns that rank's code. If there is no launcher to tell,
   the supervisor ends itself with SIGKILL, which makes hydra stop the other ranks.
5. Remove the MPICH shared-memory segments of this host that no live process uses
   (shm_segments.py): before starting the child, every dead one (left by a job killed earlier,
   whose name a later job may reuse); after it ended, those that appeared while it ran (a rank
   killed before MPI_Finalize leaves its job's segment, and the last rank of the job on this
   host to end removes it).
6. Exit with the child's code (128 + N for a child killed by signal N).

The child's environment is the supervisor's plus TensorFlow's defaults that kerashvd prefers,
where unset (``runtime/tf_defaults.py``: the pooling CPU allocator, no C++ INFO lines).

In kerashvdrun's elastic mode (``KERASHVD_ELASTIC`` set), a rank must outlive the end of its
world long enough to hand its last commit over (``handover.py``), but hydra ends a world that
lost a host by SIGKILLing each supervisor's process group, and the child's parent-death signal
would follow. So there the child runs in a session of its own, with SIGTERM as its
parent-death signal: ``hvd.elastic.run`` turns SIGTERM into a hand-over, and the rank's own
connection to kerashvdrun bounds how long it can outlive its world (``elastic/
launcher_link.py``). Everything else (output, reports, the watch) is as above while the
supervisor lives.
"""

import ctypes
import importlib.util
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)  # run by path, with -I
import keepalive  # noqa: E402
import shm_segments  # noqa: E402


def _load_by_path(name, path):
    """The module in file ``path`` (this script imports no package, not even kerashvd's)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tf_defaults = _load_by_path("tf_defaults", os.path.join(_HERE, os.pardir, "runtime",
                                                        "tf_defaults.py"))

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_ORPHAN_GRACE = 5.0  # seconds between SIGTERM and SIGKILL when the launcher is gone
_HOST = socket.gethostname().split()[0] if socket.gethostname().strip() else "?"
_USAGE = ("usage: python -I _supervisor.py [--report HOST:PORT --token TOKEN] "
          "[--prefix-output] -- command [args...]")


def _parse(argv):
    if "--" not in argv:
        raise SystemExit(f"kerashvd supervisor: expected '--' before the command. {_USAGE}")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    parsed = {"report": None, "token": "", "prefix_output": False}
    i = 0
    while i < len(options):
        name = options[i]
        if name in ("--report", "--token") and i + 1 < len(options):
            parsed[name[2:]] = options[i + 1]
            i += 2
        elif name == "--prefix-output":
            parsed["prefix_output"] = True
            i += 1
        else:
            raise SystemExit(f"kerashvd supervisor: unknown option {name!r}. {_USAGE}")
    if not command:
        raise SystemExit(f"kerashvd supervisor: no command after '--'. {_USAGE}")
    return parsed, command


def _die_with_parent(elastic=False):
    """Returns a preexec_fn that makes the child get SIGKILL when this process dies; with
    ``elastic``, SIGTERM, and the child gets a session of its own (see the module doc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    signum = signal.SIGTERM if elastic else signal.SIGKILL

    def preexec():
        if elastic:
            os.setsid()
        prctl(_PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signum)
    return preexec


def _write_all(fd, data):
    while data:
        try:
            written = os.write(fd, data)
        except OSError:
            return  # our stdout is gone; keep draining the child anyway
        data = data[written:]


# TensorFlow's startup notices: harmless, printed by every rank, and mostly written before
# TensorFlow reads TF_CPP_MIN_LOG_LEVEL (absl logs to stderr until it is initialized), so that
# setting it cannot hide them. Matched by source file and message start, nothing broader.
_TF_LOG_LINE = re.compile(
    rb"(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] )"
    rb"(?:\S*/)?(\w+)\.cc:\d+\] (.*)")
_NO_DRIVER = re.compile(rb"failed call to cuInit: .*\(303\)")  # no CUDA driver installed
_TF_NOTICES = {
    b"cudart_stub": re.compile(rb"Could not find cuda drivers on your machine"),
    b"cuda_platform": _NO_DRIVER,
    b"cuda_driver": _NO_DRIVER,
    b"cpu_feature_guard": re.compile(rb"This TensorFlow binary is optimized to use"),
    b"port": re.compile(rb"oneDNN custom operations are on"),
    b"cuda_dnn": re.compile(rb"Unable to register cuDNN factory"),
    b"cuda_fft": re.compile(rb"Unable to register cuFFT factory"),
    b"cuda_blas": re.compile(rb"Unable to register cuBLAS factory"),
    b"computation_placer": re.compile(rb"computation placer already registered"),
}
_OTHER_TF_NOTICES = re.compile(
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    rb"STDERR|To enable the following instructions: .* rebuild TensorFlow with the "
    rb"appropriate compiler flags\.")
_SEGMENT = re.compile(rb"[^\r\n]*(?:\r\n|\n|\r)")
_PARTIAL_LINE_WAIT = 0.1  # seconds before an unfinished line (a progress bar) is passed on
_COPY_AFTER_EXIT = 5.0  # seconds to finish copying output once the child has ended


def _is_tf_notice(line):
    """Whether ``line`` (bytes) is one of TensorFlow's startup notices."""
    text = line.rstrip(b"\r\n")
    if _OTHER_TF_NOTICES.fullmatch(text):
        return True
    match = _TF_LOG_LINE.fullmatch(text)
    notice = match and _TF_NOTICES.get(match.group(1))
    return bool(notice and notice.match(match.group(2)))


def _copy(source, fd, prefix=b"", drop=None):
    """Copies the pipe ``source`` to ``fd`` line by line, leaving out lines ``drop`` accepts.

    With a ``prefix`` every line starts with it (and a line is passed on once complete);
    without, a line ends at a newline or carriage return and an unfinished one is passed on
    after :data:`_PARTIAL_LINE_WAIT` without more output, so progress bars still move.
    """
    read_fd, pending = source.fileno(), b""
    while True:
        if pending and not prefix and not select.select([read_fd], [], [], _PARTIAL_LINE_WAIT)[0]:
            _write_all(fd, pending)
            pending = b""
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        pending += chunk
        if prefix:
            *lines, pending = pending.split(b"\n")
            lines = [line + b"\n" for line in lines]
        else:
            lines = _SEGMENT.findall(pending)
            pending = pending[sum(map(len, lines)):]
        if len(pending) > 65536:  # a very long line without its end: pass it on now
            lines.append(pending + (b"\n" if prefix else b""))
            pending = b""
        kept = [prefix + line for line in lines if drop is None or not drop(line)]
        if kept:
            _write_all(fd, b"".join(kept))
    if pending and (drop is None or not drop(pending)):
        _write_all(fd, prefix + pending + (b"\n" if prefix else b""))
    source.close()


def _report(options, rank, returncode):
    """Tells the launcher that this rank failed; returns an error text, or None on success."""
    if not options["report"]:
        return "no launcher address was given (--report)"
    try:
        with socket.create_connection(_address(options), timeout=10) as conn:
            conn.sendall(f"{options['token']} {rank} {returncode} {_HOST}\n".encode())
            conn.recv(16)  # the launcher answers (or closes) once it has the report
    except (OSError, ValueError) as err:
        return f"could not reach the launcher at {options['report']}: {err}"
    return None


def _address(options):
    host, _, port = options["report"].rpartition(":")
    return host, int(port)


def _stop_orphan(state, rank, why):
    """The launcher is gone: SIGTERM the child, SIGKILL it after the grace time."""
    child = state["child"]
    if child.poll() is not None:
        return
    state["stopped"] = True  # no failure report: there is nobody to tell
    try:
        sys.stderr.write(f"kerashvd: rank {rank}: {why}; stopping this rank.\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # the launcher's pipes may be gone with it
    child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _ORPHAN_GRACE
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if child.poll() is None:
        child.kill()


def _watch_launcher(options, state, rank):
    """Holds the watch connection; stops the child when the launcher closes it or stops
    answering (step 3)."""
    timeout = keepalive.link_timeout()
    try:
        conn = socket.create_connection(_address(options), timeout=10)
        keepalive.enable(conn, timeout)
        conn.sendall(f"{options['token']} {rank} watch {_HOST}\n".encode())
        conn.settimeout(None)
        state["watch"] = conn
    except ConnectionRefusedError:
        state["watch_ready"].set()
        _stop_orphan(state, rank, f"the launcher at {options['report']} is gone")
        return
    except (OSError, ValueError) as err:
        state["watch_ready"].set()
        sys.stderr.write(f"kerashvd: rank {rank}: cannot keep a connection to the launcher at "
                         f"{options['report']} ({err}); this rank will not stop by itself if "
                         "the launcher dies.\n")
        return
    state["watch_ready"].set()
    why = "the launcher (kerashvdrun or kerashvd.run) has ended"
    try:
        while conn.recv(64):
            pass  # the launcher never writes; an empty read means it closed
    except OSError as err:
        if keepalive.timed_out(err):
            why = (f"the launcher at {options['report']} stopped answering (nothing came back "
                   f"for {timeout:g} s: a cut link, or its host is down)")
    _stop_orphan(state, rank, why)


def _say_goodbye(state):
    """Tells the launcher, on the watch connection, that this rank has ended (step 3)."""
    state["watch_ready"].wait(timeout=15)  # a rank that ends at once: the watch may be opening
    conn = state["watch"]
    if conn is None:
        return
    try:
        conn.settimeout(5)
        conn.sendall(b"bye\n")
    except OSError:
        pass  # the launcher is gone, or stopped answering


def main(argv):
    options, command = _parse(argv)
    rank = os.environ.get("PMI_RANK", "?")
    state = {"child": None, "pending": [], "stopped": False, "watch": None,
             "watch_ready": threading.Event()}  # cleared while the watch is being opened
    state["watch_ready"].set()

    def forward(signum, frame):
        if signum in _STOPPING:
            state["stopped"] = True
        if state["child"] is None:
            state["pending"].append(signum)
        else:
            state["child"].send_signal(signum)

    for signum in _FORWARDED:
        signal.signal(signum, forward)

    quiet = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() != "0"
    copiers = []
    # A job killed earlier on this host may have left its segment; one of a later job with the
    # same PMI name (SLURM job and step id) would make MPI_Init fail. Dead ones go first.
    shm_segments.remove_dead()
    segments_before = shm_segments.segments()
    try:
        child = subprocess.Popen(
            command, close_fds=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=tf_defaults.with_defaults(os.environ),
            preexec_fn=_die_with_parent(elastic=bool(os.environ.get("KERASHVD_ELASTIC"))))
    except OSError as err:
        sys.stderr.write(f"kerashvd: rank {rank}: cannot run {command[0]!r}: {err}\n")
        returncode = 126 if isinstance(err, PermissionError) else 127
    else:
        state["child"] = child
        for signum in state["pending"]:
            child.send_signal(signum)
        if options["report"]:
            state["watch_ready"].clear()
            threading.Thread(target=_watch_launcher, args=(options, state, rank),
                             daemon=True).start()
        prefix = f"[{rank}] ".encode() if options["prefix_output"] else b""
        for source, fd in ((child.stdout, 1), (child.stderr, 2)):
            drop = _is_tf_notice if quiet and fd == 2 else None
            copier = threading.Thread(target=_copy, args=(source, fd, prefix, drop), daemon=True)
            copier.start()
            copiers.append(copier)
        returncode = child.wait()
    # Ignore further signals: Python's shutdown resets handled signals to SIG_DFL, and a rank
    # that dies of hydra's forwarded SIGTERM while exiting makes hydra SIGKILL the others and
    # print its "BAD TERMINATION" banner.
    for signum in _FORWARDED:
        signal.signal(signum, signal.SIG_IGN)
    for copier in copiers:  # a grandchild that kept the pipe open must not hold us here
        copier.join(timeout=_COPY_AFTER_EXIT)
    shm_segments.remove_dead(segments_before)

    if returncode != 0 and not state["stopped"]:
        problem = _report(options, rank, returncode)
        if problem is not None:
            status = (f"exited with code {returncode}" if returncode >= 0
                      else f"was killed by signal {-returncode}")
            sys.stderr.write(
                f"kerashvd: rank {rank} {status}; {problem}. Ending this rank with SIGKILL so "
                "that mpiexec stops the other ranks.\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    _say_goodbye(state)
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
