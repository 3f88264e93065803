"""A list of TensorFlow variables as elastic state: :class:`TensorFlowState`, Horovod's
``hvd.elastic.TensorFlowState``, eagerly (TensorFlow 2) or in TensorFlow 1 graph mode with a
session.

Eagerly a commit keeps a read of each variable (no copy until the next update writes the
variable, as in :class:`~kerashvd.elastic.TensorFlowKerasState`) and a restore assigns it back.
In graph mode the state builds its ops once, in the session's graph (the broadcast of the
variables, one placeholder and assignment per variable, the broadcast of the other
attributes), and each commit, restore and sync runs them: a commit keeps the values in host
memory.
"""

import numpy as np
import tensorflow as tf

import kerashvd as hvd

from .state import ObjectState, check_handover_shapes

_NAME = "elastic.tensorflow_state"


class TensorFlowState(ObjectState):
    """TensorFlow variables and Python objects as elastic state.

    ``sync()`` gives every rank rank 0's variables and attributes, ``commit()`` saves them
    and checks for host changes, ``restore()`` goes back to the last commit (see
    :class:`~kerashvd.elastic.State`).

    Args:
        variables: the ``tf.Variable`` objects to keep (``keras.Variable`` too), in the same
            order on every rank. In graph mode the default is the graph's global variables
            (``tf.compat.v1.global_variables()``), as in Horovod; eagerly they must be given:
            TensorFlow 2 keeps no list of global variables.
        session: in TensorFlow 1 graph mode, the ``tf.compat.v1.Session`` that runs the
            variables' graph (default: the default session). Given, it also selects graph mode.
        **kwargs: more attributes to keep (e.g. ``epoch=0, batch=0``), as in
            :class:`~kerashvd.elastic.ObjectState`.

    Raises:
        ValueError: eagerly without ``variables``; in graph mode without a session.

    Under ``kerashvdrun``'s elastic mode a commit's host check runs eagerly: in graph mode,
    call ``commit()`` outside the graph's ``as_default()`` block, with eager execution on.

    Example:

    >>> w = tf.Variable(tf.zeros([10, 1]))
    >>> state = hvd.elastic.TensorFlowState([w], epoch=0)
    >>> state.sync()  # every rank now holds rank 0's w and epoch
    >>> state.epoch = 1; state.commit()

    In TensorFlow 1 graph mode::

        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            state = hvd.elastic.TensorFlowState(session=sess, epoch=0)
    """

    def __init__(self, variables=None, session=None, **kwargs):
        graph_mode = session is not None or not tf.executing_eagerly()
        self.session = session
        if graph_mode and session is None:
            self.session = tf.compat.v1.get_default_session()
            if self.session is None:
                raise ValueError(
                    "hvd.elastic.TensorFlowState in TensorFlow 1 graph mode needs the session "
                    "that runs the variables' graph: pass session=sess, or create the state "
                    "inside `with sess.as_default():`.")
        if variables is None and not graph_mode:
            raise ValueError(
                "hvd.elastic.TensorFlowState needs its variables when executing eagerly: "
                "TensorFlow 2 keeps no list of global variables. Pass them, e.g. "
                "TensorFlowState(model.variables + optimizer.variables, epoch=0).")
        bcast_object = None
        if graph_mode:
            with self.session.graph.as_default():
                if variables is None:
                    variables = tf.compat.v1.global_variables()
                self.variables = list(variables)
                self._build_graph_ops()
            bcast_object = hvd.broadcast_object_fn(root_rank=0, session=self.session,
                                                   name=_NAME + ".objects")
        else:
            self.variables = list(variables)
        self._save_variables()
        super().__init__(bcast_object=bcast_object, **kwargs)

    def _build_graph_ops(self):
        """The ops graph mode runs: the broadcast, and assignments fed by placeholders."""
        self._bcast_op = hvd.broadcast_variables(self.variables, root_rank=0, name=_NAME)
        self._feeds = [tf.compat.v1.placeholder(tf.as_dtype(v.dtype).base_dtype, v.shape)
                       for v in self.variables]
        self._load_op = tf.group(*[v.assign(feed) for v, feed in zip(self.variables,
                                                                      self._feeds)])

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        self._load_variables()
        super().restore()

    def sync(self):
        if self.session is not None:
            self.session.run(self._bcast_op)
        else:
            hvd.broadcast_variables(self.variables, root_rank=0, name=_NAME)
        self._save_variables()
        super().sync()

    def _save_variables(self):
        if self.session is not None:
            self._values = [np.array(x) for x in self.session.run(self.variables)]
        else:
            self._values = [tf.identity(v) for v in self.variables]

    def _load_variables(self):
        if self.session is not None:
            self.session.run(self._load_op, feed_dict=dict(zip(self._feeds, self._values)))
        else:
            for variable, value in zip(self.variables, self._values):
                variable.assign(value)

    def _handover_payload(self):
        return dict(super()._handover_payload(), variables=[np.asarray(x) for x in self._values])

    def _take_payload(self, payload):
        check_handover_shapes("TensorFlowState", self.variables, payload["variables"])
        super()._take_payload(payload)
        values = payload["variables"]
        self._values = ([np.asarray(x) for x in values] if self.session is not None
                        else [tf.convert_to_tensor(x) for x in values])
