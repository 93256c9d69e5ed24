"""Argument types that refuse a bad value at parse time: `parser.add_argument("--timeout", type=positive_float)`.

argparse turns the ArgumentTypeError into one line naming the flag and what it accepts, and exits
with status 2, before any model loads or any file is written.
"""
import argparse
import math


def _checked(text, convert, accepts, allowed):
    """`text` converted, if the value is one that `accepts`; else an error saying what is `allowed`."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not accepts(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {allowed}")
    return value


def positive_int(text):
    """An integer >= 1 (workers, batch sizes, epochs)."""
    return _checked(text, int, lambda value: value >= 1, "an integer >= 1")


def non_negative_int(text):
    """An integer >= 0 (seeds, counts that may be zero)."""
    return _checked(text, int, lambda value: value >= 0, "an integer >= 0")


def positive_float(text):
    """A finite number > 0 (timeouts, learning rates, temperatures of a loss)."""
    return _checked(text, float, lambda value: 0 < value < math.inf, "a finite number > 0")


def non_negative_float(text):
    """A finite number >= 0 (margins, sampling temperatures where 0 means greedy)."""
    return _checked(text, float, lambda value: 0 <= value < math.inf, "a finite number >= 0")


def fraction(text):
    """A number in (0, 1]: a share of the data to use."""
    return _checked(text, float, lambda value: 0 < value <= 1, "a number in (0, 1]")
