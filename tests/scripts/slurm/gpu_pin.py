"""One rank of a SLURM test job: prints which GPU kerashvd would pin it to, as JSON.

No GPU is needed: the job's fake GPUs (tests/fixtures/slurm_cluster.py, tests/fixtures/multinode_cluster.py)
give each task a ``CUDA_VISIBLE_DEVICES``, the list TensorFlow would number as its GPUs, and
kerashvd's pinning rule (kerashvd.runtime.gpu_pinning.choose_gpu) picks from it by local rank.
Prints
{"rank", "host", "local_rank", "local_size", "slurm_localid", "visible" (the list),
"pinned" (the device kept, or null: leave the visible GPU(s) as they are)}. TensorFlow is not
imported (init(pin_gpu=False)), so this takes seconds.
"""

import json
import os
import socket
import sys


def main():
    import kerashvd as hvd
    from kerashvd.runtime.gpu_pinning import choose_gpu, host_gpu_count

    hvd.init(pin_gpu=False)
    listed = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    visible = listed.split(",")[:host_gpu_count()] if listed else []
    report = {"rank": hvd.rank(), "host": socket.gethostname(), "local_rank": hvd.local_rank(),
              "local_size": hvd.local_size(), "slurm_localid": os.environ.get("SLURM_LOCALID"),
              "visible": visible,
              "pinned": choose_gpu(visible, hvd.local_rank(), hvd.local_size())}
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
