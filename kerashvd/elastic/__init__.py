"""Elastic training with Horovod's API (``hvd.elastic``): the world shrinks when ranks or
hosts are lost and grows when hosts come, and training goes on from the last commit.

>>> import kerashvd as hvd
>>> hvd.init()
>>> state = hvd.elastic.KerasState(model, batch=0, epoch=0)   # doctest: +SKIP
>>> state.register_reset_callbacks([lambda: model.optimizer.learning_rate.assign(
...     0.001 * hvd.size())])                                    # doctest: +SKIP
>>> @hvd.elastic.run
... def train(state):
...     state.model.fit(dataset, steps_per_epoch=100, epochs=10 - state.epoch, callbacks=[
...         hvd.elastic.UpdateEpochStateCallback(state),
...         hvd.elastic.UpdateBatchStateCallback(state),
...         hvd.elastic.CommitStateCallback(state)])             # doctest: +SKIP
>>> train(state)                                                 # doctest: +SKIP

Launch with ``kerashvdrun --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python
train.py`` (or ``-H``, or inside a SLURM allocation). How worlds are replaced, and where this
differs from Horovod, is in ``run.py`` and docs/elastic.md.

Modules: ``state`` (:class:`State`, :class:`ObjectState`), ``keras_state``
(:class:`TensorFlowKerasState`, :class:`KerasState`), ``tensorflow_state``
(:class:`TensorFlowState`: a list of variables, eagerly or with a TensorFlow 1 session),
``callbacks`` (the three Keras callbacks), ``run`` (the :func:`run` decorator),
``launcher_link`` (this rank's end of the protocol with ``kerashvdrun``).
"""

from kerashvd.runtime.exceptions import HorovodInternalError, HostsUpdatedInterrupt

from .callbacks import CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback
from .keras_state import KerasState, TensorFlowKerasState
from .run import run
from .state import ObjectState, State
from .tensorflow_state import TensorFlowState

__all__ = [
    "CommitStateCallback",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "KerasState",
    "ObjectState",
    "State",
    "TensorFlowKerasState",
    "TensorFlowState",
    "UpdateBatchStateCallback",
    "UpdateEpochStateCallback",
    "run",
]
