"""Headless Chromium driven over the DevTools protocol on a pipe (fds 3 and 4): no extra package.

Each `Browser` is a browser of its own (its own profile folder, so its own cookies). `open` loads a
page in a tab; `Tab.js` evaluates an expression there and `Tab.wait` polls one until it is true.
With `offline=True` every name but 127.0.0.1 fails to resolve, as on a machine with no network.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.net import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _as_3_and_4(read: int, write: int) -> None:
    """In the child: the pipe's ends as fds 3 and 4, inheritable (copied away first: either may be 3 or 4)."""
    read, write = os.dup(read), os.dup(write)
    os.dup2(read, 3)
    os.dup2(write, 4)


class Browser:
    def __init__(self, profile: Path, offline: bool = False) -> None:
        assert CHROMIUM, "chromium is not installed; ./test.sh installs it"
        profile.mkdir(parents=True, exist_ok=True)
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "--window-size=1400,900",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
        ]
        if offline:
            args.append("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None if os.environ.get("BROWSER_DEBUG") else subprocess.DEVNULL,
            close_fds=False,  # the two dups below are inheritable; every other fd Python opened is not
            env={**os.environ, "HOME": str(profile)},
            preexec_fn=lambda: _as_3_and_4(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._lock = threading.Lock()
        self._answers: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._arrived:
                    self._arrived.notify_all()
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            with self._arrived:
                for raw in messages:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                self._arrived.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        with self._lock:
            self._next += 1
            n = self._next
        msg: dict[str, Any] = {"id": n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 60
        with self._arrived:
            while n not in self._answers:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError(f"chromium did not answer {method}")
                self._arrived.wait(1.0)
            answer = self._answers.pop(n)
        if "error" in answer:
            raise AssertionError(f"{method}: {answer['error']}")
        return dict(answer.get("result", {}))

    def open(self, url: str) -> Tab:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self, session)
        tab.send("Page.enable")
        tab.send("Runtime.enable")
        tab.go(url)
        return tab

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Tab:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def go(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait("document.readyState === 'complete' && location.href !== 'about:blank'")

    def js(self, expression: str) -> Any:
        """The value of `expression` in the page (a promise is awaited)."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise AssertionError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        value: Any = None
        while time.monotonic() < deadline:
            try:
                value = self.js(expression)
            except AssertionError:
                value = None  # the page is between two documents
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"still false after {timeout:.0f} s: {expression} (page: {self.text()[-1500:]!r})")

    def text(self) -> str:
        try:
            return str(self.js("document.body ? document.body.innerText : ''"))
        except AssertionError:
            return ""


class OtherSite:
    """A plain web server on another port of 127.0.0.1 (another site on the same host): it serves
    `html` at every path and records the Cookie header of every request it gets."""

    def __init__(self, html: str = "<p>another site</p>") -> None:
        self.cookies: list[str] = []
        self.html = html
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.cookies.append(self.headers.get("Cookie") or "")
                body = site.html.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> OtherSite:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
