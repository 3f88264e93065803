"""broadcast, grouped_broadcast and broadcast_variables against numpy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import ALL_DTYPES, WORLD, assert_matches, rank_input, shape_id

SHAPES = [(), (0,), (1,), (7,), (13,), (3, 5), (2, 0, 3)]
ROOTS = sorted({0, WORLD // 2, WORLD - 1})


def _root_for(shape):
    # Spread roots over the ranks, the same choice on every rank.
    return SHAPES.index(shape) % WORLD


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_broadcast_matches_root(hvd, dtype, shape):
    root = _root_for(shape)
    key = f"broadcast/{dtype}/{shape_id(shape)}"
    mine = rank_input(key, hvd.rank(), shape, dtype)
    x = tf.constant(mine)
    got = hvd.broadcast(x, root_rank=root, name=key)
    assert got.dtype == tf.as_dtype(dtype)
    assert_matches(got.numpy(), rank_input(key, root, shape, dtype), dtype, what=f"{key} root {root}")
    assert_matches(x.numpy(), mine, dtype, what="the input must be left as it was")


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_grouped_broadcast_mixed_shapes(hvd, dtype, root):
    key = f"grouped_broadcast/{dtype}/{root}"
    shapes = [(), (7,), (3, 5), (1,)]
    mine = [rank_input(f"{key}/{i}", hvd.rank(), s, dtype) for i, s in enumerate(shapes)]
    got = hvd.grouped_broadcast([tf.constant(m) for m in mine], root_rank=root, name=key)
    assert hvd.grouped_broadcast([], root_rank=root) == []
    for i, (g, s) in enumerate(zip(got, shapes)):
        assert_matches(g.numpy(), rank_input(f"{key}/{i}", root, s, dtype), dtype, what=f"{key}/{i}")


@pytest.mark.parametrize("root", ROOTS)
def test_broadcast_variables(hvd, root):
    r = hvd.rank()
    tf_vars = [tf.Variable(np.full([2, 3], r, np.float32)), tf.Variable(r, dtype=tf.int64),
               tf.Variable(np.full([4], r % 2 == 1)), tf.Variable(np.full([3], r, np.float16))]
    keras_vars = [keras.Variable(np.full([5], r + 0.5, np.float32)),
                  keras.Variable(np.full([2, 2], r, np.int32), dtype="int32"),
                  keras.Variable(np.full([3], r, np.float64), dtype="float64")]
    hvd.broadcast_variables(tf_vars + keras_vars, root_rank=root, name=f"bv/{root}")
    np.testing.assert_array_equal(tf_vars[0].numpy(), np.full([2, 3], root, np.float32))
    assert tf_vars[1].numpy() == root and tf_vars[1].dtype == tf.int64
    np.testing.assert_array_equal(tf_vars[2].numpy(), np.full([4], root % 2 == 1))
    np.testing.assert_array_equal(tf_vars[3].numpy(), np.full([3], root, np.float16))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras_vars[0]), np.full([5], root + 0.5, np.float32))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras_vars[1]), np.full([2, 2], root, np.int32))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras_vars[2]), np.full([3], root, np.float64))


def test_broadcast_variables_inside_tf_function(hvd):
    n, r = hvd.size(), hvd.rank()
    variables = [tf.Variable(np.full([3], r, np.float32)), tf.Variable(r, dtype=tf.int32),
                 keras.Variable(np.full([2], r + 0.5, np.float32))]

    @tf.function
    def sync():
        hvd.broadcast_variables(variables, root_rank=n - 1, name="bv.fn")

    sync()
    np.testing.assert_array_equal(variables[0].numpy(), np.full([3], n - 1, np.float32))
    assert variables[1].numpy() == n - 1
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(variables[2]), np.full([2], n - 0.5, np.float32))


def test_broadcast_variables_of_a_keras_model(hvd):
    keras.utils.set_random_seed(1234 + hvd.rank())  # different initial weights per rank
    model = keras.Sequential([keras.Input([3]), keras.layers.Dense(4), keras.layers.Dense(2)])
    hvd.broadcast_variables(model.variables, root_rank=0, name="bv.model")
    weights = [w.tobytes() for w in model.get_weights()]
    everyone = hvd.allgather_object(weights, name="bv.model.check")
    assert all(w == everyone[0] for w in everyone)


def test_broadcast_in_tf_function(hvd):
    n, r = hvd.size(), hvd.rank()
    root = n - 1

    @tf.function
    def bcast(a, b, c):
        return (hvd.broadcast(a, root_rank=root, name="broadcast.fn.a"),
                hvd.broadcast(b, root_rank=0, name="broadcast.fn.b"),
                hvd.grouped_broadcast([c, c + 1], root_rank=root, name="broadcast.fn.c"))

    inputs = [(rank_input("broadcast.fn", q, (3, 2), "float32"), rank_input("broadcast.fn", q, (5,), "uint16"),
               rank_input("broadcast.fn", q, (4,), "int32")) for q in range(n)]
    a, b, (c0, c1) = bcast(*[tf.constant(v) for v in inputs[r]])
    np.testing.assert_array_equal(a.numpy(), inputs[root][0])
    np.testing.assert_array_equal(b.numpy(), inputs[0][1])
    np.testing.assert_array_equal(c0.numpy(), inputs[root][2])
    np.testing.assert_array_equal(c1.numpy(), inputs[root][2] + 1)


@pytest.mark.parametrize("dtype", [tf.uint32, tf.uint64])
def test_unsigned_32_and_64_bit_values_move_bit_for_bit(hvd, dtype):
    """Keras' random-generator state is uint32 in some releases: broadcast and allgather carry
    such tensors unchanged (the engine moves them as the signed type of their width)."""
    top = np.iinfo(dtype.as_numpy_dtype).max
    mine = np.array([top - hvd.rank(), 1 + hvd.rank(), top // 3], dtype.as_numpy_dtype)
    root = hvd.size() - 1
    for got in (hvd.broadcast(tf.constant(mine), root_rank=root),
                hvd.grouped_broadcast([tf.constant(mine)], root_rank=root)[0]):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), np.array([top - root, 1 + root, top // 3],
                                                            dtype.as_numpy_dtype))
    gathered = hvd.allgather(tf.constant(mine)).numpy()
    expected = np.concatenate([np.array([top - r, 1 + r, top // 3], dtype.as_numpy_dtype)
                               for r in range(hvd.size())])
    np.testing.assert_array_equal(gathered, expected)
    variable = tf.Variable(mine)
    hvd.broadcast_variables([variable], root_rank=root)
    assert int(variable.numpy()[0]) == int(top - root)
