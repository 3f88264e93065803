"""Gradient buckets: which gradients share a collective, so that reduction overlaps backprop.

Backprop produces the gradients of a model's last layers first and those of its first layer
last. One collective over all gradients can only start once the last of them exists, so a
step costs its compute plus its communication. Cut into buckets, each collective waits only
for its own gradients: the TensorFlow executor starts it as soon as they exist (the
collectives are ordinary data-dependent ops in the traced train step, with no ordering among
them), and the engine reduces it while backprop computes the gradients of earlier layers. Only
the last bucket's reduction is left after backprop ends. This is PyTorch DDP's bucketing;
Horovod reaches the same with one collective per gradient that its engine fuses as they come.

The plan (:func:`plan_buckets`), a function of the gradient list's structure only (positions,
sizes, dtypes), so that it is the same on every rank:

1. Walk the dense gradients from the last position to the first: the order in which backprop
   fills them (a model's variables are listed in layer order).
2. Each dtype has one open bucket; a gradient goes into the open bucket of its dtype. When it
   would take that bucket past the cap, the bucket is closed first and a new one opened, so a
   bucket holds consecutive gradients of one dtype and never more than the cap, except a
   single gradient larger than the cap, which gets a bucket of its own.
3. Buckets are numbered in the order they become complete, i.e. by their first position,
   last first; bucket ``n`` is the collective keyed ``{prefix}.bucket{n}.{dtype}``.

A cap of 0 means no cap: one bucket per dtype, the single collective per dtype. Buckets
change how gradients are batched on the wire, never the arithmetic: the engine sums every
element in rank order whatever its bucket, so every bucketing gives the same bits.

A bucket can start no earlier than TensorFlow computes its gradients, and three things
decide that, none of them the buckets:
- The step must be traced (``fit``, or a custom loop in a ``tf.function``): eagerly,
  ``tape.gradient`` returns every gradient before any collective is made.
- TensorFlow needs a spare inter-op thread: with ``tf.config.threading.
  set_inter_op_parallelism_threads(1)`` it ran every bucket's collective after the rest of
  the step (measured with the timeline; so did any op off backprop's main chain in a
  smaller test), and nothing overlapped; with its default, one inter-op thread per core,
  each bucket started as backprop reached it.
- With ``backward_passes_per_step=k`` the k-th call reduces the accumulated sums inside one
  ``tf.cond`` after the accumulation, so its buckets start once backprop has ended.
"""


def plan_buckets(indices, sizes, dtypes, cap_bytes):
    """Returns the buckets of the gradients at ``indices``, in the order they complete.

    Args:
        indices: positions of the dense gradients in the gradient list, ascending.
        sizes: their sizes in bytes, one per index.
        dtypes: their dtype names, one per index.
        cap_bytes: the largest bucket in bytes; 0 for no cap.

    Returns:
        A list of buckets, each a list of positions in ascending order; bucket 0 holds the
        last position.

    Example:

    >>> plan_buckets([0, 1, 2, 3], [400, 400, 400, 400], ["float32"] * 4, 800)
    [[2, 3], [0, 1]]
    """
    closed = []
    open_buckets = {}  # dtype -> (positions, bytes)
    for index, size, dtype in sorted(zip(indices, sizes, dtypes), reverse=True):
        positions, total = open_buckets.get(dtype, ([], 0))
        if positions and cap_bytes and total + size > cap_bytes:
            closed.append(positions)
            positions, total = [], 0
        open_buckets[dtype] = (positions + [index], total + size)
    closed.extend(positions for positions, _ in open_buckets.values())
    # Complete when its earliest position is filled: backprop fills the highest first.
    closed.sort(key=lambda positions: -positions[-1])
    return [sorted(positions) for positions in closed]
