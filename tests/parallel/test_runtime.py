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
    assert hvd.is_homogeneous()  # one host; uneven hosts: tests/test_topology.py
    assert hvd.allgather_object(hvd.rank()) == list(range(hvd.size()))
