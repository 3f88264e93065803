"""allreduce and grouped_allreduce against numpy, at any world size.

Each rank's input differs (seeded by the rank) and every rank recomputes all inputs, so the
expected result is computed locally. See tests/fixtures/reference.py for why the references are exact.
"""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import (FLOAT_DTYPES, HALF_DTYPES, OPS, REDUCE_DTYPES, all_inputs,
                        assert_matches, rank_input, reduce_reference, shape_id)

# Counts 0, 1 (as a scalar and as a vector), 7, 13 (divides by none of 2, 3, 4), 15 as a 2-D
# shape, and a 0-size 3-D shape.
SHAPES = [(), (0,), (1,), (7,), (13,), (3, 5), (2, 0, 3)]


def _op(hvd, name):
    return getattr(hvd, name)


def _kind(op):
    return "product" if op == "Product" else "sum"


# Sum and Average (rounding, scaling) get every shape; Min, Max and Product fewer, to keep the
# suite fast at 4 ranks on 2 cores.
OP_SHAPES = [(op, s) for op in ("Average", "Sum") for s in SHAPES] + \
    [(op, s) for op in ("Min", "Max", "Product") for s in [(), (0,), (13,), (3, 5)]]


@pytest.mark.parametrize("op,shape", OP_SHAPES, ids=[f"{op}-{shape_id(s)}" for op, s in OP_SHAPES])
@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
def test_allreduce_matches_numpy(hvd, dtype, op, shape):
    key = f"allreduce/{dtype}/{op}/{shape_id(shape)}"
    inputs = all_inputs(key, shape, dtype, hvd.size(), _kind(op))
    got = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=_op(hvd, op), name=key)
    assert got.dtype == tf.as_dtype(dtype) and got.shape == shape
    assert_matches(got.numpy(), reduce_reference(inputs, dtype, op, hvd.size()), dtype, op, key)


@pytest.mark.parametrize("op", ["Sum", "Average"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ("int32",))
def test_prescale_postscale(hvd, dtype, op):
    shape = (13,)
    key = f"allreduce.scaled/{dtype}/{op}"
    inputs = all_inputs(key, shape, dtype, hvd.size())
    pre, post = (2.0, 3.0) if dtype == "int32" else (0.5, 3.0)
    got = hvd.allreduce(tf.constant(inputs[hvd.rank()]), op=_op(hvd, op), prescale_factor=pre,
                        postscale_factor=post, name=key)
    expected = reduce_reference(inputs, dtype, op, hvd.size(), prescale=pre, postscale=post)
    assert_matches(got.numpy(), expected, dtype, op, key)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_halves_are_summed_in_their_own_type_alike_on_every_rank(hvd, dtype):
    """float16 and bfloat16 travel and are summed in their own type (half float32's bytes),
    each step rounded to it, as MPI and NCCL sum them: the result is within one rounding per
    rank of the exact sum, and has the same bits on every rank whatever order the algorithm
    added the ranks' values in (values of the full range, so the steps do round)."""
    n, r = hvd.size(), hvd.rank()
    np_half = tf.as_dtype(dtype).as_numpy_dtype
    values = [np.random.default_rng([11, q]).uniform(-100, 100, 4096).astype(np_half)
              for q in range(n)]
    for fused in (False, True):
        name = f"allreduce.halfsum/{dtype}/{'fused' if fused else 'alone'}"
        x = tf.constant(values[r])
        got = (hvd.grouped_allreduce([x, x[:5]], op=hvd.Sum, name=name)[0] if fused
               else hvd.allreduce(x, op=hvd.Sum, name=name)).numpy()
        exact = np.sum([v.astype(np.float64) for v in values], axis=0)
        ulp = {"float16": 2.0**-10, "bfloat16": 2.0**-7}[dtype]
        bound = (n - 1) * ulp * np.abs(np.stack([v.astype(np.float64) for v in values])).sum(axis=0) * 2
        assert np.all(np.abs(got.astype(np.float64) - exact) <= bound + 1e-12), name
        bits = hvd.allgather(tf.constant(got.view(np.uint16)[None]), name=name + "/bits").numpy()
        assert all(np.array_equal(bits[0], b) for b in bits), f"{name}: ranks got different bits"


GROUP_SHAPES = [(), (7,), (3, 5), (1,), (2, 1, 3)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
def test_grouped_allreduce_mixed_shapes(hvd, dtype, op):
    key = f"grouped_allreduce/{dtype}/{op}"
    inputs = [all_inputs(f"{key}/{i}", s, dtype, hvd.size(), _kind(op))
              for i, s in enumerate(GROUP_SHAPES)]
    got = hvd.grouped_allreduce([tf.constant(x[hvd.rank()]) for x in inputs], op=_op(hvd, op),
                                name=key)
    assert len(got) == len(GROUP_SHAPES)
    for i, (g, x) in enumerate(zip(got, inputs)):
        assert_matches(g.numpy(), reduce_reference(x, dtype, op, hvd.size()), dtype, op, f"{key}/{i}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_grouped_allreduce_with_zero_size_members(hvd, dtype):
    shapes = [(0,), (7,), (2, 0, 3), ()]
    key = f"grouped_allreduce.zero/{dtype}"
    inputs = [all_inputs(f"{key}/{i}", s, dtype, hvd.size()) for i, s in enumerate(shapes)]
    got = hvd.grouped_allreduce([tf.constant(x[hvd.rank()]) for x in inputs], op=hvd.Sum, name=key)
    for i, (g, x) in enumerate(zip(got, inputs)):
        assert_matches(g.numpy(), reduce_reference(x, dtype, "Sum", hvd.size()), dtype, "Sum", f"{key}/{i}")


def test_grouped_allreduce_scaled_and_empty_list(hvd):
    key = "grouped_allreduce.scaled"
    inputs = [all_inputs(f"{key}/{i}", s, "float32", hvd.size()) for i, s in enumerate(GROUP_SHAPES)]
    got = hvd.grouped_allreduce([tf.constant(x[hvd.rank()]) for x in inputs], op=hvd.Average,
                                prescale_factor=0.25, postscale_factor=4.0, name=key)
    empty = hvd.grouped_allreduce([], name="grouped_allreduce.empty")
    assert empty == []
    for g, x in zip(got, inputs):
        expected = reduce_reference(x, "float32", "Average", hvd.size(), 0.25, 4.0)
        assert_matches(g.numpy(), expected, "float32", "Average", key)


def test_allreduce_default_names_and_variable_input(hvd):
    # Unnamed collectives are keyed by a per-kind call counter, the same on every rank.
    v = tf.Variable(np.full([3], hvd.rank() + 1, np.float32))
    a = hvd.allreduce(v, op=hvd.Sum)
    b = hvd.allreduce(tf.constant([float(hvd.rank())]), op=hvd.Max)
    c = hvd.allreduce(tf.constant(2.0))  # default op: Average
    d = hvd.allreduce(tf.constant([float(hvd.rank())]), average=True)  # deprecated Horovod argument
    e = hvd.allreduce(tf.constant([float(hvd.rank())]), average=False)
    n = hvd.size()
    assert d.numpy()[0] == (n - 1) / 2 and e.numpy()[0] == n * (n - 1) / 2
    np.testing.assert_array_equal(a.numpy(), np.full([3], n * (n + 1) / 2, np.float32))
    np.testing.assert_array_equal(b.numpy(), [n - 1.0])
    assert c.numpy() == 2.0
    np.testing.assert_array_equal(v.numpy(), np.full([3], hvd.rank() + 1, np.float32))


def test_allreduce_does_not_modify_its_input(hvd):
    x = tf.constant(rank_input("allreduce.input_kept", hvd.rank(), (5,), "float32"))
    before = x.numpy().copy()
    hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, name="allreduce.input_kept")
    np.testing.assert_array_equal(x.numpy(), before)


def test_same_name_with_new_shapes_on_every_rank(hvd):
    """A name reused with another signature (on all ranks alike) is renegotiated, not mismatched."""
    n, r = hvd.size(), hvd.rank()
    results = []
    for k in [2, 3, 2, 5, 5, 1]:
        results.append((k, hvd.allreduce(tf.fill([k], float(r + 1)), op=hvd.Sum, name="allreduce.reshaped"),
                        hvd.allgather(tf.fill([k + r, 2], r), name="allgather.reshaped")))
    for k, reduced, gathered in results:
        np.testing.assert_array_equal(reduced.numpy(), np.full([k], n * (n + 1) / 2, np.float32))
        np.testing.assert_array_equal(gathered.numpy(),
                                      np.concatenate([np.full([k + q, 2], q, np.int32) for q in range(n)]))


def test_collectives_submitted_in_different_orders_on_different_ranks(hvd):
    """Negotiation matches collectives by name, whatever order each rank submits them in."""
    n, r = hvd.size(), hvd.rank()
    names = [f"allreduce.order/{i}" for i in range(4)]
    order = names if r % 2 == 0 else names[::-1]
    results = {}

    def submit(name):
        results[name] = hvd.allreduce(tf.constant([float(r), 1.0]), op=hvd.Sum, name=name)

    threads = []
    for name in order:
        threads.append(threading.Thread(target=submit, args=(name,)))
        threads[-1].start()
        time.sleep(0.02)
    for t in threads:
        t.join()
    for name in names:
        np.testing.assert_array_equal(results[name].numpy(), [n * (n - 1) / 2, n])


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_allreduce_with_compression(hvd, compression):
    key = f"allreduce.compressed/{compression}"
    wire = "float16" if compression == "fp16" else "bfloat16"
    inputs = all_inputs(key, (7,), wire, hvd.size())  # exactly representable on the wire
    x = tf.constant(inputs[hvd.rank()].astype(np.float32))
    got = hvd.allreduce(x, op=hvd.Sum, compression=getattr(hvd.Compression, compression), name=key)
    assert got.dtype == tf.float32
    expected = reduce_reference(inputs, wire, "Sum", hvd.size()).astype(np.float32)
    assert_matches(got.numpy(), expected, "float32", "Sum", key)


def test_allreduce_indexed_slices(hvd):
    r = hvd.rank()
    slices = tf.IndexedSlices(tf.fill([r + 1, 2], float(r + 1)), tf.range(r + 1, dtype=tf.int64),
                              dense_shape=tf.constant([8, 2], tf.int64))
    got = hvd.allreduce(slices, op=hvd.Sum, name="allreduce.slices")
    averaged = hvd.allreduce(slices, op=hvd.Average, name="allreduce.slices.avg")
    assert isinstance(got, tf.IndexedSlices)
    n = hvd.size()
    np.testing.assert_array_equal(averaged.values.numpy(), got.values.numpy() / n)
    np.testing.assert_array_equal(averaged.indices.numpy(), got.indices.numpy())
    for op in (hvd.Max, hvd.Min, hvd.Product):
        with pytest.raises(NotImplementedError, match="op=Average or op=Sum"):
            hvd.allreduce(slices, op=op)
    expected_values = np.concatenate([np.full([q + 1, 2], q + 1.0, np.float32) for q in range(n)])
    expected_indices = np.concatenate([np.arange(q + 1) for q in range(n)])
    np.testing.assert_array_equal(got.values.numpy(), expected_values)
    np.testing.assert_array_equal(got.indices.numpy(), expected_indices)
    dense = tf.convert_to_tensor(got).numpy()
    expected_dense = np.zeros([8, 2], np.float32)
    for q in range(n):
        expected_dense[:q + 1] += q + 1.0
    np.testing.assert_array_equal(dense, expected_dense)


def _slices_of(rank, dtype=tf.float32):
    return tf.IndexedSlices(tf.fill([rank + 1, 2], tf.cast(rank + 1, dtype)),
                            tf.range(rank + 1, dtype=tf.int64), dense_shape=tf.constant([8, 2], tf.int64))


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_grouped_allreduce_of_dense_tensors_and_indexed_slices(hvd, op):
    """A mixed list: dense tensors are reduced (fused), IndexedSlices allgathered (values and
    indices), in the list's order; Average divides the gathered values by the set's size;
    prescale and postscale multiply them."""
    n, r = hvd.size(), hvd.rank()
    dense = [tf.constant([float(r), 1.0]), tf.fill([3], float(r + 1))]
    mixed = [dense[0], _slices_of(r), dense[1], _slices_of(r, tf.float64)]
    got = hvd.grouped_allreduce(mixed, op=getattr(hvd, op), prescale_factor=2.0,
                                postscale_factor=0.5, name=f"grouped.slices/{op}")
    assert [type(g).__name__ for g in got] == ["EagerTensor", "IndexedSlices", "EagerTensor",
                                               "IndexedSlices"]
    scale = 1.0 / n if op == "Average" else 1.0
    np.testing.assert_allclose(got[0].numpy(), np.array([n * (n - 1) / 2, n]) * scale)
    np.testing.assert_allclose(got[2].numpy(), np.full([3], n * (n + 1) / 2) * scale)
    for g, dtype in ((got[1], np.float32), (got[3], np.float64)):
        assert g.values.dtype == dtype
        expected_values = np.concatenate([np.full([q + 1, 2], q + 1.0) for q in range(n)]) * scale
        np.testing.assert_allclose(g.values.numpy(), expected_values)
        np.testing.assert_array_equal(g.indices.numpy(), np.concatenate([np.arange(q + 1) for q in range(n)]))
        np.testing.assert_array_equal(g.dense_shape.numpy(), [8, 2])
    only_slices = hvd.grouped_allreduce([_slices_of(r)], op=getattr(hvd, op),
                                        name=f"grouped.slices.only/{op}")
    np.testing.assert_allclose(only_slices[0].values.numpy(), got[1].values.numpy())


def test_grouped_allreduce_of_indexed_slices_in_tf_function_and_bad_ops(hvd):
    n, r = hvd.size(), hvd.rank()

    @tf.function
    def reduce(values):
        slices = tf.IndexedSlices(values, tf.range(tf.shape(values)[0], dtype=tf.int32),
                                  dense_shape=tf.constant([8, 2], tf.int32))
        out = hvd.grouped_allreduce([slices, tf.ones([2])], op=hvd.Sum, name="grouped.slices.fn")
        return tf.convert_to_tensor(out[0]), out[1]

    dense_of_slices, reduced = reduce(tf.fill([r + 1, 2], 1.0))
    expected = np.zeros([8, 2], np.float32)
    for q in range(n):
        expected[:q + 1] += 1.0
    np.testing.assert_array_equal(dense_of_slices.numpy(), expected)
    np.testing.assert_array_equal(reduced.numpy(), [n, n])
    for op in (hvd.Max, hvd.Min, hvd.Product):
        with pytest.raises(NotImplementedError, match="tf.IndexedSlices"):
            hvd.grouped_allreduce([tf.ones([2]), _slices_of(r)], op=op, name="grouped.slices.max")


# --- inside tf.function ---------------------------------------------------------------------

def test_allreduce_in_tf_function(hvd):
    """Every dtype and op in one traced function, plus a grouped allreduce per dtype.

    (Tracing costs ~10-30 ms per collective on a busy CI machine, so shapes are few here; the
    eager grid above covers them.)
    """
    n, r = hvd.size(), hvd.rank()
    group_shapes = [(), (7,)]
    cases = [(d, op) for d in REDUCE_DTYPES for op in OPS]
    inputs = [all_inputs(f"allreduce.fn/{d}/{op}", (3, 5), d, n, _kind(op)) for d, op in cases]
    group_inputs = {d: [all_inputs(f"allreduce.fn/{d}/grouped/{i}", s, d, n) for i, s in enumerate(group_shapes)]
                    for d in REDUCE_DTYPES}

    @tf.function
    def reduce_all(tensors, groups):
        outs = [hvd.allreduce(t, op=_op(hvd, op), name=f"allreduce.fn/{d}/{op}")
                for t, (d, op) in zip(tensors, cases)]
        grouped = {d: hvd.grouped_allreduce(g, op=hvd.Sum, name=f"allreduce.fn/{d}/grouped")
                   for d, g in groups.items()}
        return outs, grouped

    outs, grouped = reduce_all([tf.constant(x[r]) for x in inputs],
                               {d: [tf.constant(x[r]) for x in xs] for d, xs in group_inputs.items()})
    for (d, op), x, got in zip(cases, inputs, outs):
        assert_matches(got.numpy(), reduce_reference(x, d, op, n), d, op, f"fn/{d}/{op}")
    for d, xs in group_inputs.items():
        for x, got in zip(xs, grouped[d]):
            assert_matches(got.numpy(), reduce_reference(x, d, "Sum", n), d, "Sum", f"fn/{d}/grouped")


def test_allreduce_of_zero_size_in_tf_function(hvd):
    @tf.function
    def reduce_zero(a, b):
        return hvd.allreduce(a, op=hvd.Sum, name="allreduce.fn.zero.a"), hvd.allreduce(b, name="allreduce.fn.zero.b")

    a, b = reduce_zero(tf.zeros([0, 3]), tf.ones([4]))
    assert a.shape == (0, 3)
    np.testing.assert_array_equal(b.numpy(), np.ones([4], np.float32))


def _fusion_case(i):
    """The i-th of 50 small allreduces: all sizes differ; mixed dtypes, ops and scale factors."""
    dtype = ["float32", "float16", "bfloat16", "float32", "int32"][i % 5]
    op = ["Sum", "Average", "Sum", "Max"][i % 4] if dtype != "int32" else "Sum"
    pre, post = ((0.5, 2.0) if i % 3 == 0 else (1.0, 1.0)) if dtype != "int32" else (1.0, 1.0)
    shape = (i,) if i % 2 else (i // 2, 2)  # i = 0: a 0-size member
    return dtype, op, pre, post, shape


def test_fusion_of_many_small_tensors_in_one_function(hvd):
    n, r = hvd.size(), hvd.rank()
    cases = [_fusion_case(i) for i in range(50)]
    inputs = [all_inputs(f"fusion/{i}", c[4], c[0], n) for i, c in enumerate(cases)]

    @tf.function
    def fused(tensors):
        return [hvd.allreduce(t, op=_op(hvd, c[1]), prescale_factor=c[2], postscale_factor=c[3],
                              name=f"fusion/{i}")
                for i, (t, c) in enumerate(zip(tensors, cases))]

    tensors = [tf.constant(x[r]) for x in inputs]
    first = [t.numpy() for t in fused(tensors)]
    second = [t.numpy() for t in fused(tensors)]  # now served by the response cache
    for i, ((dtype, op, pre, post, shape), x) in enumerate(zip(cases, inputs)):
        expected = reduce_reference(x, dtype, op, n, prescale=pre, postscale=post)
        assert_matches(first[i], expected, dtype, op, f"fusion/{i} {dtype} {op} {shape}")
        # Determinism: the same fused computation gives bit-identical results.
        assert first[i].tobytes() == second[i].tobytes(), f"fusion/{i} differs between runs"


def test_random_floats_are_bit_identical_across_runs_and_ranks(hvd):
    """Inexact float sums: the fused result is the same on every rank and in every run."""
    n, r = hvd.size(), hvd.rank()
    rng = np.random.default_rng(1000 + r)
    values = [rng.standard_normal(k).astype(np.float32) for k in (1, 7, 13, 100, 1000)]

    @tf.function
    def fused(tensors):
        return [hvd.allreduce(t, op=hvd.Average, name=f"determinism/{i}") for i, t in enumerate(tensors)]

    tensors = [tf.constant(v) for v in values]
    runs = [[t.numpy() for t in fused(tensors)] for _ in range(2)]
    digests = hvd.allgather_object([a.tobytes() for a in runs[0]], name="determinism.digests")
    for a, b in zip(*runs):
        assert a.tobytes() == b.tobytes()
    assert all(d == digests[0] for d in digests), "ranks got different bits"
    everyone = [np.random.default_rng(1000 + q) for q in range(n)]
    drawn = [[g.standard_normal(k).astype(np.float32) for k in (1, 7, 13, 100, 1000)] for g in everyone]
    for j, got in enumerate(runs[0]):
        expected = np.mean([d[j].astype(np.float64) for d in drawn], axis=0)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("elements", [(5 << 20) // 4 + 3, (9 << 20) // 4 + 1])
def test_large_allreduce_on_huge_page_advised_buffers(hvd, elements):
    # Buffers of 4 MiB and more are advised to use huge pages (ops/core/huge_pages.h), which
    # must never change their contents: the sizes are not multiples of 2 MiB, so the advised
    # blocks start and end inside the tensors. Run twice: the second call reuses the blocks.
    base = np.arange(elements, dtype=np.float32) % 1000
    x = tf.constant(base + hvd.rank())
    expected = base * hvd.size() + sum(range(hvd.size()))
    for _ in range(2):
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum, name=f"huge.{elements}").numpy(),
                                      expected)


def test_adasum_is_refused_clearly(hvd):
    """hvd.Adasum exists (scripts that name it import), and every use says it is missing."""
    from kerashvd.training.keras_compat import keras

    for call in (lambda: hvd.allreduce(tf.ones([2]), op=hvd.Adasum),
                 lambda: hvd.grouped_allreduce([tf.ones([2])], op=hvd.Adasum),
                 lambda: hvd.reducescatter(tf.ones([2]), op=hvd.Adasum),
                 lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum)):
        with pytest.raises(NotImplementedError, match="does not implement Adasum"):  # Horovod's type
            call()


def test_grouped_outputs_in_a_graph_leave_through_one_identity_n(hvd):
    # When an asynchronous op finishes, TensorFlow hands each node it readies to the thread
    # pool as a task of its own; one IdentityN behind a grouped op makes that one task, and
    # its consumers then run inline (kerashvd/runtime/_op_library.py). Values and gradients
    # must pass through it unchanged.
    xs = [tf.constant(np.full(s, hvd.rank() + 1.0, np.float32)) for s in [(3,), (2, 2), ()]]
    grouped = {
        "allreduce": lambda ts: hvd.grouped_allreduce(ts, op=hvd.Sum, name="fan.allreduce"),
        "allgather": lambda ts: hvd.grouped_allgather([tf.reshape(t, [-1]) for t in ts],
                                                      name="fan.allgather"),
        "broadcast": lambda ts: hvd.grouped_broadcast(ts, 0, name="fan.broadcast"),
    }
    n = hvd.size()
    for kind, collective in grouped.items():
        graph = tf.function(collective).get_concrete_function(xs).graph
        outputs = [graph.get_operation_by_name(t.op.name) for t in graph.outputs]
        fan = {op.type for op in outputs} | {op.type for out in outputs
                                            for op in [t.op for t in out.inputs]}
        assert "IdentityN" in fan, (kind, fan)
        got = tf.function(collective)(xs)
        eager = collective(xs)
        for g, e in zip(got, eager):
            np.testing.assert_array_equal(g.numpy(), e.numpy())
    total = sum(range(1, n + 1))
    for g, x in zip(grouped["allreduce"](xs), xs):
        np.testing.assert_array_equal(g.numpy(), np.full(x.shape, total, np.float32))

    @tf.function
    def grads(ts):
        with tf.GradientTape() as tape:
            tape.watch(ts)
            loss = tf.add_n([tf.reduce_sum(r * 2.0) for r in
                             hvd.grouped_allreduce(ts, op=hvd.Average, name="fan.grad")])
        return tape.gradient(loss, ts)

    for g, x in zip(grads(xs), xs):
        np.testing.assert_allclose(g.numpy(), np.full(x.shape, 2.0, np.float32))
