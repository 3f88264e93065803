"""Prints, for CMake, where the build's Python environment keeps MPI and TensorFlow.

Output lines are KEY=VALUE: MPI_INCLUDE_DIR and MPI_LIBRARY from the `mpich` wheel, then
TF_INCLUDE_DIR, TF_LIB_DIR, TF_VERSION and TF_CFLAGS from the installed TensorFlow. Run by
ops/CMakeLists.txt; it never downloads anything.
"""
import importlib.metadata
import os
import sys


def mpich_paths():
    dist = importlib.metadata.distribution("mpich")
    header = library = None
    for f in dist.files or []:
        text = str(f).replace("\\", "/")
        if text.endswith("include/mpi.h"):
            header = os.path.realpath(dist.locate_file(f))
        elif text.endswith("libmpi.so.12"):
            library = os.path.realpath(dist.locate_file(f))
    if not header or not library:
        sys.exit("find_deps.py: the mpich wheel has no include/mpi.h or lib/libmpi.so.12")
    return os.path.dirname(header), library


def main():
    what = sys.argv[1:] or ["mpi", "tf"]
    if "mpi" in what:
        include, library = mpich_paths()
        print(f"MPI_INCLUDE_DIR={include}")
        print(f"MPI_LIBRARY={library}")
    if "tf" in what:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow as tf

        flags = [f for f in tf.sysconfig.get_compile_flags() if not f.startswith("-I")]
        print(f"TF_INCLUDE_DIR={tf.sysconfig.get_include()}")
        print(f"TF_LIB_DIR={tf.sysconfig.get_lib()}")
        print(f"TF_VERSION={tf.__version__}")
        print(f"TF_CFLAGS={';'.join(flags)}")


if __name__ == "__main__":
    main()
