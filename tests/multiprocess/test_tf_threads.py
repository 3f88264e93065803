"""TensorFlow's thread pools do not spin when ranks share a host (kerashvd.runtime.tf_threads).

Each case is a fresh job, since the setting is fixed when TensorFlow creates its pools.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, mpiexec_path

_ORDERS = {
    # TensorFlow imported before init(): applied by init().
    "tf_first": "import tensorflow as tf\nimport kerashvd as hvd\nhvd.init()\n",
    # init() before TensorFlow is imported: applied when kerashvd's ops load.
    "hvd_first": "import kerashvd as hvd\nhvd.init()\nimport tensorflow as tf\n",
    # TensorFlow ran an op before init(): too late, its pools keep spinning (no error).
    "tf_ran_first": "import tensorflow as tf\ntf.constant(1.0) + 1\nimport kerashvd as hvd\n"
                    "hvd.init()\n",
}

_CHECK = """
from kerashvd.runtime import tf_threads
assert hvd.allreduce(tf.constant(1.0), op=hvd.Sum).numpy() == hvd.size()
with open(os.path.join(out_dir, str(hvd.rank())), "w") as f:
    f.write(str(tf_threads.spinning_disabled()))
"""


@pytest.mark.parametrize("np,order,setting,disabled", [
    (2, "tf_first", None, True),
    (2, "hvd_first", None, True),
    (2, "tf_ran_first", None, False),
    (2, "tf_first", "1", False),
    (1, "tf_first", None, False),
    (1, "hvd_first", "0", True),
])
def test_spinning_is_off_with_several_ranks_per_host(np, order, setting, disabled, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERASHVD_")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    if setting is not None:
        env["KERASHVD_TF_THREAD_SPINNING"] = setting
    script = f"import os\nout_dir = {str(tmp_path)!r}\n" + _ORDERS[order] + textwrap.dedent(_CHECK)
    launcher = [mpiexec_path(), "-n", str(np)] if np > 1 else []
    proc = subprocess.run(launcher + [sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(tmp_path / str(r)).read_text() for r in range(np)] == [str(disabled)] * np
