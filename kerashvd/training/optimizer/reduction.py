"""Gradient reduction shared by DistributedOptimizer and DistributedGradientTape.

One :class:`GradientReducer` turns each rank's list of gradients into the list every rank
applies. The protocol, the same on every rank because it depends only on the structure of the
gradient list (positions, dtypes, which gradients are None or sparse), never on values or on
TF graph names:

1. ``None`` gradients stay ``None`` and issue no collective; so do gradients with no
   elements (their shape is static and the same on every rank).
2. ``tf.IndexedSlices`` gradients are allgathered (values and indices) one by one, keyed by
   their position, unless ``sparse_as_dense``, in which case they are densified first.
3. Dense gradients are split into groups and each group into dtypes; each (group, dtype) is
   one ``grouped_allreduce``, keyed ``{prefix}.{group}.{dtype}``:
   - default: buckets of consecutive gradients of one dtype, in the order backprop produces
     them (last position first), each at most ``bucket_cap_mb`` MiB (``buckets``), so that
     each collective starts while backprop computes the other gradients; keyed
     ``{prefix}.bucket{n}.{dtype}``. A cap of 0: one group, so one collective per dtype;
   - ``num_groups=n``: the dense gradients, in order, cut into ``n`` contiguous parts
     (``n=1``: one group);
   - ``groups=[[v, ...], ...]``: the listed variables' gradients go together; every variable
     not listed is a group of its own (Horovod's rule).
4. Scaling follows Horovod: ``op=Average`` with ``gradient_predivide_factor=f`` sums
   ``g / f`` and multiplies the sum by ``f / size``; ``f == 1`` uses the engine's Average.
5. Gradients of variables registered as local (:meth:`GradientReducer.register_local`, for
   layers each rank keeps to itself) issue no collective and are left out of steps 2-3, so
   the others group as if they were absent. With ``scale_local_gradients`` (the default, as
   in Horovod) they are divided by ``size()``: the learning rate of data-parallel training
   is usually scaled up by ``size()`` for the averaged gradients, and the local ones then
   take steps of the size they would take in one process. Every rank must register the
   same variables (positions), or the groups' shapes differ and the collective fails with
   an error naming them.

6. With a ``process_set``, the collectives run among its members and ``size()`` above means
   the set's size; on a rank outside the set every gradient is returned as it is (Horovod's
   rule), so such a rank trains on its own.

Grouping changes how tensors are batched on the wire, never the arithmetic: the engine sums
every element in rank order whatever its group, so all groupings give bit-identical results.
The collectives of a step are independent ops: the TF executor starts each once its inputs
exist, in whatever order backprop produces them, and the engine matches them by key.
"""

import tensorflow as tf

from ...collectives import tensors as _collectives
from ...collectives.compression import Compression, Compressor
from ...runtime.process_sets import global_process_set, resolve, set_size
from ...collectives.reduce_ops import Average, Sum, check_not_adasum, op_name
from ...collectives._xla_guard import check_not_xla  # noqa: F401  (re-exported)
from ...runtime import bucket_cap
from . import bucket_tuning
from .buckets import plan_buckets
from .chain import ReducerSettings  # noqa: F401  (re-exported)


def _is_variable_list(group):
    return isinstance(group, (list, tuple)) and all(hasattr(v, "shape") and hasattr(v, "dtype")
                                                    for v in group)


class GradientReducer:
    """Reduces a list of gradients across ranks (see the module docstring for the protocol).

    Args:
        prefix: the start of every collective's name; must be the same on every rank.
        compression: a ``kerashvd.Compression`` member, applied to dense gradients.
        sparse_as_dense: densify ``tf.IndexedSlices`` and allreduce them.
        op: ``kerashvd.Average`` or ``kerashvd.Sum``.
        gradient_predivide_factor: with ``op=Average``, divide by this before the sum and by
            ``size() / factor`` after it.
        num_groups: cut dense gradients into this many groups (0: buckets, see
            ``bucket_cap_mb``).
        groups: an int (same as ``num_groups``) or a list of lists of variables.
        scale_local_gradients: divide the gradients of local variables by ``size()``.
        process_set: the ranks that reduce together (a registered ``kerashvd.ProcessSet``;
            default all).
        bucket_cap_mb: MiB per bucket without ``num_groups``/``groups`` (None:
            ``KERASHVD_BUCKET_CAP_MB`` or 1; 0: one bucket per dtype).

    Raises:
        ValueError: for an unsupported ``op``, a bad factor, bad or conflicting groups, a
            bad bucket cap.
        NotImplementedError: for ``op=kerashvd.Adasum``.
        TypeError: for a compression that is not a ``kerashvd.Compression`` member.
    """

    def __init__(self, prefix, compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 scale_local_gradients=True, process_set=global_process_set,
                 bucket_cap_mb=None):
        check_not_adasum(op)
        if op not in (Average, Sum):
            raise ValueError("Distributed gradients support op=kerashvd.Average or "
                             f"op=kerashvd.Sum; received op={op_name(op)}")
        try:
            factor = float(gradient_predivide_factor)
        except (TypeError, ValueError):
            factor = float("nan")
        if not factor > 0 or factor == float("inf"):
            raise ValueError("gradient_predivide_factor must be a finite number > 0; received "
                             f"gradient_predivide_factor={gradient_predivide_factor!r}")
        if factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor applies to op=kerashvd.Average only; "
                             f"received op={op_name(op)}, "
                             f"gradient_predivide_factor={gradient_predivide_factor}")
        if not (isinstance(compression, type) and issubclass(compression, Compressor)):
            raise TypeError("compression must be kerashvd.Compression.none, .fp16 or .bf16 (or "
                            f"a Compressor subclass); received compression={compression!r}")
        if isinstance(groups, int) and not isinstance(groups, bool):
            if num_groups:
                raise ValueError("Pass either num_groups or groups, not both; received "
                                 f"num_groups={num_groups}, groups={groups}")
            num_groups, groups = groups, None
        if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups < 0:
            raise ValueError(f"num_groups must be an int >= 0; received num_groups={num_groups!r}")
        if groups is not None:
            if num_groups:
                raise ValueError("Pass either num_groups or groups, not both; received "
                                 f"num_groups={num_groups} and a list of groups")
            if not isinstance(groups, (list, tuple)) or not all(_is_variable_list(g) for g in groups):
                raise ValueError("groups must be an int or a list of lists of variables; "
                                 f"received groups={groups!r}")
            seen = {}
            for index, group in enumerate(groups):
                for v in group:
                    if id(v) in seen and seen[id(v)] != index:
                        raise ValueError(f"Variable {getattr(v, 'path', getattr(v, 'name', v))} "
                                         f"is in groups {seen[id(v)]} and {index}; a variable "
                                         "may be in one group only")
                    seen[id(v)] = index
            self._group_of = seen
        else:
            self._group_of = None
        self.prefix = prefix
        self.compression = compression
        self.sparse_as_dense = bool(sparse_as_dense)
        self.op = op
        self.gradient_predivide_factor = factor
        self.num_groups = num_groups
        self.groups = groups
        self.scale_local_gradients = bool(scale_local_gradients)
        self.bucket_cap_bytes = bucket_cap.cap_bytes(bucket_cap_mb)
        self.bucket_cap_mb = bucket_cap_mb  # as given (None: the variable's or the default)
        if process_set is None:
            process_set = global_process_set
        if not hasattr(process_set, "included"):
            raise TypeError("process_set must be a kerashvd.ProcessSet; received "
                            f"process_set={process_set!r}")
        self.process_set = process_set
        self._tuner = None  # the bucket_tuning.BucketTuner of its last tuned trace
        self._local = {}  # id(variable) -> variable (held, so that the id is not reused)
        self._local_layers = []  # their trainable weights are local, read at each reduce()

    def register_local(self, variable):
        """Marks ``variable`` as local: its gradient is never communicated (see rule 5).

        Register before the first step that is traced: a traced step keeps the collectives
        it was traced with.

        Raises:
            TypeError: when ``variable`` is neither a variable nor a tensor.
        """
        if not (hasattr(variable, "shape") and hasattr(variable, "dtype")):
            raise TypeError("register_local_var/register_local_source takes a variable (e.g. "
                            "one of layer.trainable_weights) or a watched tensor; received "
                            f"{variable!r} of type {type(variable).__name__}")
        self._local[id(variable)] = variable

    def register_local_layer(self, layer):
        """Marks the trainable weights of ``layer`` as local, read at each :meth:`reduce`.

        A layer of a model built lazily (no ``keras.Input``, or a subclassed model) has no
        weights until the model's first call, which ``fit`` makes inside its first step:
        reading them there, not at registration, lets such layers be registered up front.
        """
        self._local_layers.append(layer)

    @property
    def local_variables(self):
        """The variables registered as local (the layers' current weights included)."""
        layer_weights = [w for layer in self._local_layers for w in layer.trainable_weights
                         if id(w) not in self._local]
        return list(self._local.values()) + layer_weights

    def _local_ids(self):
        return {id(v) for v in self.local_variables}

    def _size(self):
        return set_size(self.process_set.process_set_id)

    def _scale_local(self, grad):
        n = self._size()
        if not self.scale_local_gradients or n == 1:
            return grad
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values / n, grad.indices, grad.dense_shape)
        return grad / n

    @tf.autograph.experimental.do_not_convert
    def reduce(self, grads, variables=None):
        """Returns the reduced gradients, in the order of ``grads``.

        Args:
            grads: a list of tensors, ``tf.IndexedSlices`` or None.
            variables: the variables the gradients belong to (needed for ``groups``).

        Returns:
            A list of the same length; None stays None, IndexedSlices stay IndexedSlices
            unless ``sparse_as_dense``.
        """
        grads = list(grads)
        if not self.process_set.included():
            return grads  # rule 6
        out = [None] * len(grads)
        dense = []
        local = self._local_ids()
        for index, g in enumerate(grads):
            if g is None:
                continue
            if variables is not None and index < len(variables) and id(variables[index]) in local:
                out[index] = self._scale_local(g)
            elif isinstance(g, tf.IndexedSlices) and not self.sparse_as_dense:
                out[index] = self._reduce_sparse(g, index)
            elif g.shape.num_elements() == 0:
                out[index] = g  # nothing to reduce (and the engine rejects 0-element tensors)
            else:
                dense.append(index)
        candidates = self._tuned_plans(dense, grads)
        if candidates:
            tuner = self._tuner_for([mb for mb, _ in candidates])
            branches = [self._branch(plan, grads, dense, f"tune{k}.")
                        for k, (_, plan) in enumerate(candidates)]
            reduced = tuner.after_update(tuner.choose(branches))
            for i, r in zip(dense, reduced):
                out[i] = r
            return out
        for i, r in self._reduce_plan(self._plan(dense, variables, grads), grads, "").items():
            out[i] = r
        return out

    def _reduce_plan(self, plan, grads, tag):
        """{index: reduced gradient} of the dense gradients grouped as ``plan``
        ([(label, [indices])]); ``tag`` starts every label (the tuned plans' own names)."""
        out = {}
        for label, indices in plan:
            by_dtype = {}
            for index in indices:
                by_dtype.setdefault(tf.as_dtype(grads[index].dtype).name, []).append(index)
            for dtype_name in sorted(by_dtype):
                members = by_dtype[dtype_name]
                reduced = self._reduce_dense([tf.convert_to_tensor(grads[i]) for i in members],
                                             f"{self.prefix}.{tag}{label}{dtype_name}")
                out.update(zip(members, reduced))
        return out

    def _branch(self, plan, grads, dense, tag):
        def run():
            reduced = self._reduce_plan(plan, grads, tag)
            return [reduced[i] for i in dense]
        return run

    def _tuned_plans(self, dense, grads):
        """[(cap MiB, plan)] of the bucket autotune's candidates (bucket_tuning), or [] when
        this reducer's buckets are not tuned: autotune off, a cap, groups or a process set
        given, or a single distinct plan."""
        if (not dense or self._group_of is not None or self.num_groups or
                self.bucket_cap_mb is not None or self.process_set is not global_process_set):
            return []
        tune, _, _, _ = bucket_tuning.settings()
        if not tune:
            return []
        candidates = bucket_tuning.candidate_plans(
            lambda cap: self._bucket_plan(dense, grads, cap),
            self.bucket_cap_bytes / float(1 << 20))
        return candidates if len(candidates) > 1 else []

    def _tuner_for(self, caps_mb):
        """The BucketTuner of this reducer's name and ``caps_mb`` (bucket_tuning.tuner)."""
        self._tuner = bucket_tuning.tuner(self.prefix, caps_mb, self.process_set)
        return self._tuner

    def _plan(self, dense, variables, grads):
        """Returns [(label, [indices])] for the dense gradients at ``dense``."""
        if self._group_of is not None:
            if variables is None or len(variables) < (max(dense) + 1 if dense else 0):
                raise ValueError("groups of variables need the variables the gradients belong "
                                 "to; pass them in the same order as the gradients")
            by_group, alone = {}, []
            for index in dense:
                group = self._group_of.get(id(variables[index]))
                if group is None:
                    alone.append(index)
                else:
                    by_group.setdefault(group, []).append(index)
            plan = [(f"group{g}.", by_group[g]) for g in sorted(by_group)]
            return plan + [(f"var{index}.", [index]) for index in alone]
        if self.num_groups > 1:
            n, parts = len(dense), self.num_groups
            cuts = [(n * p) // parts for p in range(parts + 1)]
            return [(f"group{p}.", dense[cuts[p]:cuts[p + 1]]) for p in range(parts)
                    if cuts[p] < cuts[p + 1]]
        if self.num_groups == 1:
            return [("", dense)] if dense else []
        return self._bucket_plan(dense, grads, self.bucket_cap_bytes)

    @staticmethod
    def _bucket_plan(dense, grads, cap_bytes):
        """[(label, [indices])] of the buckets of the dense gradients under ``cap_bytes``."""
        if not cap_bytes:
            return [("", dense)] if dense else []
        dtypes = [tf.as_dtype(grads[i].dtype) for i in dense]
        sizes = [float("inf") if grads[i].shape.num_elements() is None  # a bucket of its own
                 else grads[i].shape.num_elements() * dtype.size
                 for i, dtype in zip(dense, dtypes)]
        buckets = plan_buckets(dense, sizes, [d.name for d in dtypes], cap_bytes)
        return [(f"bucket{n}.", bucket) for n, bucket in enumerate(buckets)]

    def _reduce_dense(self, tensors, name):
        if self.op == Average and self.gradient_predivide_factor != 1.0:
            f = self.gradient_predivide_factor
            return _collectives.grouped_allreduce(
                tensors, op=Sum, prescale_factor=1.0 / f, postscale_factor=f / self._size(),
                compression=self.compression, name=name, process_set=self.process_set)
        return _collectives.grouped_allreduce(tensors, op=self.op, compression=self.compression,
                                              name=name, process_set=self.process_set)

    def _reduce_sparse(self, slices, index):
        # The scale factors cancel for an Average; allgather divides by size().
        return _collectives.allreduce(slices, op=self.op, name=f"{self.prefix}.sparse{index}",
                                      process_set=self.process_set)
