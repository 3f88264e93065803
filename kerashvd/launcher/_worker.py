"""Per-rank entry point of :func:`kerashvd.run`: ``python _worker.py HOST:PORT TOKEN``.

Run by path (not ``-m``), so that a function that never touches TensorFlow does not pay for
importing the kerashvd package. It talks to the caller's report server (reports.py), so that
ranks on other hosts need no shared file system:

1. ``TOKEN RANK payload``: receives ``pickle((sys_path, cloudpickle((fn, args, kwargs))))``.
   The caller's ``sys.path`` is applied before ``fn`` is unpickled, so modules that
   cloudpickle saved by reference import here as they did in the caller (the same paths on
   every host).
2. Runs ``fn``.
3. ``TOKEN RANK result LENGTH`` and the pickled outcome: ``("ok", value)`` or
   ``("error", formatted_traceback)``; waits for the server's ``ok``.

A rank whose ``fn`` raised exits with code 1, so that its supervisor tells the launcher,
which stops the other ranks.
"""

import os
import sys

# Running by path puts this directory first on sys.path; nothing here may shadow a module.
_HERE = os.path.dirname(os.path.realpath(__file__))
if sys.path and os.path.realpath(sys.path[0] or ".") == _HERE:
    del sys.path[0]

import pickle  # noqa: E402
import socket  # noqa: E402
import traceback  # noqa: E402

_TIMEOUT = 600.0  # seconds without progress on the connection to the caller


def _connect(address, token, rank, request):
    host, _, port = address.rpartition(":")
    conn = socket.create_connection((host.strip("[]"), int(port)), timeout=_TIMEOUT)
    conn.sendall(f"{token} {rank} {request}\n".encode())
    return conn


def _payload(address, token, rank):
    with _connect(address, token, rank, "payload") as conn:
        parts = []
        while chunk := conn.recv(1 << 20):
            parts.append(chunk)
    return b"".join(parts)


def _encode(rank, outcome):
    import cloudpickle

    try:
        return cloudpickle.dumps(outcome)
    except Exception:  # the return value (or exception) cannot be pickled
        what = "return value" if outcome[0] == "ok" else "exception"
        return pickle.dumps(("error", (
            f"kerashvd.run: the {what} of fn on rank {rank} could not be pickled to send it "
            f"back to the caller; return plain Python or NumPy values.\n"
            + traceback.format_exc())))


def _send_result(address, token, rank, data):
    with _connect(address, token, rank, f"result {len(data)}") as conn:
        conn.sendall(data)
        if not conn.recv(16).startswith(b"ok"):
            raise ConnectionError("the caller closed the connection before taking the result")


def main(argv):
    address, token = argv[0], argv[1]
    rank = int(os.environ.get("PMI_RANK", "0"))
    try:
        caller_path, blob = pickle.loads(_payload(address, token, rank))
        sys.path[:] = caller_path + [p for p in sys.path if p not in caller_path]
        fn, args, kwargs = pickle.loads(blob)
    except BaseException:  # noqa: B036
        outcome = ("error", "kerashvd.run: could not load fn in the rank's process:\n"
                   + traceback.format_exc())
    else:
        try:
            outcome = ("ok", fn(*args, **kwargs))
        except BaseException as err:  # noqa: B036  (SystemExit inside fn is a failure too)
            # Start the traceback at fn's frame: this file's frame is noise to the caller.
            lines = traceback.format_exception(type(err), err, err.__traceback__.tb_next)
            outcome = ("error", "".join(lines))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        _send_result(address, token, rank, _encode(rank, outcome))
    except OSError as err:
        sys.stderr.write(f"kerashvd.run: rank {rank} could not send its result to the caller "
                         f"at {address}: {err}\n")
        return 1
    return 0 if outcome[0] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
