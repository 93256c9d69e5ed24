"""Screenshots of HTML pages with Debian's headless chromium (`apt-get install -y chromium`).

Each page is written to a fresh temporary folder and opened by a fresh chromium process with an
empty profile, the network blocked (every host name resolves to nothing, so a page that pulls a
script from a CDN renders without it instead of waiting for it) and a hard timeout: a page that
does not finish in time, crashes chromium or writes no screenshot is a black 224 x 224 image, as in
the official evaluator. The folder is removed afterwards. The simulated human sees the 1024 x 768
window; the evaluator's screenshots are full pages (`full_page`): headless chromium's --screenshot has
no full-page mode of its own, so one launch takes the window's screenshot and measures the page's
height (--dump-dom beside it), and only a page taller than the window is shot again, in a window that
tall. At most MAX_CONCURRENT_RENDERS chromium processes run at once per Python process; screenshots of
pages seen before come from a small cache, and where $COLBENCH_SCREENSHOTS names a folder, from the files
that earlier processes left there (the frontend run's scoring renders each test task's reference page
once, not once per agent).
"""
import concurrent.futures
import functools
import hashlib
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
        png, page_height = _screenshot_and_height(html, width, height, timeout)
        if page_height and page_height > height:  # taller than the window: shot again in a window that tall
            png = _screenshot_png(html, width, min(MAX_PAGE_HEIGHT, page_height), timeout)
    else:
        png = _screenshot_png(html, width, height, timeout)
    return Image.open(io.BytesIO(png)).convert("RGB") if png else failed_image()


def render_many(pages, width=WIDTH, height=HEIGHT, timeout=TIMEOUT_S, full_page=False):
    """Screenshots of several pages, in order, MAX_CONCURRENT_RENDERS at a time."""
    with concurrent.futures.ThreadPoolExecutor(MAX_CONCURRENT_RENDERS) as pool:
        return list(pool.map(lambda page: render(page, width, height, timeout, full_page), pages))


# Appended to a page to measure it: once it has loaded, the height of its document goes into the DOM (it
# changes nothing the screenshot shows).
MEASURE = ("<script>addEventListener('load', function () { document.documentElement.setAttribute("
           "'data-page-height', Math.ceil(document.documentElement.scrollHeight)) })</script>")


@functools.lru_cache(maxsize=256)
def _screenshot_and_height(html, width, height, timeout):
    """One launch: PNG bytes of the page's screenshot in a width x height window, and the page's height in
    pixels read from --dump-dom (each None on failure)."""
    png, dom = _chromium(html + MEASURE, width, height, timeout, dump_dom=True)
    found = re.search(rb'data-page-height="(\d+)"', dom or b"")
    return png, int(found.group(1)) if found else None


@functools.lru_cache(maxsize=256)  # the reference page is rendered again at every turn otherwise
def _screenshot_png(html, width, height, timeout):
    """PNG bytes of the page's screenshot, or None when chromium fails or runs out of time."""
    return _chromium(html, width, height, timeout)[0]


def _chromium(html, width, height, timeout, dump_dom=False):
    """The page's --screenshot PNG bytes and, with `dump_dom`, its --dump-dom output: each None when chromium
    fails, runs out of time or writes nothing. Read from $COLBENCH_SCREENSHOTS where an earlier launch left
    them; a failure is not kept there (a timeout may pass on another try)."""
    folder = os.environ.get("COLBENCH_SCREENSHOTS")
    if not folder:
        return _launch(html, width, height, timeout, dump_dom)
    key = hashlib.sha256(f"{width}x{height} {dump_dom}\n{html}".encode()).hexdigest()
    files = [pathlib.Path(folder, key + suffix) for suffix in (".png", ".dom")]
    if all(path.exists() for path in files):
        return tuple(path.read_bytes() or None for path in files)
    found = _launch(html, width, height, timeout, dump_dom)
    if found[0]:
        os.makedirs(folder, exist_ok=True)
        for path, content in zip(files, found):  # whole files only: written aside, then renamed
            part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")
            part.write_bytes(content or b"")
            os.replace(part, path)
    return found


def _launch(html, width, height, timeout, dump_dom):
    """One chromium process: _chromium's two outputs."""
    binary = chromium_binary()
    with _slots, tempfile.TemporaryDirectory(prefix="colbench-render-", ignore_cleanup_errors=True) as folder:
        page = pathlib.Path(folder, "page.html")
        page.write_text(html, encoding="utf-8")
        screenshot = pathlib.Path(folder, "screenshot.png")
        output = pathlib.Path(folder, "output")
        command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={folder}/profile", f"--window-size={width},{height}",
                   f"--screenshot={screenshot}", *(["--dump-dom"] if dump_dom else []), page.as_uri()]
        # A session of its own, so a timeout kills chromium's whole process tree, not only its launcher.
        with open(output, "wb") as stdout:
            process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return None, None
            finally:
                try:  # helpers that outlive a finished launcher go too
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if process.returncode != 0:
            return None, None
        return tuple(path.read_bytes() if path.exists() and path.stat().st_size else None
                     for path in (screenshot, output))
