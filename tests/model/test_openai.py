"""The OpenAI-compatible backend against a real server: llama_cpp.server serving the default model."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sandshell import config
from sandshell.errors import ModelError
from sandshell.model.llama import default_model_path
from sandshell.model.openai import OpenAIBackend
from sandshell.model.turn import Model, Reply
from sandshell.resources import fixed_system_prompt
from sandshell.runner import run_task
from sandshell.session.control import Control
from tests.net import free_port, wait_until_answers

pytestmark = [pytest.mark.model, pytest.mark.network]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w+b")  # noqa: SIM115 - a pipe would fill and stall it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(default_model_path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--model_alias",
            "smollm2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:

        def said() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        wait_until_answers(f"{base}/models", proc, said, 90)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_streams_and_parses_with_a_constraint(server: str) -> None:
    settings = config.load(env_file=None, environ={})
    settings = settings.replace(
        model=settings.model.replace(backend="openai", openai_base_url=server, openai_model="smollm2")
    )
    backend = OpenAIBackend(settings.model)
    model = Model(backend, settings.model)
    messages = [
        {"role": "system", "content": fixed_system_prompt()},
        {"role": "user", "content": "Begin. Goal: list the files in /app."},
    ]
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
    settings = config.load(env_file=None, environ={})
    settings = settings.replace(model=settings.model.replace(openai_base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(ModelError, match=r"cannot reach the model server at http://127\.0\.0\.1:9/v1"):
        list(OpenAIBackend(settings.model).stream([{"role": "user", "content": "hi"}], {}))


@pytest.mark.docker
def test_an_overflow_is_told_with_its_numbers_and_the_history_shrinks_to_fit(server: str, tmp_path: Path) -> None:
    """The server holds 4,096 tokens; the settings claim 16,384; a command of the user's fills the history."""
    ws = tmp_path / "ws"
    ws.mkdir()
    s = config.load(env_file=None, environ={})
    s = s.replace(
        model=s.model.replace(
            backend="openai", openai_base_url=server, openai_model="smollm2", n_ctx=16384, max_tokens=128, intro=False
        ),
        sandbox=s.sandbox.replace(workspace=str(ws)),
        session=s.session.replace(sessions_dir=str(tmp_path / "sessions")),
    )
    backend = OpenAIBackend(s.model)
    assert backend.n_ctx == 16384 and "the server did not say" in backend.description  # llama_cpp.server has no /props
    control = Control()
    control.take_over("seq 100000 104000")  # ~11,000 characters of output in the history before turn 1
    out = run_task("Print the kernel version.", 120, 1, settings=s, backend=backend, control=control)
    assert out["status"] != "error", out["error"]
    told = [line for line in out["log"] if "overflows the model server's context" in line]
    assert told, "\n".join(out["log"])[-3000:]
    assert "of 4,096 tokens" in told[0] and "the history shrinks to fit 4,096 tokens" in told[0], told


class _Props(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"default_generation_settings": {"n_ctx": 12288}}).encode()
        self.send_response(200 if self.path == "/props" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_context_size_is_asked_of_a_llama_server() -> None:
    """llama-server tells its n_ctx at /props (a stand-in serving only that, on 127.0.0.1)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Props)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        s = config.load(env_file=None, environ={})
        s = s.replace(model=s.model.replace(openai_base_url=f"http://127.0.0.1:{httpd.server_port}/v1"))
        backend = OpenAIBackend(s.model)
        assert backend.n_ctx == 12288 and "from the server" in backend.description
    finally:
        httpd.shutdown()


@pytest.mark.docker
def test_a_cwd_that_is_not_utf8_reaches_the_model_server_as_an_escape(server: str, tmp_path: Path) -> None:
    """One `cd $'/tmp/\\xff'` puts a lone surrogate (the byte, escaped) into the next prompt: unescaped,
    the request's body cannot be encoded, and the session ends "failed unexpectedly"."""
    ws = tmp_path / "ws"
    ws.mkdir()
    s = config.load(env_file=None, environ={})
    s = s.replace(
        model=s.model.replace(
            backend="openai", openai_base_url=server, openai_model="smollm2", max_tokens=32, intro=False
        ),
        sandbox=s.sandbox.replace(workspace=str(ws)),
        session=s.session.replace(sessions_dir=str(tmp_path / "sessions")),
    )
    control = Control()
    control.take_over("mkdir -p $'/tmp/\\xff' && cd $'/tmp/\\xff' && pwd")
    out = run_task("Say where you are.", 120, 1, settings=s, control=control)
    assert out["status"] != "error" and out["turns"] >= 1, out["error"]
    assert any("/tmp/\\xff" in line for line in out["log"]), out["log"][-10:]
