"""numpy references for the collective tests.

Every rank can compute every other rank's input (``rank_input`` is seeded by a key and the
rank), so each rank computes the expected result of a collective locally and compares.

Inputs are chosen so that references are exact whatever order MPI adds them in: floats are
small multiples of a power of two (their sums are exact in float32), products use factors
from {±0.5, ±1, ±1.5, ±2}, and integer ranges cannot overflow at 4 ranks. Sums of float16 and
bfloat16 inputs are wider than the half type, so the result must be the exact (float32) sum
rounded once: the engine reduces halves in float32.
"""

import os
import zlib

import numpy as np
import tensorflow as tf

WORLD = int(os.environ.get("KHVD_TEST_WORLD", "1"))

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("int8", "uint8", "int32", "int64")
REDUCE_DTYPES = FLOAT_DTYPES + INT_DTYPES
ALL_DTYPES = REDUCE_DTYPES + ("bool", "int16", "uint16")
HALF_DTYPES = ("float16", "bfloat16")

OPS = ("Average", "Sum", "Min", "Max", "Product")

# Element counts 0, 1, 7, 13 and 15 (divide by none of 2, 3, 4), 12 (divides by all), and
# multi-dimensional shapes, one of them 0-size.
SHAPES = [(), (0,), (1,), (7,), (12,), (13,), (3, 5), (2, 0, 3), (5, 1, 3)]


def shape_id(shape):
    return "x".join(map(str, shape)) if shape else "scalar"


def np_dtype(dtype):
    return tf.as_dtype(dtype).as_numpy_dtype


def seed_of(key, rank):
    return np.random.default_rng([zlib.crc32(key.encode()), rank])


def rank_input(key, rank, shape, dtype, kind="sum"):
    """The deterministic input of ``rank`` for the collective keyed ``key``.

    kind: "sum" (values whose sums over 4 ranks are exact and in range) or "product"
    (values whose products over 4 ranks are exact and in range).
    """
    dtype = tf.as_dtype(dtype).name
    rng = seed_of(f"{key}/{dtype}/{kind}", rank)
    n = int(np.prod(shape, dtype=np.int64))
    if kind == "product":
        if dtype in FLOAT_DTYPES:
            values = rng.choice([-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0], size=n)
        elif dtype == "uint8":
            values = rng.integers(1, 4, size=n)
        else:
            values = rng.choice([-3, -2, -1, 1, 2, 3], size=n)
    elif dtype == "float16":
        values = rng.integers(-2000, 2001, size=n) / 128.0   # 11 significant bits
    elif dtype == "bfloat16":
        values = rng.integers(-255, 256, size=n) / 16.0      # 8 significant bits
    elif dtype in ("float32", "float64"):
        values = rng.integers(-100000, 100001, size=n) / 64.0
    elif dtype == "int8":
        values = rng.integers(-30, 31, size=n)
    elif dtype == "uint8":
        values = rng.integers(0, 61, size=n)
    elif dtype == "int16":
        values = rng.integers(-30000, 30001, size=n)
    elif dtype == "uint16":
        values = rng.integers(0, 65536, size=n)
    elif dtype == "int32":
        values = rng.integers(-10**8, 10**8, size=n)
    elif dtype == "int64":
        values = rng.integers(-10**15, 10**15, size=n)
    elif dtype == "bool":
        values = rng.integers(0, 2, size=n).astype(bool)
    else:
        raise ValueError(f"no test inputs for dtype {dtype}")
    return np.asarray(values).reshape(shape).astype(np_dtype(dtype))


def all_inputs(key, shape, dtype, size, kind="sum"):
    return [rank_input(key, r, shape, dtype, kind) for r in range(size)]


def reduce_reference(inputs, dtype, op, size, prescale=1.0, postscale=1.0):
    """The allreduce of ``inputs`` (one array per rank) as the engine defines it.

    Returns the expected array in ``dtype``. Floats are reduced exactly (float64 holds every
    partial sum of the inputs above exactly) and rounded once to ``dtype``; integer Average
    truncates toward zero.
    """
    dtype = tf.as_dtype(dtype)
    target = dtype.as_numpy_dtype
    if op in ("Min", "Max"):
        fn = np.minimum if op == "Min" else np.maximum
        out = inputs[0]
        for x in inputs[1:]:
            out = fn(out, x)
        return np.asarray(out, target)
    if dtype.is_floating:
        wide = [np.asarray(x, np.float64) * prescale for x in inputs]
        if op == "Product":
            out = np.prod(np.stack(wide), axis=0)
        else:
            out = np.sum(np.stack(wide), axis=0)
        scale = postscale / size if op == "Average" else postscale
        return np.asarray(out * scale).astype(target)
    wide = [np.asarray(x, np.int64) for x in inputs]
    if prescale != 1.0:
        wide = [np.trunc(x * prescale).astype(np.int64) for x in wide]
    out = np.prod(np.stack(wide), axis=0) if op == "Product" else np.sum(np.stack(wide), axis=0)
    scale = postscale / size if op == "Average" else postscale
    if scale != 1.0:
        out = np.trunc(out * scale).astype(np.int64)
    return out.astype(target)


def scatter_rows(rows, rank, size):
    """(start, stop) of ``rank``'s rows of a reducescatter: the first rows % size get one extra."""
    base, extra = divmod(rows, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def tolerance(dtype, op):
    """(rtol, atol) for comparing a result with ``reduce_reference``; (0, 0) means exact.

    Sums, Min, Max and Product of the inputs above are exact. Average multiplies by 1/size,
    which the engine may round differently from the reference (one ulp of the type).
    """
    dtype = tf.as_dtype(dtype)
    if op != "Average" or not dtype.is_floating:
        return 0.0, 0.0
    eps = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}[dtype.name]
    return eps, eps


def assert_matches(got, expected, dtype, op="Sum", what=""):
    """Asserts an engine result equals the reference (within ``tolerance``), with a clear diff."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != expected {expected.shape}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != expected {expected.dtype}"
    rtol, atol = tolerance(dtype, op)
    if rtol == 0 and atol == 0:
        if not np.array_equal(got, expected):
            bad = np.argwhere(got != expected)[:5]
            raise AssertionError(
                f"{what}: {int(np.sum(got != expected))} of {got.size} elements differ; first at "
                f"{bad.tolist()}: got {[got[tuple(i)] for i in bad]}, expected "
                f"{[expected[tuple(i)] for i in bad]}")
        return
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               rtol=rtol, atol=atol, err_msg=what)

