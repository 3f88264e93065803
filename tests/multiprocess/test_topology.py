"""Host topology (local/cross ranks, is_homogeneous) with ranks spread over simulated hosts.

MPICH's debugging setting MPIR_CVAR_ODD_EVEN_CLIQUES=1 makes even and odd ranks of one
machine see each other as two separate hosts (shared-memory domains), which is what
kerashvd's topology comes from. 3 ranks: host A has ranks 0 and 2, host B rank 1.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, mpiexec_path

# The runtime loads without TensorFlow, so this starts quickly. Each rank writes its own file
# (mpiexec's merged stdout may interleave the ranks' lines).
_SCRIPT = ("import json, os, sys, kerashvd as hvd; hvd.init(); "
           "json.dump([hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(), "
           "hvd.is_homogeneous()], open(os.path.join(sys.argv[1], str(hvd.rank())), 'w'))")


def _topology(np, cliques, out_dir):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if cliques:
        env["MPIR_CVAR_ODD_EVEN_CLIQUES"] = "1"
    out = subprocess.run([mpiexec_path(), "-n", str(np), sys.executable, "-c", _SCRIPT,
                          str(out_dir)],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return {r: tuple(json.loads((out_dir / str(r)).read_text())) for r in range(np)}


@pytest.mark.parametrize("np,cliques,expected", [
    # rank: (local_rank, local_size, cross_rank, cross_size, is_homogeneous)
    (3, False, {0: (0, 3, 0, 1, True), 1: (1, 3, 0, 1, True), 2: (2, 3, 0, 1, True)}),
    (3, True, {0: (0, 2, 0, 2, False), 1: (0, 1, 1, 2, False), 2: (1, 2, 0, 1, False)}),
    (4, True, {0: (0, 2, 0, 2, True), 1: (0, 2, 1, 2, True), 2: (1, 2, 0, 2, True),
               3: (1, 2, 1, 2, True)}),
], ids=["one_host", "uneven_hosts", "two_even_hosts"])
def test_topology_over_simulated_hosts(np, cliques, expected, tmp_path):
    assert _topology(np, cliques, tmp_path) == expected


_OPS_SCRIPT = ("import json, os, sys, tensorflow as tf, kerashvd as hvd; hvd.init(); "
               "names = ['rank', 'size', 'local_rank', 'local_size', 'cross_rank', 'cross_size']; "
               "ops = tf.function(lambda: [getattr(hvd, n + '_op')() for n in names])(); "
               "json.dump([[int(v) for v in ops], [getattr(hvd, n)() for n in names]], "
               "open(os.path.join(sys.argv[1], str(hvd.rank())), 'w'))")


def test_topology_ops_match_the_queries_over_simulated_hosts(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", MPIR_CVAR_ODD_EVEN_CLIQUES="1")
    out = subprocess.run([mpiexec_path(), "-n", "3", sys.executable, "-c", _OPS_SCRIPT,
                          str(tmp_path)], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for r in range(3):
        ops, queries = json.loads((tmp_path / str(r)).read_text())
        assert ops == queries, (r, ops, queries)
        assert queries[:4] == [r, 3, [0, 0, 1][r], [2, 1, 2][r]]  # the hosts are really uneven
