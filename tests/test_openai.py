"""The OpenAI-compatible backend against a real server: llama_cpp.server serving the default model."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from sandshell import config
from sandshell.errors import ModelError
from sandshell.model.llama import default_model_path
from sandshell.model.openai import OpenAIBackend
from sandshell.model.turn import Model, Reply
from sandshell.resources import fixed_system_prompt


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w+b")  # noqa: SIM115 - a pipe would fill and stall it
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "4096", "--model_alias", "smollm2"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"llama_cpp.server exited: {log.read().decode()[-500:]}")
            try:
                if httpx.get(f"{base}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_streams_and_parses_with_a_constraint(server: str) -> None:
    settings = config.load(env_file=None, environ={}).replace(
        backend="openai", openai_base_url=server, openai_model="smollm2"
    )
    backend = OpenAIBackend(settings)
    model = Model(backend, settings)
    messages = [{"role": "system", "content": fixed_system_prompt()},
                {"role": "user", "content": "Begin. Goal: list the files in /app."}]  # fmt: skip
    chunks, reply = [], None
    for item in model.turn(messages, {"max_tokens": 200, "temperature": 0.3, "seed": 1}):
        if isinstance(item, Reply):
            reply = item
        else:
            chunks.append(item)
    assert reply is not None and len(chunks) > 3  # streamed, not one blob
    assert backend.constrained  # the server accepted a grammar or a schema
    assert reply.error is None or "cut off" in reply.error
    assert reply.actions or reply.stats.cut


def test_unreachable_server_is_one_sentence() -> None:
    settings = config.load(env_file=None, environ={}).replace(openai_base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ModelError, match=r"cannot reach the model server at http://127\.0\.0\.1:9/v1"):
        list(OpenAIBackend(settings).stream([{"role": "user", "content": "hi"}], {}))
