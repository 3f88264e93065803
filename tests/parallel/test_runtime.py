"""Runtime API at any world size."""

import os


def test_topology_is_consistent(hvd):
    world = int(os.environ.get("KHVD_TEST_WORLD", "1"))
    assert hvd.size() == world
    assert 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size() <= hvd.size()
    assert hvd.local_size() * hvd.cross_size() == hvd.size()  # one host in these tests
    assert hvd.is_initialized()
    assert hvd.mpi_built() and hvd.mpi_enabled()
    assert hvd.is_homogeneous()  # one host; uneven hosts: tests/multiprocess/test_topology.py
    # CUDA is built only for the NCCL backend; Horovod's other backends do not exist here.
    assert hvd.cuda_built() == hvd.nccl_built() == (hvd.build_info()["cuda_version"] is not None)
    assert not any(q() for q in (hvd.gloo_built, hvd.gloo_enabled, hvd.rocm_built,
                                 hvd.ccl_built, hvd.ddl_built))
    assert hvd.allgather_object(hvd.rank()) == list(range(hvd.size()))


def test_topology_ops_read_the_engine_when_they_run(hvd):
    import tensorflow as tf

    names = ["rank", "size", "local_rank", "local_size", "cross_rank", "cross_size"]

    @tf.function
    def traced():
        return [getattr(hvd, name + "_op")() for name in names]

    for values in (traced(), [getattr(hvd, name + "_op")() for name in names]):
        for name, value in zip(names, values):
            assert value.dtype == tf.int32 and value.shape == ()
            assert int(value) == getattr(hvd, name)(), name
    # Stateful: not folded into a constant by TF's graph optimizations.
    graph = traced.get_concrete_function().graph.as_graph_def()
    assert sum(node.op == "KerashvdTopology" for node in graph.node) == len(names)
    assert int(hvd.size_op(process_set_id=0)) == hvd.size()
    import pytest

    with pytest.raises(ValueError, match="process_set_id"):
        hvd.size_op(process_set_id=-1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="process set 999 is not registered"):
        hvd.size_op(process_set_id=999)
