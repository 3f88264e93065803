"""argparse types of ``kerashvdrun``'s flags: bounded integers, ports and seconds, each
refusing bad text with what it expected and what it received."""

import argparse
import math


def int_at_least(minimum):
    """An argparse type: an integer >= ``minimum``."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {minimum}, received {text!r}")
        return value
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def port(text):
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, received {text!r}")
    return value


def seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"expected a finite number of seconds >= 0, received {text!r}")
    return value


def positive_seconds(text):
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, received {text!r}")
    return value
