"""Screenshots of HTML pages with Debian's headless chromium (`apt-get install -y chromium`).

Each page is written to a fresh temporary folder and opened by a fresh chromium process with an
empty profile, the network blocked (every host name resolves to nothing, so a page that pulls a
script from a CDN renders without it instead of waiting for it) and a hard timeout: a page that
does not finish in time, crashes chromium or writes no screenshot is a black 224 x 224 image, as in
the official evaluator. The folder is removed afterwards. The simulated human sees the 1024 x 768
window; the evaluator's screenshots are full pages (`full_page`): a first pass measures the page's
height, a second takes the screenshot in a window that tall, since headless chromium's --screenshot
has no full-page mode of its own. At most MAX_CONCURRENT_RENDERS chromium processes run at once per
Python process; screenshots of pages seen before come from a small cache.
"""
import concurrent.futures
import functools
import io
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import threading

from PIL import Image

WIDTH, HEIGHT = 1024, 768      # the browser window; CLIP and the simulator downsample anyway
MAX_PAGE_HEIGHT = 6000         # a full-page screenshot's height at most
TIMEOUT_S = 10.0               # per page, from launch to screenshot
MAX_CONCURRENT_RENDERS = 2     # chromium processes at once (one per CPU core here)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
    "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND",  # no page may reach the network
]

_slots = threading.BoundedSemaphore(MAX_CONCURRENT_RENDERS)


class ChromiumMissing(RuntimeError):
    """No chromium on this machine: a setup error, not a page that failed to render."""


@functools.lru_cache(maxsize=1)
def chromium_binary():
    """The chromium executable ($CHROMIUM overrides), or a ChromiumMissing error that says how to install it."""
    for name in ((os.environ.get("CHROMIUM"),) if os.environ.get("CHROMIUM") else CHROMIUM_NAMES):
        path = shutil.which(name)
        if path:
            return path
    raise ChromiumMissing("rendering frontend pages needs chromium: apt-get install -y chromium "
                          "(or set $CHROMIUM to a Chrome/Chromium executable)")


def blank_image(width=WIDTH, height=HEIGHT):
    """An empty page as a browser shows it: a white screen."""
    return Image.new("RGB", (width, height), "white")


def failed_image():
    """A page that fails to render, or no page at all, as the official evaluator scores it: a black 224 x 224."""
    return Image.new("RGB", (224, 224), "black")


def render(html, width=WIDTH, height=HEIGHT, timeout=TIMEOUT_S, full_page=False):
    """The screenshot of one page as an RGB PIL image: the window, or with `full_page` all of the page (at
    least the window's height). A page that fails to render is failed_image()."""
    if not html or not html.strip():
        return blank_image(width, height)
    if full_page:
        height = min(MAX_PAGE_HEIGHT, max(height, _page_height(html, width, height, timeout) or height))
    png = _screenshot_png(html, width, height, timeout)
    return Image.open(io.BytesIO(png)).convert("RGB") if png else failed_image()


def render_many(pages, width=WIDTH, height=HEIGHT, timeout=TIMEOUT_S, full_page=False):
    """Screenshots of several pages, in order, MAX_CONCURRENT_RENDERS at a time."""
    with concurrent.futures.ThreadPoolExecutor(MAX_CONCURRENT_RENDERS) as pool:
        return list(pool.map(lambda page: render(page, width, height, timeout, full_page), pages))


# Appended to a page to measure it: once it has loaded, the height of its document goes into the DOM.
MEASURE = ("<script>addEventListener('load', function () { document.documentElement.setAttribute("
           "'data-page-height', Math.ceil(document.documentElement.scrollHeight)) })</script>")


@functools.lru_cache(maxsize=256)
def _page_height(html, width, height, timeout):
    """The page's height in pixels in a width x height window, read from chromium's --dump-dom; None on failure."""
    dom = _chromium(html + MEASURE, width, height, timeout, "--dump-dom")
    found = re.search(rb'data-page-height="(\d+)"', dom or b"")
    return int(found.group(1)) if found else None


@functools.lru_cache(maxsize=256)  # the reference page is rendered again at every turn otherwise
def _screenshot_png(html, width, height, timeout):
    """PNG bytes of the page's screenshot, or None when chromium fails or runs out of time."""
    return _chromium(html, width, height, timeout, "--screenshot")


def _chromium(html, width, height, timeout, mode):
    """What chromium makes of the page in `mode`: --screenshot's PNG bytes, or --dump-dom's output; None when
    chromium fails, runs out of time or writes nothing."""
    binary = chromium_binary()
    with _slots, tempfile.TemporaryDirectory(prefix="colbench-render-", ignore_cleanup_errors=True) as folder:
        page = pathlib.Path(folder, "page.html")
        page.write_text(html, encoding="utf-8")
        screenshot = pathlib.Path(folder, "screenshot.png")
        output = pathlib.Path(folder, "output")
        argument = f"--screenshot={screenshot}" if mode == "--screenshot" else mode
        command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={folder}/profile", f"--window-size={width},{height}",
                   argument, page.as_uri()]
        # A session of its own, so a timeout kills chromium's whole process tree, not only its launcher.
        with open(output, "wb") as stdout:
            process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return None
            finally:
                try:  # helpers that outlive a finished launcher go too
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        result = screenshot if mode == "--screenshot" else output
        if process.returncode != 0 or not result.exists() or result.stat().st_size == 0:
            return None
        return result.read_bytes()
