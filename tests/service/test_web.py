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

import httpx
import pytest

from tests.browser import Browser, OtherSite, Tab
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


# -- the sign-in and the page, in a browser driven over the DevTools protocol -----------------------


def signed_in(browser: Browser, server: Server, path: str = "/") -> Tab:
    tab = browser.open(f"{server.url}{path}?token={TOKEN}")
    tab.wait("document.getElementById('health').textContent.includes('running')")
    return tab


def test_another_server_on_the_host_never_sees_the_token_and_two_servers_keep_their_sign_ins(tmp_path: Path) -> None:
    first, second = Server(tmp_path / "one"), Server(tmp_path / "two")
    try:
        with Browser(tmp_path / "browser") as browser, OtherSite() as other:
            signed_in(browser, first)
            signed_in(browser, second)  # (a cookie of the same name would sign the first out)
            browser.open(other.url + "/")
            assert other.cookies, "the other site was visited"
            sent = " ".join(other.cookies)
            assert TOKEN not in sent, f"the API token reached another server on the host: {sent}"
            page = browser.open(f"{first.url}/")
            page.wait("document.getElementById('health').textContent.includes('running')")
            assert "not signed in" not in page.text().lower()
            # what the browser holds is a sign-in the server can revoke, not the token
            cookies = browser.send("Storage.getCookies")["cookies"]
            ours = [c for c in cookies if c["name"].startswith("sandshell-")]
            assert len(ours) == 2 and all(c["httpOnly"] and c["value"] != TOKEN for c in ours)
            assert len({c["name"] for c in ours}) == 2
            page.js("fetch('/signout', {method: 'POST'}).then(() => true)")
            page.go(f"{first.url}/")
            page.wait("document.getElementById('health').textContent === 'not signed in'")
            name = next(c["name"] for c in ours if str(first.port) in c["name"])
            value = next(c["value"] for c in ours if c["name"] == name)
            kept = httpx.get(f"{first.url}/v1/tasks", cookies={name: value})
            assert kept.status_code == 401 and "revoked" in kept.json()["detail"]  # signed out: the value is dead
    finally:
        first.stop()
        second.stop()


def test_a_page_on_another_port_cannot_cancel_a_task_through_the_sign_in(tmp_path: Path) -> None:
    server = Server(tmp_path / "home")
    try:
        task = server.task("long", [{"bash": "sleep 60"}, {"done": "never"}])
        server.wait(task, ("running",))
        forged = f"""<form id=f method=post action="{server.url}/v1/tasks/{task}/cancel"></form>
            <script>
              fetch("{server.url}/v1/tasks/{task}/cancel", {{method: "POST", credentials: "include", mode: "no-cors"}})
                .finally(() => document.getElementById("f").submit());
            </script>"""
        with Browser(tmp_path / "browser") as browser, OtherSite(forged) as other:
            page = signed_in(browser, server, f"/tasks/{task}")
            attack = browser.open(other.url + "/")
            attack.wait("location.href.includes('/cancel')")  # the form went: the server has answered it
            time.sleep(1.0)
            assert server.get(task)["status"] == "running", "a page of another site cancelled the task"
            page.js("document.getElementById('cancel').click(), true")  # the server's own page still can
            page.wait("document.getElementById('task-status').textContent === 'cancelled'", 60)
        assert server.wait(task)["status"] == "cancelled"
    finally:
        server.stop()


def test_the_docs_render_with_no_network(tmp_path: Path) -> None:
    server = Server(tmp_path / "home")
    try:
        with Browser(tmp_path / "browser", offline=True) as browser:
            docs = browser.open(f"{server.url}/docs")
            docs.wait("document.querySelectorAll('.opblock').length >= 8", 60)
            said = docs.text()
            for path in ("/v1/tasks", "/v1/tasks/{task_id}/cancel", "/v1/chat", "/v1/health"):
                assert path in said
            assert docs.js("!!document.querySelector('.btn.authorize')")  # the bearer scheme: an Authorize button
    finally:
        server.stop()


def test_the_header_says_signed_out_refreshes_its_counts_and_goals_are_shown_safely(tmp_path: Path) -> None:
    server = Server(tmp_path / "home")
    try:
        with Browser(tmp_path / "browser") as browser:
            fresh = browser.open(f"{server.url}/")
            fresh.wait("document.getElementById('health').textContent === 'not signed in'")
            assert "undefined" not in fresh.text()
            page = signed_in(browser, server)
            page.wait("document.getElementById('health').textContent.includes('0 running')")
            goal = "drawkcab\u202e evil \x1b[31m" + "x" * 3000
            task = server.task(goal, [{"bash": "sleep 30"}, {"done": "never"}])
            server.wait(task, ("running",))
            page.wait("document.getElementById('health').textContent.includes('1 running')", 15)  # no reload
            page.wait(f"document.body.innerText.includes({task!r})", 10)
            listed = page.js("document.querySelector('#tasks td.goal').textContent")
            assert "\u202e" not in listed and "\\u202e" in listed and "^[[31m" in listed
            assert page.js("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
            own = browser.open(f"{server.url}/tasks/{task}")
            own.wait("document.getElementById('task-goal').textContent.length > 0")
            header = own.js("document.getElementById('task-goal').textContent")
            assert "\u202e" not in header and "\\u202e" in header and "\x1b" not in header
            assert own.js("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
            server.http.post(f"/v1/tasks/{task}/cancel")
    finally:
        server.stop()


def test_the_page_shows_live_numbers_and_what_the_session_is_doing(tmp_path: Path) -> None:
    server = Server(tmp_path / "home")
    try:
        task = server.task("wait", [{"bash": "echo started; sleep 8; echo over"}, {"done": "waited"}])
        with Browser(tmp_path / "browser") as browser:
            page = signed_in(browser, server, f"/tasks/{task}")
            page.wait("document.getElementById('phase').textContent.startsWith('running echo started')", 30)
            page.wait("/running echo started.* · [1-9]s/.test(document.getElementById('phase').textContent)", 10)
            page.wait("document.getElementById('task-numbers').textContent.startsWith('1 turn ·')", 10)
            page.wait("document.getElementById('task-status').textContent === 'done'", 60)
            assert page.js("document.getElementById('phase').textContent") == ""
    finally:
        server.stop()


def test_the_page_keeps_following_a_task_across_a_server_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    server = Server(home, SANDSHELL_MAX_SESSIONS="1")
    port = server.port
    try:
        first = server.task("first", [{"bash": "sleep 60"}, {"done": "never"}])
        server.wait(first, ("running",))
        second = server.task("second", [{"bash": "echo after the restart"}, {"done": "followed"}])
        with Browser(tmp_path / "browser") as browser:
            page = signed_in(browser, server, f"/tasks/{second}")
            page.wait("document.getElementById('task-status').textContent.startsWith('queued')")
            server.stop()  # the first is interrupted; the second waits on disk
            page.wait("document.getElementById('connection').textContent.includes('reconnecting')", 30)
            server = Server(home, port=port, SANDSHELL_MAX_SESSIONS="1")
            page.wait("document.getElementById('term').textContent.includes('after the restart')", 90)
            page.wait("document.getElementById('task-status').textContent === 'done'", 30)
            assert page.js("document.getElementById('connection').textContent") == ""
            assert "followed" in page.js("document.getElementById('result').textContent")
    finally:
        server.stop()
