"""A rank of tests/cluster/test_lost_hosts.py that notices a lost peer by itself.

``python peer_loop.py``: kerashvd.init(), prints one JSON line {"rank", "host", "pid"}, then
allreduces a scalar every 0.2 s for up to 120 s. When a peer's host is cut off, the engine's
peer monitor names it after ``KERASHVD_PEER_TIMEOUT`` and the allreduce raises on every rank
left: the rank exits with code 1, as a training script would.
"""

import json
import os
import socket
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import kerashvd as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402

hvd.init()
print(json.dumps({"rank": hvd.rank(), "host": socket.gethostname(), "pid": os.getpid()}),
      flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    hvd.allreduce(tf.constant([1.0]), name="loop")
    time.sleep(0.2)
