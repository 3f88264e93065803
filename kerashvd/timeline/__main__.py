"""``python -m kerashvd.timeline path.json``: print time per phase of a timeline file."""

import argparse
import sys

from . import summarize


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kerashvd.timeline",
                                     description="Summarize a kerashvd timeline file.")
    parser.add_argument("path", help="a timeline written by KERASHVD_TIMELINE or start_timeline()")
    args = parser.parse_args(argv)
    summarize(args.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
