"""The runtime: the engine's life in this process and where the process sits in the job.

``lifecycle`` (``init``, ``shutdown``, ``build_info``), ``world`` (rank, size and the other
topology queries), ``config`` (the engine's settings), ``process_sets``, ``topology_ops``
(the topology as tensors), ``gpu_pinning``, ``tf_threads``, ``tf_defaults`` and
``launch_env`` (what ``init()`` sets up or checks), ``exceptions`` (Horovod's),
``invalid_argument`` (a collective's wrong argument). ``_engine`` loads the compiled engine
once (``_loader``: the MPI library first, then the TensorFlow version check); ``_op_library``
loads the TensorFlow ops. Nothing here imports the layers above (collectives, the Keras
integration, the launcher: the import-linter contracts in ``pyproject.toml``), and importing
this package imports none of its modules.
"""
