"""Gradients of the collectives, checked numerically against Horovod's definitions.

Each rank r computes loss_r = sum(w_r * C(x)_r) with its own weights w_r. For every collective
the gradient the tape gives for x_r is a fixed multiple of the gradient of the job's total
loss sum_q loss_q with respect to x_r (kerashvd/collectives/gradients.py, which follows Horovod):
- allreduce and alltoall: exactly that gradient (factor 1);
- allgather and broadcast: the gradient of the ranks' mean loss (factor 1 / size): the
  incoming gradients are averaged over the process set;
- reducescatter: size times that gradient (Horovod scales the allgathered gradient by the set
  size for op=Sum and leaves it as it is for op=Average, whose forward divides by size).
The total-loss gradient does not use those formulas: it is a finite difference of a numpy
model of the collective C, which is linear, so a unit step gives the exact derivative.
"""

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import rank_input, scatter_rows


def _splits(sender, size):
    return [(sender + 2 * q) % 3 for q in range(size)]


def _scatter(full, q, n):
    start, stop = scatter_rows(full.shape[0], q, n)
    return full[start:stop]


def _alltoall_np(xs, splits, q):
    parts = []
    for r, x in enumerate(xs):
        start = sum(splits[r][:q])
        parts.append(x[start:start + splits[r][q]])
    return np.concatenate(parts)


# name -> (input shapes of rank r at size n, kerashvd forward on this rank's list of inputs,
#          numpy model: every rank's inputs -> every rank's outputs)
CASES = {
    "allreduce_sum": (
        lambda r, n: [(3, 2)],
        lambda hvd, x, name: [hvd.allreduce(x[0], op=hvd.Sum, name=name)],
        lambda xs, n: [[sum(x[0] for x in xs)] for _ in range(n)]),
    "allreduce_average_scaled": (
        lambda r, n: [(5,)],
        lambda hvd, x, name: [hvd.allreduce(x[0], op=hvd.Average, prescale_factor=0.5,
                                            postscale_factor=4.0, name=name)],
        lambda xs, n: [[sum(x[0] for x in xs) * 2.0 / n] for _ in range(n)]),
    "grouped_allreduce": (
        lambda r, n: [(3,), (2, 2)],
        lambda hvd, x, name: hvd.grouped_allreduce(x, op=hvd.Sum, name=name),
        lambda xs, n: [[sum(x[0] for x in xs), sum(x[1] for x in xs)] for _ in range(n)]),
    "allgather": (
        lambda r, n: [(r + 1, 2)],
        lambda hvd, x, name: [hvd.allgather(x[0], name=name)],
        lambda xs, n: [[np.concatenate([x[0] for x in xs])] for _ in range(n)]),
    "grouped_allgather": (
        lambda r, n: [(r % 2 + 1,), (1, 3)],
        lambda hvd, x, name: hvd.grouped_allgather(x, name=name),
        lambda xs, n: [[np.concatenate([x[0] for x in xs]), np.concatenate([x[1] for x in xs])]
                       for _ in range(n)]),
    "broadcast": (
        lambda r, n: [(4,)],
        lambda hvd, x, name: [hvd.broadcast(x[0], root_rank=hvd.size() - 1, name=name)],
        lambda xs, n: [[xs[n - 1][0]] for _ in range(n)]),
    "grouped_broadcast": (
        lambda r, n: [(2,), (3, 1)],
        lambda hvd, x, name: hvd.grouped_broadcast(x, root_rank=0, name=name),
        lambda xs, n: [[xs[0][0], xs[0][1]] for _ in range(n)]),
    "reducescatter_sum": (
        lambda r, n: [(7, 2)],
        lambda hvd, x, name: [hvd.reducescatter(x[0], op=hvd.Sum, name=name)],
        lambda xs, n: [[_scatter(sum(x[0] for x in xs), q, n)] for q in range(n)]),
    "reducescatter_average_scaled": (
        lambda r, n: [(5,)],
        lambda hvd, x, name: [hvd.reducescatter(x[0], op=hvd.Average, prescale_factor=2.0,
                                                postscale_factor=0.5, name=name)],
        lambda xs, n: [[_scatter(sum(x[0] for x in xs) / n, q, n)] for q in range(n)]),
    "grouped_reducescatter": (
        lambda r, n: [(3,), (6, 2)],
        lambda hvd, x, name: hvd.grouped_reducescatter(x, op=hvd.Average, name=name),
        lambda xs, n: [[_scatter(sum(x[0] for x in xs) / n, q, n), _scatter(sum(x[1] for x in xs) / n, q, n)]
                       for q in range(n)]),
    "alltoall_splits": (
        lambda r, n: [(sum(_splits(r, n)), 2)],
        lambda hvd, x, name: [hvd.alltoall(x[0], splits=_splits(hvd.rank(), hvd.size()), name=name)[0]],
        lambda xs, n: [[_alltoall_np([x[0] for x in xs], [_splits(r, n) for r in range(n)], q)]
                       for q in range(n)]),
    "alltoall_equal": (
        lambda r, n: [(2 * n,)],
        lambda hvd, x, name: [hvd.alltoall(x[0], name=name)],
        lambda xs, n: [[_alltoall_np([x[0] for x in xs], [[2] * n] * n, q)] for q in range(n)]),
}


# Horovod's gradient of each collective over the total-loss gradient, at n ranks (module doc).
def _horovod_factor(case, n):
    if case.startswith(("allgather", "grouped_allgather", "broadcast", "grouped_broadcast")):
        return 1.0 / n
    if case.startswith(("reducescatter", "grouped_reducescatter")):
        return float(n)
    return 1.0


def _problem(case, dtype, n):
    """Every rank's inputs and weights for ``case``."""
    shapes, _, model = CASES[case]
    xs = [[rank_input(f"grad/{case}/x{i}", r, s, dtype) for i, s in enumerate(shapes(r, n))] for r in range(n)]
    outs = model(xs, n)
    ws = [[rank_input(f"grad/{case}/w{i}", q, np.shape(y), dtype) for i, y in enumerate(outs[q])]
          for q in range(n)]
    return xs, ws


def _expected_grads(case, xs, ws, r, n):
    """Horovod's gradient for x_r: d(sum_q <w_q, C(x)_q>)/dx_r by unit steps through the numpy
    model (C is linear), times the case's factor."""
    _, _, model = CASES[case]
    zeros = [[np.zeros(np.shape(x), np.float64) for x in rank_xs] for rank_xs in xs]
    grads = []
    for i, x in enumerate(xs[r]):
        g = np.zeros(np.shape(x), np.float64)
        for e in np.ndindex(*np.shape(x)):
            step = [[z.copy() for z in rank_zeros] for rank_zeros in zeros]
            step[r][i][e] = 1.0
            outs = model(step, n)
            g[e] = sum(np.sum(np.asarray(w, np.float64) * y) for q in range(n) for w, y in zip(ws[q], outs[q]))
        grads.append(g * _horovod_factor(case, n))
    return grads


def _tape_grads(hvd, case, x, w, name):
    _, forward, _ = CASES[case]
    with tf.GradientTape() as tape:
        tape.watch(x)
        ys = forward(hvd, x, name)
        loss = tf.add_n([tf.reduce_sum(wi * y) for wi, y in zip(w, ys)])
    return tape.gradient(loss, x)


def _check(case, got, expected, dtype):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g is not None, f"{case}: no gradient"
        g = tf.convert_to_tensor(g).numpy()
        assert g.shape == e.shape, f"{case}: gradient shape {g.shape} != {e.shape}"
        np.testing.assert_allclose(g.astype(np.float64), e, rtol=1e-6, atol=1e-6, err_msg=case)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_gradient_eager(hvd, case, dtype):
    n, r = hvd.size(), hvd.rank()
    xs, ws = _problem(case, dtype, n)
    x = [tf.constant(v) for v in xs[r]]
    w = [tf.constant(v) for v in ws[r]]
    got = _tape_grads(hvd, case, x, w, f"grad.eager/{case}/{dtype}")
    _check(case, got, _expected_grads(case, xs, ws, r, n), dtype)


def test_gradients_in_tf_function(hvd):
    """Every case's gradient in one traced function (float32).

    Inside tf.function, the graph must keep each gradient's collective on every rank (e.g. the
    broadcast gradient's allreduce on non-root ranks), or the other ranks wait forever.
    """
    n, r = hvd.size(), hvd.rank()
    problems = {case: _problem(case, "float32", n) for case in CASES}

    @tf.function
    def all_grads(x_by_case, w_by_case):
        return {case: _tape_grads(hvd, case, x_by_case[case], w_by_case[case], f"grad.fn/{case}")
                for case in CASES}

    got = all_grads({c: [tf.constant(v) for v in p[0][r]] for c, p in problems.items()},
                    {c: [tf.constant(v) for v in p[1][r]] for c, p in problems.items()})
    for case, (xs, ws) in problems.items():
        _check(case, got[case], _expected_grads(case, xs, ws, r, n), "float32")


def test_gradient_through_a_nonlinear_model(hvd):
    """Chain rule around the collective: loss_r = sum(w_r * allreduce(x_r ** 2)) / size."""
    n, r = hvd.size(), hvd.rank()
    x = tf.Variable(rank_input("grad.chain.x", r, (4,), "float64"))
    w = [rank_input("grad.chain.w", q, (4,), "float64") for q in range(n)]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w[r] * hvd.allreduce(x * x, op=hvd.Average, name="grad.chain")) / n
    got = tape.gradient(loss, x)
    expected = 2 * x.numpy() * np.sum(w, axis=0) / n / n
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("case", ["grouped_allreduce", "grouped_allgather", "grouped_broadcast",
                                  "grouped_reducescatter"])
def test_grouped_gradient_with_mixed_dtypes(hvd, case):
    """float64 outputs with a float32 and a float64 output gradient (as in Horovod's tests): the
    gradient's grouped collective cannot take both dtypes in one op."""
    n, r = hvd.size(), hvd.rank()
    shapes, forward, model = CASES[case]
    xs = [[rank_input(f"grad.mixed/{case}/x{i}", q, s, "float64") for i, s in enumerate(shapes(q, n))]
          for q in range(n)]
    x = [tf.constant(v) for v in xs[r]]
    with tf.GradientTape() as tape:
        tape.watch(x)
        ys = forward(hvd, x, f"grad.mixed/{case}")
    # Output gradients all ones: the expected gradient is the one of the weights-one problem.
    ones = [[np.ones(np.shape(y)) for y in outs] for outs in model(xs, n)]
    got = tape.gradient(ys, x, output_gradients=[tf.ones_like(ys[0], tf.float32),
                                                 tf.ones_like(ys[1], tf.float64)])
    assert [g.dtype for g in got] == [tf.float32, tf.float64]
    _check(case, got, _expected_grads(case, xs, [o for o in ones], r, n), "mixed")


def test_two_gradient_calls_of_one_op_in_a_graph(hvd):
    """A persistent tape asked twice inside tf.function: each gradient call needs its own
    collectives (one shared name made one rank fail and the other wait)."""
    n, r = hvd.size(), hvd.rank()

    @tf.function
    def grads(x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = hvd.allgather(x, name="grad.twice.gather")
            z = hvd.grouped_reducescatter([tf.concat([x] * n, 0)], op=hvd.Sum, name="grad.twice.scatter")
            first, second = tf.reduce_sum(y) + tf.reduce_sum(z[0]), tf.reduce_sum(y * y)
        return tape.gradient(first, x), tape.gradient(second, x)

    x = tf.fill([2, 3], float(r + 1))
    got_first, got_second = grads(x)
    # d/dx of sum(allgather): ones averaged over ranks (1); of sum(reducescatter_sum(n copies
    # of x)): n * (n copies of ones, allgathered... and scaled by n) summed over the copies.
    np.testing.assert_allclose(got_first.numpy(), np.full([2, 3], 1.0 + n * n))
    np.testing.assert_allclose(got_second.numpy(), np.full([2, 3], 2.0 * (r + 1)))
