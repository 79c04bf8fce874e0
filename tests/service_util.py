"""A live `sandshell serve` in a subprocess on a free port of 127.0.0.1, and helpers to talk to it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx

from sandshell.sandbox import engine
from tests.net import free_port, wait_until_answers

TOKEN = "test-token-0123456789"
ENDED = ("done", "max_steps", "timeout", "stuck", "quit", "error", "cancelled", "interrupted")


class Server:
    """`python -m sandshell.cli serve` with SANDSHELL_HOME=`home`; the script backend unless told."""

    def __init__(self, home: Path, token: str | None = TOKEN, port: int | None = None, **env: str) -> None:
        self.home = home
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / f"server-{self.port}.log"
        home.mkdir(parents=True, exist_ok=True)
        full = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "SANDSHELL_"))}
        full.update(
            {
                "SANDSHELL_HOME": str(home),
                "LLAMA_BACKEND": "script",
                "LLAMA_EXIT_TIMEOUT": "60",
                "SANDSHELL_PROFILE": "locked",
                **env,
            }
        )  # locked: needs no network on the engine
        if token is not None:
            full["SANDSHELL_API_TOKEN"] = token
        self.env = full
        self.log = open(self.log_path, "w+b")  # noqa: SIM115 - a pipe would fill and stall it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sandshell.cli", "serve", "--port", str(self.port)],
            cwd=home,
            env=full,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=30.0
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 120.0) -> None:
        wait_until_answers(f"{self.url}/v1/health", self.proc, self.output, timeout)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def task(self, goal: str = "a test", script: list[Any] | None = None, **fields: Any) -> str:
        body = {"goal": goal, **fields}
        if script is not None:
            body["script"] = script
        r = self.http.post("/v1/tasks", json=body)
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def get(self, task_id: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/tasks/{task_id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def wait(self, task_id: str, statuses: tuple[str, ...] = ENDED, timeout: float = 90.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.get(task_id)
            if t["status"] in statuses:
                return t
            time.sleep(0.1)
        raise AssertionError(f"task {task_id} still {t['status']} after {timeout}s")

    def events(self, task_id: str, last_id: int | None = None, limit: int | None = None, **params: str) -> list[Any]:
        """(id, type, data) of each event of a task's stream, until it ends or `limit` events came."""
        return self.sse(f"/v1/tasks/{task_id}/events", last_id, limit, **params)

    def sse(self, path: str, last_id: int | None = None, limit: int | None = None, **params: str) -> list[Any]:
        """(id, type, data) of each event of the stream at `path`, until it ends or `limit` events came."""
        headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
        out: list[tuple[int, str, dict[str, Any]]] = []
        with self.http.stream("GET", path, headers=headers, params=params) as r:
            assert r.status_code == 200, r.read()
            for seq, kind, data in parse_sse(r.iter_lines()):
                out.append((seq, kind, data))
                if limit is not None and len(out) >= limit:
                    break
        return out

    def kill(self) -> None:
        """As a crash: SIGKILL, nothing cleaned up."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.close()

    def close(self) -> None:
        self.http.close()
        self.log.close()


def parse_sse(lines: Iterator[str]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    seq, kind, data = 0, "message", ""
    for line in lines:
        if line == "":
            if data:
                yield seq, kind, json.loads(data)
            seq, kind, data = 0, "message", ""
        elif line.startswith("id:"):
            seq = int(line[3:].strip())
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()


def containers(session_id: str) -> list[dict[str, Any]]:
    c = docker.from_env()
    return list(c.api.containers(all=True, filters={"label": f"{engine.LABEL}={session_id}"}))
