"""Screenshots of HTML pages with Debian's headless chromium (`apt-get install -y chromium`).

Each page is written to a fresh temporary folder and opened by a fresh chromium process with an
empty profile, the network blocked (every host name resolves to nothing, so a page that pulls a
script from a CDN renders without it instead of waiting for it) and a hard timeout: a page that
does not finish in time, crashes chromium or writes no screenshot counts as a blank image, as in
the paper. The folder is removed afterwards. At most MAX_CONCURRENT_RENDERS chromium processes
run at once per Python process; screenshots of pages seen before come from a small cache.
"""
import concurrent.futures
import functools
import io
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import threading

from PIL import Image

WIDTH, HEIGHT = 1024, 768      # the browser window; CLIP and the simulator downsample anyway
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
    """What a page that fails to render looks like: a white screen."""
    return Image.new("RGB", (width, height), "white")


def render(html, width=WIDTH, height=HEIGHT, timeout=TIMEOUT_S):
    """The screenshot of one page as an RGB PIL image (blank when the page fails to render)."""
    if not html or not html.strip():
        return blank_image(width, height)
    png = _screenshot_png(html, width, height, timeout)
    return Image.open(io.BytesIO(png)).convert("RGB") if png else blank_image(width, height)


def render_many(pages, width=WIDTH, height=HEIGHT, timeout=TIMEOUT_S):
    """Screenshots of several pages, in order, MAX_CONCURRENT_RENDERS at a time."""
    with concurrent.futures.ThreadPoolExecutor(MAX_CONCURRENT_RENDERS) as pool:
        return list(pool.map(lambda page: render(page, width, height, timeout), pages))


@functools.lru_cache(maxsize=256)  # the reference page is rendered again at every turn otherwise
def _screenshot_png(html, width, height, timeout):
    """PNG bytes of the page's screenshot, or None when chromium fails or runs out of time."""
    binary = chromium_binary()
    with _slots, tempfile.TemporaryDirectory(prefix="colbench-render-", ignore_cleanup_errors=True) as folder:
        page = pathlib.Path(folder, "page.html")
        page.write_text(html, encoding="utf-8")
        screenshot = pathlib.Path(folder, "screenshot.png")
        command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={folder}/profile", f"--window-size={width},{height}",
                   f"--screenshot={screenshot}", page.as_uri()]
        # A session of its own, so a timeout kills chromium's whole process tree, not only its launcher.
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
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
        if process.returncode != 0 or not screenshot.exists() or screenshot.stat().st_size == 0:
            return None
        return screenshot.read_bytes()
