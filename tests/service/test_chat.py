"""The chat's event stream and the profiles offered to API clients, against a live server (script backend)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service_util import TOKEN, Server, containers, parse_sse

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]
ROOT_FS = "touch /usr/local/x 2>/dev/null && echo writable || echo read-only"  # standard: yes; locked: no


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("chat"))  # SANDSHELL_PROFILE=locked, SANDSHELL_API_PROFILES by default
    try:
        yield s
    finally:
        s.stop()


def _follow(server: Server, path: str, last_id: int, into: list[tuple[float, int, str, dict[str, Any]]]) -> None:
    """Read the stream to its end, noting when each event arrived."""
    http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    with http, http.stream("GET", path, headers={"Last-Event-ID": str(last_id)}) as r:
        assert r.status_code == 200
        for seq, kind, data in parse_sse(r.iter_lines()):
            into.append((time.monotonic(), seq, kind, data))


def test_a_chat_streams_its_events_live_and_a_cut_stream_resumes_with_last_event_id(server: Server) -> None:
    script = [{"bash": "echo first"}, {"comment": "count", "bash": "echo one; sleep 3; echo two"}]
    r = server.http.post("/v1/chat", json={"message": "start", "script": script})
    assert r.status_code == 200, r.text
    cid = r.json()["conversation_id"]
    path = f"/v1/chat/{cid}/events"
    cut = server.sse(path, limit=3)  # the stream is cut while the conversation is open
    assert [seq for seq, _, _ in cut] == [1, 2, 3] and cut[0][1] == "SessionStarted"
    rest: list[tuple[float, int, str, dict[str, Any]]] = []
    reader = threading.Thread(target=_follow, args=(server, path, cut[-1][0], rest), daemon=True)
    reader.start()
    deadline = time.monotonic() + 30
    while not any(k == "OutputChunk" and "first" in d["data"] for _, _, k, d in rest):  # the first turn, replayed
        assert time.monotonic() < deadline, rest
        time.sleep(0.05)
    asked = time.monotonic()
    second = server.http.post("/v1/chat", json={"message": "count", "conversation_id": cid})
    answered = time.monotonic()
    assert second.status_code == 200 and second.json()["observation"] == "one\ntwo\n", second.text
    one = next(t for t, _, k, d in rest if k == "OutputChunk" and "one" in d["data"])
    assert asked < one < answered - 2, "the turn's output came on the stream while the turn ran"
    assert reader.is_alive(), "an open conversation's stream stays open between turns"
    assert server.http.delete(f"/v1/chat/{cid}").status_code == 200
    reader.join(30)
    assert not reader.is_alive(), "the stream ends with the conversation"
    whole = [*cut, *((seq, kind, data) for _, seq, kind, data in rest)]
    assert [seq for seq, _, _ in whole] == list(range(1, len(whole) + 1))
    assert whole[-1][1] == "SessionEnded" and whole[-1][2]["status"] == "quit"
    assert {"StateRead", "TurnStarted", "ModelReplied", "ActionStarted", "ActionFinished"} <= {k for _, k, _ in whole}
    recorded = (server.home / "sessions" / cid / "events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in recorded] == [d for _, _, d in whole]
    assert server.sse(path, last_id=len(whole) - 2) == whole[-2:]  # an ended conversation: its recording


def test_chat_streams_are_404_for_unknown_conversations_and_tasks(server: Server) -> None:
    assert server.http.get("/v1/chat/20260101-000000-abcd/events").status_code == 404
    task = server.task("a task", [{"done": "ok"}])
    server.wait(task)
    r = server.http.get(f"/v1/chat/{task}/events")
    assert r.status_code == 404 and "POST /v1/chat" in r.json()["detail"]
    assert "/v1/chat/{conversation_id}/events" in server.http.get("/openapi.json").json()["paths"]


def test_a_profile_the_server_does_not_offer_is_refused_with_the_setting_that_allows_it(server: Server) -> None:
    before = server.http.get("/v1/tasks").json()["total"]
    r = server.http.post("/v1/tasks", json={"goal": "g", "profile": "standard", "script": [{"done": "x"}]})
    assert r.status_code == 403 and "SANDSHELL_API_PROFILES" in r.json()["detail"], r.text
    assert r.json()["detail"].count(". ") == 0
    r = server.http.post("/v1/chat", json={"message": "hi", "profile": "standard", "script": [{"bash": "id -u"}]})
    assert r.status_code == 403 and "SANDSHELL_API_PROFILES" in r.json()["detail"], r.text
    assert server.http.get("/v1/tasks").json()["total"] == before  # nothing was queued
    task = server.task("no profile named", [{"done": "ok"}])
    started = server.events(task)[0][2]
    assert started["profile"] == "locked" and server.get(task)["status"] == "done"
    assert server.http.get("/v1/health").json()["profiles"] == ["locked"]


def test_an_operator_may_offer_the_standard_profile(tmp_path: Path) -> None:
    server = Server(tmp_path, SANDSHELL_API_PROFILES="locked,standard", SANDSHELL_PROFILE="standard")
    try:
        task = server.task("as root", [{"bash": ROOT_FS}, {"done": "ok"}], profile="standard")
        events = server.events(task)
        assert events[0][2]["profile"] == "standard"
        assert "writable\n" in [d["data"] for _, k, d in events if k == "OutputChunk"]
        plain = server.task("no profile named", [{"done": "ok"}])
        assert server.events(plain)[0][2]["profile"] == "standard"  # SANDSHELL_PROFILE, as it is offered
        r = server.http.post("/v1/chat", json={"message": "hi", "profile": "locked", "script": [{"bash": ROOT_FS}]})
        assert r.status_code == 200 and r.json()["observation"] == "read-only\n", r.text
        cid = r.json()["conversation_id"]
        assert server.sse(f"/v1/chat/{cid}/events", limit=1)[0][2]["profile"] == "locked"
        again = server.http.post("/v1/chat", json={"message": "now", "conversation_id": cid, "profile": "standard"})
        assert again.status_code == 422 and "locked profile" in again.json()["detail"], again.text
        assert server.http.delete(f"/v1/chat/{cid}").status_code == 200
        assert not containers(cid)
    finally:
        server.stop()
