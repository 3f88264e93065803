"""Prints, for CMake, where the build's Python environment keeps NCCL.

Output lines are KEY=VALUE: NCCL_HOME, the folder that holds include/nccl.h and
lib/libnccl.so.2 in an `nvidia-nccl-cu*` wheel (site-packages/nvidia/nccl), and NCCL_WHEEL, the
wheel's name. Wheels for newer CUDA majors are preferred when several are installed. Run by
ops/core/backend/nccl/CMakeLists.txt when KERASHVD_NCCL_HOME is not set; it never downloads
anything.
"""
import importlib.metadata
import os
import sys

# Most recent CUDA major first: the first installed wheel wins.
WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")


def nccl_home(name):
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    header = library = None
    for f in dist.files or []:
        text = str(f).replace("\\", "/")
        if text.endswith("include/nccl.h"):
            header = os.path.realpath(dist.locate_file(f))
        elif text.endswith("lib/libnccl.so.2"):
            library = os.path.realpath(dist.locate_file(f))
    if not header or not library:
        return None
    home = os.path.dirname(os.path.dirname(header))
    if os.path.dirname(os.path.dirname(library)) != home:
        return None
    return home


def main():
    for name in WHEELS:
        home = nccl_home(name)
        if home:
            print(f"NCCL_HOME={home}")
            print(f"NCCL_WHEEL={name}")
            return
    sys.exit("find_nccl.py: none of the wheels " + ", ".join(WHEELS) + " is installed "
             "with include/nccl.h and lib/libnccl.so.2")


if __name__ == "__main__":
    main()
