"""One page in headless Chromium, driven over the DevTools protocol (websocket-client): the part the dashboard
scripts share. `open_page()` exits 77 when Chromium is missing; `fail` prints `FAILED: …` and exits 1; a
SIGTERM (a test that gives up) leaves through `close`, which stops Chromium too."""
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import websocket


def fail(message):
    print(f"FAILED: {message}", flush=True)
    sys.exit(1)


class Page:
    def __init__(self, browser):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        self.profile = tempfile.mkdtemp(prefix="skillbus-chromium-")
        self.process = subprocess.Popen(
            [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.socket = None
        self.next_id = 0

    def connect(self):
        found = threading.Event()
        endpoint = {}

        def read_stderr():
            # Keep reading so that Chromium never blocks on a full pipe.
            for line in self.process.stderr:
                match = re.search(r"DevTools listening on (ws://\S+)", line)
                if match:
                    endpoint["browser"] = match.group(1)
                    found.set()

        threading.Thread(target=read_stderr, daemon=True).start()
        if not found.wait(30):
            fail("Chromium did not open its DevTools endpoint within 30 s")
        port = re.match(r"ws://[^:/]+:(\d+)/", endpoint["browser"]).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            pages = [target for target in json.load(answer) if target.get("type") == "page"]
        if not pages:
            fail("Chromium has no page target")
        self.socket = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=10)

    def call(self, method, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    fail(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def evaluate_or_none(self, expression):
        """The expression's value, or None while there is no document to evaluate it in (a navigation under way)."""
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": "Runtime.evaluate",
                                     "params": {"expression": expression, "returnByValue": True}}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                return message.get("result", {}).get("result", {}).get("value")

    def wait_for(self, what, expression, seconds=30):
        """The expression's value once it is truthy; fails, showing the page's text, after `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        fail(f"{what} within {seconds} s; the page shows: {self.evaluate('document.body.innerText')!r}")

    def close(self):
        if self.socket is not None:
            self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def open_page():
    """A connected page, or exit 77 (the test skips) when there is no Chromium."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("SKIP: no chromium on PATH (apt-get install -y chromium)", flush=True)
        sys.exit(77)
    page = Page(browser)
    try:
        page.connect()
    except BaseException:
        page.close()
        raise
    return page
