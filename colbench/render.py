"""Screenshots of HTML pages with Debian's headless chromium (`apt-get install -y chromium`).

A chromium process is started once and kept (a Browser), driven over the DevTools protocol through two
pipes (--remote-debugging-pipe: JSON messages, each ended by a zero byte). Each page is written to a file and
opened in a tab of a fresh browser context of its own (an empty profile: no cookies or storage of the pages
before), with the network blocked (every host name resolves to nothing, so a page that pulls a script from a
CDN renders without it instead of waiting for it) and a hard timeout: a page that does not load in time,
crashes chromium or gives no screenshot is a black 224 x 224 image, as in the official evaluator, and a
chromium that ran out of time is killed (the next page starts another). Starting chromium once, not once a
page: 0.35 s a page instead of 1.54, side by side (2026-11-27; a page within the window keeps its pixels).
The simulated human sees the 1024 x 768 window; the evaluator's screenshots are full pages (`full_page`): all
of a page taller than the window, laid out in the window (a `min-height: 100vh` block and the footer below
it both show), as the official evaluator's Firefox takes them. At most MAX_CONCURRENT_RENDERS chromium
processes run at once per Python process; screenshots of pages seen before come from a small cache, and
where $COLBENCH_SCREENSHOTS names a folder, from the files that earlier processes left there (the frontend
run's scoring renders each test task's reference page once, not once per agent).
"""
import atexit
import base64
import concurrent.futures
import functools
import hashlib
import io
import json
import os
import pathlib
import queue
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from PIL import Image

WIDTH, HEIGHT = 1024, 768      # the browser window; CLIP and the simulator downsample anyway
MAX_PAGE_HEIGHT = 6000         # a full-page screenshot's height at most
TIMEOUT_S = 10.0               # per page, from opening its tab to its screenshot
LAUNCH_TIMEOUT_S = 30.0        # for a chromium process to start and answer
# chromium processes at once: a kept one keeps two cores busy (on 2 cores, 40 reference pages: 0.28 s a page
# with one, 0.36 with two, 0.39 with three; 2026-11-27)
MAX_CONCURRENT_RENDERS = max(1, (os.cpu_count() or 2) // 2)
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
    "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND",  # no page may reach the network
]

_slots = threading.BoundedSemaphore(MAX_CONCURRENT_RENDERS)
_idle = queue.SimpleQueue()  # started browsers that no thread is using


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
    png = _screenshot(html, width, height, timeout, full_page)
    return Image.open(io.BytesIO(png)).convert("RGB") if png else failed_image()


def render_many(pages, width=WIDTH, height=HEIGHT, timeout=TIMEOUT_S, full_page=False):
    """Screenshots of several pages, in order, MAX_CONCURRENT_RENDERS at a time."""
    with concurrent.futures.ThreadPoolExecutor(MAX_CONCURRENT_RENDERS) as pool:
        return list(pool.map(lambda page: render(page, width, height, timeout, full_page), pages))


@functools.lru_cache(maxsize=256)  # the reference page is rendered again at every turn otherwise
def _screenshot(html, width, height, timeout, full_page):
    """The page's PNG bytes, or None when chromium fails or runs out of time. Read from $COLBENCH_SCREENSHOTS
    where an earlier process left them; a failure is not kept there (a timeout may pass on another try)."""
    folder = os.environ.get("COLBENCH_SCREENSHOTS")
    if not folder:
        return _shoot(html, width, height, timeout, full_page)
    key = hashlib.sha256(f"{width}x{height} {full_page}\n{html}".encode()).hexdigest()
    path = pathlib.Path(folder, key + ".png")
    if path.exists():
        return path.read_bytes()
    png = _shoot(html, width, height, timeout, full_page)
    if png:  # a whole file only: written aside, then renamed
        os.makedirs(folder, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")
        part.write_bytes(png)
        os.replace(part, path)
    return png


def _shoot(html, width, height, timeout, full_page):
    """_screenshot's PNG bytes from a started browser that no other thread is using, or a new one."""
    with _slots:
        try:
            browser = _idle.get_nowait()
        except queue.Empty:
            browser = Browser()
        png = browser.screenshot(html, width, height, timeout, full_page)
        if browser.alive():
            _idle.put(browser)
        return png


class Browser:
    """One headless chromium process and its DevTools pipes. `screenshot` opens a page in a tab of a fresh
    browser context, waits for its load event, measures it, shoots it and closes the context."""

    def __init__(self):
        binary = chromium_binary()  # ChromiumMissing before anything is made
        self.folder = tempfile.mkdtemp(prefix="colbench-render-")  # the profile and the page files
        self.pages, self.next_id, self.received, self.events = 0, 0, b"", []
        commands_read, commands_write = os.pipe()  # chromium reads commands on its fd 3 ...
        replies_read, replies_write = os.pipe()    # ... and writes replies and events on its fd 4
        command = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.folder}/profile",
                   f"--window-size={WIDTH},{HEIGHT}", "--remote-debugging-pipe", "about:blank"]
        # The shell moves the pipes from stdin and stdout to fds 3 and 4; a session of its own, so that a
        # kill takes chromium's whole process tree, not only its launcher.
        self.process = subprocess.Popen(["sh", "-c", 'exec "$@" 3<&0 4>&1 </dev/null >/dev/null', "sh", *command],
                                        stdin=commands_read, stdout=replies_write, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        os.close(commands_read)  # chromium's ends: its own now
        os.close(replies_write)
        self.commands, self.replies, self.closed = commands_write, replies_read, False
        atexit.register(self.close)
        try:
            self.send("Browser.getVersion", deadline=time.time() + LAUNCH_TIMEOUT_S)
        except (TimeoutError, OSError, RuntimeError):
            self.close()

    def alive(self):
        return not self.closed and self.process.poll() is None

    def close(self):
        """Kill chromium (its whole session), close the pipes and remove its folder; once."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)  # a browser killed by a hanging page leaves nothing for the exit
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        os.close(self.commands)
        os.close(self.replies)
        shutil.rmtree(self.folder, ignore_errors=True)

    def send(self, method, params=None, session=None, deadline=None):
        """One DevTools command: its result, once chromium answers it (RuntimeError: chromium's error)."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        number = self.next_id
        return self.receive(lambda m: m.get("id") == number, deadline)["result"]

    def event(self, method, session, deadline):
        """Wait for the event `method` of the tab of `session` (events that came earlier included)."""
        return self.receive(lambda m: m.get("method") == method and m.get("sessionId") == session, deadline)

    def receive(self, wanted, deadline):
        """The first message for which `wanted` is true, from those kept or those still to come; the events
        read on the way are kept. TimeoutError when none comes before `deadline`."""
        for message in self.events:
            if wanted(message):
                self.events.remove(message)
                return message
        while True:
            while b"\0" in self.received:
                raw, self.received = self.received.split(b"\0", 1)
                message = json.loads(raw)
                if wanted(message):
                    if "error" in message:
                        raise RuntimeError(f"chromium: {message['error']}")
                    return message
                if "method" in message:
                    self.events.append(message)
            left = deadline - time.time()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self.replies, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self.received += chunk

    def screenshot(self, html, width, height, timeout, full_page):
        """PNG bytes of the page in a width x height window (with `full_page`, all of a page taller than the
        window, laid out in the window: its 100vh stays the window's height), or None. A page that runs out of
        time kills this browser."""
        if not self.alive():
            return None
        deadline, self.events = time.time() + timeout, []
        self.pages += 1
        page = pathlib.Path(self.folder, f"page-{self.pages}.html")
        page.write_text(html, encoding="utf-8")
        try:
            context = self.send("Target.createBrowserContext", deadline=deadline)["browserContextId"]
            tab = self.send("Target.createTarget", {"url": "about:blank", "browserContextId": context},
                            deadline=deadline)["targetId"]
            session = self.send("Target.attachToTarget", {"targetId": tab, "flatten": True},
                                deadline=deadline)["sessionId"]
            window = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
            self.send("Emulation.setDeviceMetricsOverride", window, session, deadline)
            self.send("Page.enable", session=session, deadline=deadline)
            self.send("Page.navigate", {"url": page.as_uri()}, session, deadline)
            self.event("Page.loadEventFired", session, deadline)
            shot = {"format": "png"}
            if full_page:
                measured = self.send("Runtime.evaluate", {"expression": "document.documentElement.scrollHeight",
                                                          "returnByValue": True}, session, deadline)
                page_height = min(MAX_PAGE_HEIGHT, int(measured["result"].get("value") or 0))
                if page_height > height:  # taller than the window: all of it, laid out in the window
                    shot.update(captureBeyondViewport=True,
                                clip={"x": 0, "y": 0, "width": width, "height": page_height, "scale": 1})
            png = base64.b64decode(self.send("Page.captureScreenshot", shot, session, deadline)["data"])
            self.send("Target.disposeBrowserContext", {"browserContextId": context}, deadline=deadline)
            return png or None
        except (TimeoutError, OSError, RuntimeError, KeyError, ValueError):
            self.close()  # a page that hangs or crashed chromium: the next page starts another
            return None
        finally:
            page.unlink(missing_ok=True)
