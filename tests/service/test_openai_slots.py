"""The service against an OpenAI-compatible server with two slots (a small server of our own on
127.0.0.1, speaking llama-server's /health, /props and streamed chat completions)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.service_util import ENDED, Server

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]


class Fake:
    def __init__(self) -> None:
        self.health_calls = 0
        self.inside = 0
        self.most_inside = 0
        self.slots: dict[str, set[Any]] = defaultdict(set)
        self.cache_prompt: set[Any] = set()
        self.lock = threading.Lock()


def handler(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _json(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                fake.health_calls += 1
                self._json(503 if fake.health_calls <= 2 else 200, {"status": "loading model"})
            elif self.path == "/props":
                self._json(200, {"total_slots": 2, "default_generation_settings": {"n_ctx": 4096}})
            else:
                self._json(404, {})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            goal = re.search(r"Your goal: (\S+)", body["messages"][0]["content"])
            with fake.lock:
                fake.slots[goal.group(1) if goal else "?"].add(body.get("id_slot"))
                fake.cache_prompt.add(body.get("cache_prompt"))
                fake.inside += 1
                fake.most_inside = max(fake.most_inside, fake.inside)
            time.sleep(0.4)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in ['[{"bash": ', '"echo hi"}]']:
                chunk = {"choices": [{"delta": {"content": piece}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            with fake.lock:
                fake.inside -= 1

    return Handler


@pytest.fixture
def fake_server() -> Iterator[tuple[Fake, str]]:
    fake = Fake()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler(fake))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_sessions_keep_their_slot_and_generate_two_at_a_time(tmp_path: Path, fake_server: tuple[Fake, str]) -> None:
    fake, url = fake_server
    server = Server(tmp_path, LLAMA_BACKEND="openai", LLAMA_OPENAI_BASE_URL=url, SANDSHELL_MAX_SESSIONS="3")
    try:
        assert "waiting for the model server" in server.output() and fake.health_calls >= 3
        goals = ["alpha", "beta", "gamma"]
        tasks = [server.task(g, max_steps=3, timeout=60) for g in goals]
        for t in tasks:
            assert server.wait(t)["status"] in ENDED
        assert all(server.get(t)["status"] == "max_steps" for t in tasks)
        assert fake.most_inside == 2  # three sessions, two slots: two generations at once, never three
        assert all(len(fake.slots[g]) == 1 for g in goals), dict(fake.slots)  # each kept its slot
        assert set().union(*(fake.slots[g] for g in goals)) == {0, 1} and fake.cache_prompt == {True}
    finally:
        server.stop()
