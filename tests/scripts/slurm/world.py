"""One rank of a SLURM test job: prints one JSON line about the MPI world it joined.

``python world.py [--allreduce] [--collectives] [--tag TAG]``: kerashvd.init(), then {"rank",
"size", "local_rank", "local_size", "cross_rank", "cross_size", "is_homogeneous", "host" (this
process's hostname: a node of a multi-node test cluster), "procid" (SLURM_PROCID), "tag"} and,
with --allreduce, "sum": the kerashvd allreduce (Sum) of rank + 1 over the world; with
--collectives, "collectives": the failures of collectives.py's checks against numpy ([] when
every result is right). When init() raises, prints {"error": ...} and exits with code 3.
"""

import argparse
import json
import os
import socket
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--allreduce", action="store_true")
    parser.add_argument("--collectives", action="store_true")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    import kerashvd as hvd

    report = {"procid": os.environ.get("SLURM_PROCID"), "tag": args.tag}
    try:
        hvd.init()
    except RuntimeError as err:
        sys.stdout.write(json.dumps(dict(report, error=str(err))) + "\n")  # one write: ranks
        sys.stdout.flush()                                                  # share the log
        sys.exit(3)
    report.update(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                  local_size=hvd.local_size(), cross_rank=hvd.cross_rank(),
                  cross_size=hvd.cross_size(), is_homogeneous=hvd.is_homogeneous(),
                  host=socket.gethostname())
    if args.allreduce:
        import tensorflow as tf

        total = hvd.allreduce(tf.constant([hvd.rank() + 1.0]), op=hvd.Sum)
        report["sum"] = float(total.numpy()[0])
    if args.collectives:
        import collectives  # beside this script

        report["collectives"] = collectives.check(hvd)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
