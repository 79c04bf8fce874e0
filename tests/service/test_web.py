"""The web view in a real browser: headless Chromium loads a running task's page from a live server.

Chromium's --dump-dom waits (with a virtual time budget) until the page's network is quiet, so
it opens the task's event stream while the task runs and dumps the DOM when the stream ends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.service_util import TOKEN, Server

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.browser, pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(profile: Path, url: str, *args: str) -> str:
    """Chromium's output for `url`; each profile folder is a browser of its own (its own cookies)."""
    assert CHROMIUM, "chromium is not installed; ./scripts/setup.sh installs it"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--virtual-time-budget=3000",
        f"--user-data-dir={profile}",
        "--window-size=1400,900",
        *args,
        url,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": "/tmp"})
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed")
def test_a_running_tasks_page_shows_its_output_state_and_result(tmp_path: Path) -> None:
    server = Server(tmp_path / "home")
    try:
        script = [
            {"comment": "ask the kernel", "bash": "uname -s; printf 'esc:\\033[31m<b>bold</b>\\n'"},
            {"write": "/app/system.md", "content": "# notes\nthe kernel is Linux\n"},
            {"bash": "echo waiting; sleep 4; echo woke"},
            {"done": "the kernel is Linux"},
        ]
        task = server.task("Find the kernel", script)
        deadline = time.monotonic() + 60
        while "waiting" not in "\n".join(server.get(task)["log"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.get(task)["status"] == "running"  # the page is opened on a running task
        dom = chromium(tmp_path / "signed-in", f"{server.url}/tasks/{task}?token={TOKEN}", "--dump-dom")
        term = re.search(r'<pre id="term">(.*?)</pre>', dom, re.S)
        assert term, dom[-2000:]
        text = term.group(1)
        assert "uname -s" in text and "Linux" in text and "woke" in text
        assert "esc:^[[31m&lt;b&gt;bold&lt;/b&gt;" in text  # inert, and text, never markup
        assert "<b>" not in dom
        assert re.search(r'id="system-text">#\s*notes\s+the kernel is Linux', dom)
        assert 'class="status s-done">done' in dom and "the kernel is Linux</pre>" in dom
        listing = chromium(tmp_path / "signed-in", f"{server.url}/", "--dump-dom")  # the cookie was kept
        assert f'href="/tasks/{task}">{task}</a>' in listing and "Find the kernel" in listing
        assert "not signed in" not in listing.lower()
        fresh = chromium(tmp_path / "fresh", f"{server.url}/", "--dump-dom")
        assert "not signed in" in fresh.lower()  # a browser without the cookie: told how to sign in
    finally:
        server.stop()
