"""Training with kerashvd: the Keras integration and its TensorFlow counterparts.

``optimizer/`` (``DistributedOptimizer``: ``select`` picks the Keras 3 or the tf_keras class;
gradient reduction, local aggregation, the optimizer chain), ``tape`` (``DistributedGradientTape``,
for custom TensorFlow loops), ``partial`` (local layers), ``sync_batch_norm``, ``saving``
(``load_model``), ``keras_compat`` (the Keras that ``tf.keras`` uses; ``_keras_choice`` reads
that without importing it), ``_keras_classes`` (registration with Keras' serialization) and
``_xla`` (``jit_compile`` and kerashvd's ops). These build on :mod:`kerashvd.collectives` and
:mod:`kerashvd.runtime`; importing this package imports none of its modules.
"""
