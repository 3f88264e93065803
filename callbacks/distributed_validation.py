"""Exact validation metrics when every rank evaluates its own shard.

Why states, not values: a metric's value is a function of its state (``Mean``: total and
count; ``AUC``: confusion counts per threshold). Averaging per-rank values is wrong when
shards differ in size and for every non-mean metric, but the state of one process that saw
the whole set is the sum of the ranks' states. So after the validation loop, every metric
state variable is allreduced (by the ``aggregation`` Keras declares for it; ``"sum"`` for
every built-in metric) and ``result()`` is read from the global state.

Where to hook (Keras 3 TF trainer, ``Model.evaluate``, also used by ``fit`` for ``val_*``)::

    model.make_test_function(); callbacks.on_test_begin(); model.reset_metrics()
    for each batch: on_test_batch_begin; model.test_function(it) (update states);
                    on_test_batch_end     # not reached when the iterator runs dry mid-batch
    logs = pythonify_logs(model._get_metrics_result_or_logs(logs))  # -> get_metrics_result()
    callbacks.on_test_end(logs)   # too late: logs are computed, and CallbackList passes a copy
    return logs                   # fit prefixes these with "val_"

Keras 2 (tf_keras ``Model.evaluate``) has the same shape: ``logs = {}``; ``on_test_begin``;
``reset_metrics``; the batches, each ``test_function(it)``, which calls ``model.test_step``;
then ``_validate_and_get_metrics_result(logs)`` -> ``get_metrics_result()``, also when no
batch ran; ``on_test_end``. It takes ``test_function`` before ``on_test_begin``, but looks
``test_step`` up at every step (Keras 3 the reverse).

The only call between the last batch and the read is the public, overridable
``Model.get_metrics_result()``. From ``on_test_begin`` to ``on_test_end`` the callback wraps it,
and ``model.test_function`` and ``model.test_step``, on the model instance: the states are
reduced at the first ``get_metrics_result()`` call made eagerly outside a step -- the read
after the loop. Calls inside a step (traced, or eager with ``run_eagerly=True``; ``test_step``
itself calls it) pass through. Batch hooks
are not used: a dataset of unknown size (or an empty shard) ends with an ``on_test_batch_begin``
that has no ``on_test_batch_end``. Ranks may run different numbers of batches: the reduction
is issued once per evaluation, after each rank's own loop.
"""

import tensorflow as tf

import kerashvd as hvd
from kerashvd import _private_api
from kerashvd.training.keras_compat import variable_aggregation

from ._callback import Callback

__all__ = ["DistributedValidationCallback", "reduce_metric_states"]

_STATE_OPS = {"sum": "sum", "mean": "mean", "only_first_replica": "first"}


class DistributedValidationCallback(Callback):
    """Makes ``fit``'s ``val_*`` metrics and ``evaluate``'s results exact over sharded data.

    Each rank evaluates its own shard (shards may differ in size, and last batches may be
    smaller); the reported loss and metrics then equal those of one process evaluating the
    whole set (up to float32 summation order): the states of all the model's metrics (loss
    tracker, compiled metrics, custom tracked metrics) are summed over ranks after the
    validation loop and before Keras reads them. Works for means (loss, accuracy) and
    non-mean metrics (AUC, precision, recall, IoU, ...). Training metrics are not touched;
    use :class:`MetricAverageCallback` for those.

    Pass the same callback to ``fit`` (it sees fit's validation runs) and to ``evaluate``.
    Every rank must pass it and run the same number of evaluations. A rank must have at
    least one validation batch for its *own* logs to be filled (Keras returns no logs for an
    empty loop); the other ranks' results stay exact regardless. Custom metrics must declare
    how their state combines through ``add_variable(..., aggregation="sum")`` (the default) or
    ``"mean"``; ``"only_first_replica"`` takes rank 0's value.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> x_val, y_val = hvd.data.shard_arrays(x_val, y_val)  # uneven shards are fine
    >>> exact = hvd.callbacks.DistributedValidationCallback()
    >>> model.fit(x, y, validation_data=(x_val, y_val),
    ...           callbacks=[exact, hvd.callbacks.MetricAverageCallback()])  # doctest: +SKIP
    >>> model.evaluate(x_val, y_val, callbacks=[exact], return_dict=True)  # doctest: +SKIP
    """

    def __init__(self):
        super().__init__()
        self._active = False  # between on_test_begin and on_test_end
        self._in_step = 0  # depth of test_function / test_step calls
        self._reduced = False
        self._restore = None  # undoes the replacement of the model's methods

    def on_test_begin(self, logs=None):
        self._active, self._in_step, self._reduced = True, 0, False
        self._install(self.model)

    def on_test_end(self, logs=None):
        self._active = False
        self._uninstall()
        if not self._reduced:
            raise RuntimeError(
                f"{type(self).__name__}: the model's metrics were not read after the validation "
                "loop, so they were not reduced over ranks. It supports the Keras 3 and tf_keras "
                "trainers' fit/evaluate (which read them with Model.get_metrics_result()).")

    def _install(self, model):
        self._uninstall()
        original_result = model.get_metrics_result

        def get_metrics_result():
            if self._active and not self._in_step and not self._reduced and tf.executing_eagerly():
                self._reduced = True
                reduce_metric_states(model.metrics, name="callbacks.distributed_validation")
            return original_result()

        def in_step(step):
            def wrapper(*args, **kwargs):
                self._in_step += 1
                try:
                    return step(*args, **kwargs)
                finally:
                    self._in_step -= 1
            return wrapper

        wrappers = {"get_metrics_result": get_metrics_result}
        for attribute in ("test_function", "test_step"):
            step = getattr(model, attribute, None)
            if step is not None:
                wrappers[attribute] = in_step(step)
        # Keras internals: see kerashvd/_private_api.py patch_model_methods.
        self._restore = _private_api.patch_model_methods(model, wrappers)

    def _uninstall(self):
        if self._restore is not None:
            restore, self._restore = self._restore, None
            restore()


def reduce_metric_states(metrics, name="metric_states"):
    """Combines the state variables of ``metrics`` over all ranks, in place.

    Each variable is reduced by its Keras ``aggregation``: ``"sum"`` (sums and counts; every
    built-in metric) is summed, ``"mean"`` averaged, ``"only_first_replica"`` takes rank 0's
    value. Afterwards ``metric.result()`` is the result over every rank's data. Variables are
    grouped by reduction and dtype into one collective each. Every rank must call it with the
    same metrics (same variables in the same order) and the same ``name``.

    Args:
        metrics: Keras metrics (e.g. ``model.metrics``); variables shared between them are
            reduced once.
        name: the prefix of the collectives' names.

    Raises:
        ValueError: for a state variable whose aggregation is ``"none"`` (how it combines
            over ranks is unknown).

    Example:

    >>> import kerashvd as hvd
    >>> m = keras.metrics.Mean()
    >>> m.update_state([float(hvd.rank())] * (hvd.rank() + 1))
    >>> hvd.callbacks.reduce_metric_states([m], name="example")
    >>> # m.result() is now the mean over every rank's values.
    """
    groups, seen = {}, set()
    for metric in metrics:
        for variable in metric.variables:
            if id(variable) in seen:
                continue
            seen.add(id(variable))
            aggregation = variable_aggregation(variable)
            if aggregation not in _STATE_OPS:
                raise ValueError(
                    f"reduce_metric_states cannot combine state variable "
                    f"{getattr(variable, 'path', variable.name)!r} of metric {metric.name!r} over "
                    f"ranks: its aggregation is {aggregation!r}. Create it with aggregation='sum' "
                    "(or 'mean'): metric.add_variable(..., aggregation='sum') in Keras 3, "
                    "metric.add_weight(..., aggregation=tf.VariableAggregation.SUM) in tf_keras.")
            key = (_STATE_OPS[aggregation], tf.as_dtype(variable.dtype).name)
            groups.setdefault(key, []).append(variable)
    for (kind, dtype), variables in sorted(groups.items()):
        values = [tf.convert_to_tensor(v) for v in variables]
        key = f"{name}.{kind}.{dtype}"
        if kind == "first":
            reduced = hvd.grouped_broadcast(values, root_rank=0, name=key)
        else:
            op = hvd.Sum if kind == "sum" else hvd.Average
            reduced = hvd.grouped_allreduce(values, op=op, name=key)
        for variable, value in zip(variables, reduced):
            variable.assign(value)
