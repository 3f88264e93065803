"""Process-level behaviour in one process: init, shutdown, settings, build info, TF version.

Each test that changes process state runs a fresh interpreter (``python -c``), so it neither
sees nor disturbs the kerashvd this pytest process may have initialized.
"""

import os
import subprocess
import sys
import textwrap

from conftest import REPO


def _clean_env(**extra):
    """This environment without kerashvd settings or MPI launcher variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERASHVD_", "KHVD_", "PMI_", "PMIX_", "HYDRA_", "HYDI_", "MPI_"))}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def run_python(script, timeout=180, **env):
    """Runs ``script`` in a fresh interpreter; returns its output. It must print 'DONE' last."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, env=_clean_env(**env),
                          capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("DONE"), \
        f"exit {proc.returncode}:\n{output[-6000:]}"
    return proc.stdout


def test_collectives_before_init_raise_not_initialized():
    run_python("""
        import kerashvd as hvd
        import tensorflow as tf

        assert not hvd.is_initialized()
        assert issubclass(hvd.NotInitializedError, RuntimeError)
        calls = {
            "rank": hvd.rank, "size": hvd.size, "local_rank": hvd.local_rank,
            "local_size": hvd.local_size, "cross_rank": hvd.cross_rank, "cross_size": hvd.cross_size,
            "mpi_threads_supported": hvd.mpi_threads_supported,
            "allreduce": lambda: hvd.allreduce(tf.ones([2])),
            "grouped_allreduce": lambda: hvd.grouped_allreduce([tf.ones([2])]),
            "allgather": lambda: hvd.allgather(tf.ones([2])),
            "grouped_allgather": lambda: hvd.grouped_allgather([tf.ones([2])]),
            "broadcast": lambda: hvd.broadcast(tf.ones([2]), root_rank=0),
            "grouped_broadcast": lambda: hvd.grouped_broadcast([tf.ones([2])], root_rank=0),
            "alltoall": lambda: hvd.alltoall(tf.ones([2])),
            "reducescatter": lambda: hvd.reducescatter(tf.ones([2])),
            "grouped_reducescatter": lambda: hvd.grouped_reducescatter([tf.ones([2])]),
            "barrier": hvd.barrier,
            "join": hvd.join,
            "broadcast_variables": lambda: hvd.broadcast_variables([tf.Variable(1.0)], root_rank=0),
            "broadcast_object": lambda: hvd.broadcast_object(1),
            "allgather_object": lambda: hvd.allgather_object(1),
            "traced allreduce": lambda: tf.function(lambda x: hvd.allreduce(x))(tf.ones([2])),
            "rank_op": hvd.rank_op, "size_op": hvd.size_op,
        }
        for what, call in calls.items():
            try:
                call()
            except hvd.NotInitializedError as err:
                assert "kerashvd.init()" in str(err), (what, err)
            else:
                raise AssertionError(f"{what} before init() did not raise NotInitializedError")

        # The raw op (bypassing the Python checks) fails cleanly too.
        from kerashvd.collectives._ops import OPS
        try:
            OPS.kerashvd_allreduce(tf.ones([2]), reduce_op=1, tensor_name="raw")
        except tf.errors.FailedPreconditionError as err:
            assert "not been initialized" in str(err), err
        else:
            raise AssertionError("raw op before init did not fail")
        try:  # a topology op traced before init fails when it runs
            tf.function(lambda: hvd.local_rank_op())()
        except tf.errors.FailedPreconditionError as err:
            assert "kerashvd.init()" in str(err), err
        else:
            raise AssertionError("traced local_rank_op before init did not fail")
        assert not hvd.is_initialized()
        print("DONE")
    """)


def test_init_twice_is_a_no_op_and_new_settings_raise():
    run_python("""
        import kerashvd as hvd
        import tensorflow as tf

        hvd.init()
        hvd.init()  # no-op
        assert hvd.is_initialized() and hvd.size() == 1 and hvd.rank() == 0
        assert hvd.local_size() == 1 and hvd.cross_size() == 1
        for settings in [{"cycle_time_ms": 5}, {"fusion_threshold_bytes": 1024}]:
            try:
                hvd.init(**settings)
            except ValueError as err:
                text = str(err)
                assert "already initialized" in text and "shutdown()" in text, text
                assert repr(settings)[1:-1].split(":")[0] in text, text  # names the setting
            else:
                raise AssertionError(f"init({settings}) while running did not raise")
        assert float(hvd.allreduce(tf.constant(3.0), op=hvd.Sum)) == 3.0
        print("DONE")
    """)


def test_shutdown_then_collective_raises_and_init_works_again():
    run_python("""
        import kerashvd as hvd
        import tensorflow as tf

        hvd.init()

        @tf.function
        def step(x):
            return hvd.allreduce(x, op=hvd.Sum, name="step")

        assert step(tf.ones([2])).numpy().tolist() == [1.0, 1.0]
        hvd.shutdown()
        assert not hvd.is_initialized()
        try:
            hvd.allreduce(tf.ones([2]))
        except hvd.NotInitializedError as err:
            assert "init()" in str(err), err
        else:
            raise AssertionError("allreduce after shutdown() did not raise")
        try:
            step(tf.ones([2]))  # already traced: the kernel itself must refuse
        except tf.errors.FailedPreconditionError as err:
            assert "not been initialized" in str(err), err
        else:
            raise AssertionError("traced allreduce after shutdown() did not raise")
        hvd.shutdown()  # a second shutdown is harmless

        hvd.init(cycle_time_ms=2)  # new settings are allowed after shutdown
        assert hvd.is_initialized() and hvd.size() == 1
        assert hvd.allreduce(tf.constant([2.0]), op=hvd.Sum).numpy().tolist() == [2.0]
        assert step(tf.ones([2])).numpy().tolist() == [1.0, 1.0]
        assert hvd.broadcast_object({"a": 1}) == {"a": 1}
        hvd.shutdown()
        hvd.init()
        assert hvd.allgather(tf.ones([3])).shape == (3,)
        print("DONE")
    """)


def test_unknown_kerashvd_variable_makes_init_raise():
    run_python("""
        import kerashvd as hvd

        try:
            hvd.init()
        except ValueError as err:
            text = str(err)
            assert "KERASHVD_FOO" in text and "KERASHVD_FUSION_THRESHOLDS" in text, text
            assert "KERASHVD_FUSION_THRESHOLD," in text or "KERASHVD_FUSION_THRESHOLD " in text, text
            # kerashvdrun --max-restarts sets it in every rank: known, not an error.
            assert "KERASHVD_RESTART_COUNT" in text.split("Known:")[1], text
            assert "KERASHVD_RESTART_COUNT" not in text.split("Known:")[0], text
        else:
            raise AssertionError("init() with KERASHVD_FOO set did not raise")
        assert not hvd.is_initialized()
        print("DONE")
    """, KERASHVD_FOO="1", KERASHVD_FUSION_THRESHOLDS="1024", KERASHVD_RESTART_COUNT="1")


def test_bad_values_of_known_settings_make_init_raise():
    run_python("""
        import os
        import kerashvd as hvd

        bad_variables = [
            ("KERASHVD_CYCLE_TIME", "abc"), ("KERASHVD_CYCLE_TIME", "0"), ("KERASHVD_CYCLE_TIME", ""),
            ("KERASHVD_FUSION_THRESHOLD", "-1"), ("KERASHVD_FUSION_THRESHOLD", "64MB"),
            ("KERASHVD_CACHE_CAPACITY", "-5"), ("KERASHVD_STALL_CHECK_TIME", "soon"),
            ("KERASHVD_STALL_SHUTDOWN_TIME", "-2"), ("KERASHVD_PEER_TIMEOUT", "-1"),
            ("KERASHVD_CYCLE_TIME", "nan"), ("KERASHVD_STALL_CHECK_TIME", "inf"),
            ("KERASHVD_FUSION_THRESHOLD", "-inf"), ("KERASHVD_HUGE_PAGES", "-1"),
            ("KERASHVD_HUGE_PAGES", "yes"), ("KERASHVD_TF_THREAD_SPINNING", "yes"),
            ("KERASHVD_TF_THREAD_SPINNING", "2"),
            # Dead-rank detection cannot be switched off, and needs more than a heartbeat (1 s).
            ("KERASHVD_PEER_TIMEOUT", "0"), ("KERASHVD_PEER_TIMEOUT", "1.5"),
            ("KERASHVD_PEER_TIMEOUT", "inf"), ("KERASHVD_PEER_TIMEOUT", "nan"),
        ]
        for variable, value in bad_variables:
            os.environ[variable] = value
            try:
                hvd.init()
            except ValueError as err:
                assert variable in str(err) and repr(value) in str(err), (variable, value, str(err))
                if value in ("inf", "nan", "-inf"):  # not "must be >= 2": it is no number at all
                    assert "must be a finite number" in str(err), str(err)
            else:
                raise AssertionError(f"init() with {variable}={value!r} did not raise")
            finally:
                del os.environ[variable]
            assert not hvd.is_initialized()

        for settings, named in [({"fusion_threshold_bytes": -1}, "fusion_threshold_bytes"),
                                ({"cycle_time_ms": 0}, "cycle_time_ms"), ({"bogus": 1}, "bogus"),
                                ({"cycle_time_ms": float("nan")}, "cycle_time_ms"),
                                ({"peer_timeout_seconds": 0}, "cannot be turned off")]:
            try:
                hvd.init(**settings)
            except ValueError as err:
                assert named in str(err), (settings, str(err))
            else:
                raise AssertionError(f"init({settings}) did not raise")
            assert not hvd.is_initialized()

        os.environ["KERASHVD_CYCLE_TIME"] = "2.5"  # good values still work
        os.environ["KERASHVD_FUSION_THRESHOLD"] = "0"
        os.environ["KERASHVD_HUGE_PAGES"] = "0"
        os.environ["KERASHVD_PEER_TIMEOUT"] = "2"
        hvd.init()
        assert hvd.size() == 1
        print("DONE")
    """)


def test_build_info():
    import importlib.metadata

    import kerashvd as hvd

    info = hvd.build_info()
    for key in ["tensorflow_version", "mpi_built", "mpi_source", "nccl_built", "cuda_version", "compiler"]:
        assert key in info, info
    assert info["tensorflow_version"] == importlib.metadata.version("tensorflow")
    assert info["mpi_built"] is True and hvd.mpi_built() is True
    assert isinstance(info["nccl_built"], bool) and info["nccl_built"] == hvd.nccl_built()
    assert isinstance(info["mpi_source"], str) and info["mpi_source"]
    assert isinstance(info["compiler"], str) and info["compiler"]
    assert info["cuda_version"] is None or isinstance(info["cuda_version"], str)
    if not info["nccl_built"]:
        assert info["cuda_version"] is None
    assert hvd.build_info() == info and hvd.build_info() is not info  # a fresh dict each call


def test_wrong_tensorflow_version_is_an_import_error_naming_both_versions():
    run_python("""
        import tensorflow as tf
        import kerashvd._build_info as build_info
        import kerashvd.runtime._loader as loader

        build_info.TF_VERSION = "2.0.0"
        for attempt in [loader.load_tf_ops, lambda: loader.check_tf_version()]:
            try:
                attempt()
            except ImportError as err:
                text = str(err)
                assert "compiled against TensorFlow 2.0.0" in text, text
                assert f"TensorFlow {tf.__version__} is installed" in text, text
                assert "pip install --no-build-isolation" in text and "--force-reinstall" in text, text
            else:
                raise AssertionError("a TensorFlow version mismatch did not raise ImportError")
        print("DONE")
    """)
