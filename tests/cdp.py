"""A minimal Chrome DevTools Protocol driver for headless Chromium (tests only).

Chromium's command line can screenshot a URL but cannot log in; this drives one tab over CDP so a test
can set Airflow's login cookie, open a page of the real UI, wait for it, read its text (frames
included) and keep a screenshot.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

from eo_testing import free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Browser:
    """``with Browser() as b: b.cookie(...); b.open(url); b.text(); b.screenshot(path)``."""

    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="eo-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", f"--window-size={width},{height}",
             f"--user-data-dir={self.profile}", f"--remote-debugging-port={self.port}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ws: Any = None
        self.seq = 0

    def __enter__(self) -> "Browser":
        from websockets.sync.client import connect

        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=2) as r:
                    tabs = [t for t in json.load(r) if t.get("type") == "page"]
                if tabs:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.2)
        self.ws = connect(tabs[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        self.call("Page.enable")
        self.call("Network.enable")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.ws is not None:
            self.ws.close()
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.seq += 1
        self.ws.send(json.dumps({"id": self.seq, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.seq:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def cookie(self, url: str, name: str, value: str) -> None:
        self.call("Network.setCookie", url=url, name=name, value=value, httpOnly=True)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page; None while the page navigates away."""
        try:
            return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")
        except RuntimeError as exc:   # a click that navigated: the next poll sees the new page
            if "navigated or closed" in str(exc) or "context was destroyed" in str(exc):
                return None
            raise

    def text(self) -> str:
        """The visible text of the page and of its same-origin frames (the plugin page is an iframe)."""
        js = ("(() => { const t = [document.body ? document.body.innerText : ''];"
              " for (const f of document.querySelectorAll('iframe')) {"
              "  try { t.push(f.contentDocument.body.innerText) } catch (e) {} }"
              " return t.join('\\n'); })()")
        return self.evaluate(js) or ""

    def fill(self, selector: str, text: str) -> None:
        """Type ``text`` into the input ``selector`` as a user would (React forms see real input events)."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def wait_for_text(self, needle: str, timeout: float = 60) -> str:
        """Poll the page's text until ``needle`` shows (the UI renders asynchronously)."""
        deadline = time.time() + timeout
        text = ""
        while time.time() < deadline:
            text = self.text()
            if needle in text:
                return text
            time.sleep(0.3)
        raise AssertionError(f"{needle!r} never showed; page text:\n{text[:3000]}")

    def screenshot(self, path: str | os.PathLike[str]) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
