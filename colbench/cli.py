"""Argument types that refuse a bad value at parse time: `parser.add_argument("--timeout", type=positive_float)`.

argparse turns the ArgumentTypeError into one line naming the flag and what it accepts, and exits
with status 2, before any model loads or any file is written. Bad input found later (a bad file, a
dead server) ends the same way: `fail(message)`, one `error:` line on stderr and status 2.
"""
import argparse
import math
import sys

from colbench.data import DataError, load_trajectories

PROBE_ATTEMPTS, PROBE_TIMEOUT_S = 2, 3.0  # a start-up check: a dead URL is reported in seconds


def fail(message):
    """Stop on bad input as argparse does: `error: message` on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def trajectories_or_fail(path, rewards_for=None):
    """load_trajectories(path), or one `error:` line naming the file, line and field (exit 2). With
    `rewards_for` (what needs them), every trajectory must carry a numeric 'reward'."""
    try:
        return load_trajectories(path, rewards_for)
    except DataError as e:
        fail(e)


def _checked(text, convert, accepts, allowed):
    """`text` converted, if the value is one that `accepts`; else an error saying what is `allowed`."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not accepts(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {allowed}")
    return value


def at_least(minimum):
    """The type of an integer flag >= `minimum`: `type=at_least(2)` where fewer than 2 makes no sense."""
    def integer(text):
        return _checked(text, int, lambda value: value >= minimum, f"an integer >= {minimum}")
    return integer


positive_int = at_least(1)  # workers, batch sizes, epochs
non_negative_int = at_least(0)  # seeds, counts that may be zero


def positive_float(text):
    """A finite number > 0 (timeouts, learning rates, temperatures of a loss)."""
    return _checked(text, float, lambda value: 0 < value < math.inf, "a finite number > 0")


def non_negative_float(text):
    """A finite number >= 0 (margins, sampling temperatures where 0 means greedy)."""
    return _checked(text, float, lambda value: 0 <= value < math.inf, "a finite number >= 0")


def fraction(text):
    """A number in (0, 1]: a share of the data to use."""
    return _checked(text, float, lambda value: 0 < value <= 1, "a number in (0, 1]")


def fraction_or_zero(text):
    """A number in [0, 1]: a share that may be none (tasks held out)."""
    return _checked(text, float, lambda value: 0 <= value <= 1, "a number in [0, 1]")


def below_one(text):
    """A number in [0, 1): one of Adam's betas."""
    return _checked(text, float, lambda value: 0 <= value < 1, "a number in [0, 1)")


def is_url(text):
    """Whether a model flag names a server (http:// or https://) rather than a model."""
    return text.startswith(("http://", "https://"))


def server_url(text):
    """An http(s) URL."""
    if not is_url(text):
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


def require_server(flag, url):
    """Fail unless an OpenAI-compatible server answers GET /models at `url` (the value of `flag`).

    Called before any model loads. A few quick attempts only: EndpointChat's long retries are for a
    server that answers but falters during a run."""
    import requests
    from colbench.models import EndpointChat  # imports torch: only scripts given a URL pay for it here
    try:
        EndpointChat(url, retries=PROBE_ATTEMPTS - 1, timeout=PROBE_TIMEOUT_S)
    except (RuntimeError, requests.HTTPError) as e:  # no answer, or an HTTP error status
        fail(f"{flag} {url}: no OpenAI-compatible server answers ({e})")
    except (ValueError, LookupError, TypeError):  # it answers, but not with an OpenAI model list
        fail(f"{flag} {url}: the server answers, but GET /models gives no OpenAI model list")
