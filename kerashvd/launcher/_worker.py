"""Per-rank entry point of :func:`kerashvd.run`: ``python _worker.py DIRECTORY``.

Run by path (not ``-m``), so that a function that never touches TensorFlow does not pay for
importing the kerashvd package. Files in DIRECTORY (written by ``run_fn.py``):

- ``payload.pkl``: ``pickle((sys_path, cloudpickle((fn, args, kwargs))))``. The caller's
  ``sys.path`` is applied before ``fn`` is unpickled, so modules that cloudpickle saved by
  reference import here as they did in the caller.
- ``result.RANK.pkl``, written by each rank (atomically): ``("ok", value)`` or
  ``("error", formatted_traceback)``.

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
import traceback  # noqa: E402


def _write(directory, rank, outcome):
    import cloudpickle

    try:
        data = cloudpickle.dumps(outcome)
    except Exception:  # the return value (or exception) cannot be pickled
        what = "return value" if outcome[0] == "ok" else "exception"
        data = pickle.dumps(("error", (
            f"kerashvd.run: the {what} of fn on rank {rank} could not be pickled to send it "
            f"back to the caller; return plain Python or NumPy values.\n"
            + traceback.format_exc())))
    path = os.path.join(directory, f"result.{rank}.pkl")
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def main(argv):
    directory = argv[0]
    rank = int(os.environ.get("PMI_RANK", "0"))
    try:
        with open(os.path.join(directory, "payload.pkl"), "rb") as f:
            caller_path, blob = pickle.load(f)
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
    _write(directory, rank, outcome)
    sys.stdout.flush()
    sys.stderr.flush()
    return 0 if outcome[0] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
