"""The service with the real small GGUF model: one loaded model shared by two tasks at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.service_util import ENDED, Server

pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_two_tasks_share_one_model_one_generation_at_a_time(tmp_path: Path) -> None:
    server = Server(tmp_path, LLAMA_BACKEND="llama", LLAMA_MAX_TOKENS="96", LLAMA_SEED="7",
                    SANDSHELL_MAX_SESSIONS="2")  # fmt: skip
    try:
        assert "SmolLM2" in server.http.get("/v1/health").json()["backend"]
        tasks = [server.task(goal, max_steps=3, timeout=150) for goal in ("Print the date", "Count files in /etc")]
        most, deadline = 0, time.monotonic() + 240
        while time.monotonic() < deadline:
            health = server.http.get("/v1/health").json()
            most = max(most, health["generations"]["generating"])
            if all(server.get(t)["status"] in ENDED for t in tasks):
                break
            time.sleep(0.05)
        results = [server.get(t) for t in tasks]
        for r in results:
            assert r["status"] in ("done", "max_steps", "stuck", "timeout"), r
            assert r["turns"] >= 1 and r["tokens_out"] > 0 and r["tokens_in"] > 0, r
        assert most == 1  # the model was busy, but never with two at once
        texts = [[d["text"] for _, k, d in server.events(t) if k == "ModelText"] for t in tasks]
        assert all(texts), "each task streamed the model's tokens"
    finally:
        server.stop()
