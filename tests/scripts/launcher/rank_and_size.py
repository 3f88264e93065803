"""Prints what kerashvd tells each rank: its rank, the size, and an allreduce of the ranks."""

import kerashvd as hvd
import tensorflow as tf

hvd.init()
total = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum)
print(f"RANK={hvd.rank()} SIZE={hvd.size()} SUM={float(total):g} "
      f"ENV_RANK={__import__('os').environ['PMI_RANK']}", flush=True)
