"""The HTTP API against a live server (uvicorn in a subprocess on 127.0.0.1) with the script backend."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service_util import TOKEN, Server, containers

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("service"), SANDSHELL_MAX_SESSIONS="2", SANDSHELL_API_BODY_LIMIT="8KiB")
    try:
        yield s
    finally:
        s.stop()


def test_without_the_token_every_route_but_health_is_401(server: Server) -> None:
    bare = httpx.Client(base_url=server.url)
    signed = httpx.get(f"{server.url}/?token={TOKEN}")
    ((name, value),) = [(k, v) for k, v in signed.cookies.items() if v]
    bad_cookie = httpx.Client(base_url=server.url, cookies={name: "nope"})
    assert bare.get("/v1/health").json() == {"status": "ok"}  # nothing about the model or the tasks
    routes = [
        ("GET", "/v1/tasks"),
        ("POST", "/v1/tasks"),
        ("GET", "/v1/tasks/x/events"),
        ("GET", "/v1/chat/x/events"),
        ("POST", "/v1/chat"),
        ("POST", "/v1/tasks/x/cancel"),
    ]
    for method, path in routes:
        assert bare.request(method, path).status_code == 401, path
        wrong = {"Authorization": "Bearer " + TOKEN[:-1] + "x"}
        assert bare.request(method, path, headers=wrong).status_code == 401, path
        assert bad_cookie.request(method, path).status_code == 401, path
    said = {  # what each refusal tells: nothing given, the wrong kind of header, the wrong token
        "a bearer token is needed (Authorization: Bearer <token>)": {},
        "the Authorization header is not a bearer token: send 'Authorization: Bearer <token>'": {
            "Authorization": TOKEN
        },
        "the token is wrong: it is not this server's": {"Authorization": "Bearer nope"},
    }
    for detail, headers in said.items():
        assert bare.get("/v1/tasks", headers=headers).json() == {"detail": detail}
    empty = {"Authorization": "Bearer"}  # ("Bearer " with its space taken off on the way: no token, not another kind)
    assert bare.get("/v1/tasks", headers=empty).json()["detail"].startswith("a bearer token is")
    ended = "the sign-in has ended or was revoked: sign in again with /?token=<token>"
    assert bad_cookie.get("/v1/tasks").json() == {"detail": ended}
    garbled = bare.post("/v1/tasks", content=b'{"goal": "x" "max_steps": 2}', headers=_auth())
    assert garbled.status_code == 422
    why = "the request body is not valid JSON (at character 13: Expecting ',' delimiter); see /docs"
    assert garbled.json() == {"detail": why}
    assert httpx.get(f"{server.url}/v1/tasks", cookies={name: value}).status_code == 200
    assert httpx.get(f"{server.url}/v1/tasks", cookies={name: TOKEN}).status_code == 401  # the token is no sign-in


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def test_a_task_runs_its_events_stream_and_a_resumed_stream_gets_exactly_the_rest(server: Server) -> None:
    task = server.task("say hello", [{"bash": "echo hello; echo oops >&2"}, {"done": "said hello"}])
    events = server.events(task)  # follows the live task to its end
    ids = [seq for seq, _, _ in events]
    assert ids == list(range(1, len(ids) + 1))
    kinds = [kind for _, kind, _ in events]
    assert kinds[0] == "SessionStarted" and kinds[-1] == "SessionEnded"
    out = "".join(d["data"] for _, k, d in events if k == "OutputChunk")
    assert "hello" in out and "oops" in out
    assert events[-1][2]["status"] == "done" and events[-1][2]["result"] == "said hello"
    t = server.get(task)
    assert (t["status"], t["result"], t["queue_position"]) == ("done", "said hello", None)
    assert t["turns"] == 2 and t["tokens_out"] == 0 and any("hello" in line for line in t["log"])  # (a script)
    resumed = server.events(task, last_id=5)
    assert resumed == events[5:]
    assert server.events(task, after="3") == events[3:]
    recorded = (server.home / "sessions" / task / "events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in recorded] == [d for _, _, d in events]


def test_a_stream_cut_while_the_task_runs_resumes_where_it_stopped(server: Server) -> None:
    task = server.task("slow", [{"bash": "echo one"}, {"bash": "sleep 2; echo two"}, {"done": "ok"}])
    first = server.events(task, limit=6)
    assert server.get(task)["status"] == "running"  # the cut came before the end
    rest = server.events(task, last_id=first[-1][0])
    whole = first + rest
    assert [seq for seq, _, _ in whole] == list(range(1, len(whole) + 1))
    assert whole[-1][1] == "SessionEnded"
    assert "two" in "".join(d["data"] for _, k, d in whole if k == "OutputChunk")


def test_inert_view_shows_control_characters_as_text(server: Server) -> None:
    task = server.task("escape", [{"bash": "printf 'a\\033[31mred\\n'"}, {"done": "ok"}])
    server.wait(task)
    exact = "".join(d["data"] for _, k, d in server.events(task) if k == "OutputChunk")
    shown = "".join(d["data"] for _, k, d in server.events(task, view="inert") if k == "OutputChunk")
    assert "a\x1b[31mred" in exact and "\x1b" not in shown and "a^[[31mred" in shown


def test_two_tasks_run_at_once_a_third_waits_and_cancel_stops_each(server: Server) -> None:
    long = [{"bash": "sleep 60"}, {"done": "too late"}]
    a, b = server.task("a", long), server.task("b", long)
    server.wait(a, ("running",)), server.wait(b, ("running",))
    c = server.task("c", long)
    assert server.get(c)["status"] == "queued" and server.get(c)["queue_position"] == 1
    deadline = time.monotonic() + 30
    while not (containers(a) and containers(b)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert containers(a) and containers(b)  # two sandboxes of their own, at once
    assert server.http.get("/v1/health").json()["running"] == 2
    r = server.http.post(f"/v1/tasks/{c}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    started = time.monotonic()
    for t in (a, b):
        assert server.http.post(f"/v1/tasks/{t}/cancel").status_code == 200
    for t in (a, b):
        done = server.wait(t, timeout=30)
        assert done["status"] == "cancelled", done
    assert time.monotonic() - started < 20  # the sleep was stopped, not waited out
    assert server.http.post(f"/v1/tasks/{a}/cancel").json()["status"] == "cancelled"  # idempotent
    assert not containers(a) and not containers(b) and not containers(c)
    assert server.get(c)["started"] is None


def test_the_task_list_is_paged_newest_first(server: Server) -> None:
    ids = [server.task(f"p{i}", [{"done": str(i)}]) for i in range(3)]
    for t in ids:
        server.wait(t)
    page = server.http.get("/v1/tasks", params={"limit": 2}).json()
    assert [t["id"] for t in page["tasks"]] == ids[::-1][:2] and page["total"] >= 3
    nxt = server.http.get("/v1/tasks", params={"limit": 1, "offset": 2}).json()
    assert nxt["tasks"][0]["id"] == ids[0]
    assert server.http.get("/v1/tasks", params={"limit": 1000}).status_code == 422


def test_oversized_and_malformed_bodies_get_one_sentence(server: Server) -> None:
    big = {"goal": "x" * 9000}
    r = server.http.post("/v1/tasks", json=big)
    assert r.status_code == 413 and "SANDSHELL_API_BODY_LIMIT" in r.json()["detail"]
    chunks = (b'{"goal": "' + b"y" * 1024 for _ in range(10))  # no Content-Length: counted as it is read
    r = server.http.post("/v1/tasks", content=chunks, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    r = server.http.post("/v1/tasks", json={"goal": "g", "max_steps": 0, "colour": 1})
    assert r.status_code == 422 and isinstance(r.json()["detail"], str) and "max_steps" in r.json()["detail"]
    assert server.http.get("/v1/tasks/nope").status_code == 404
    assert server.http.get("/v1/tasks/nope/events").status_code == 404


def test_a_chat_keeps_its_sandbox_and_history_until_it_is_ended(server: Server) -> None:
    script = [{"comment": "go to tmp", "bash": "cd /tmp && echo made > chat.txt"}, {"bash": "pwd; cat chat.txt"}]
    first = server.http.post("/v1/chat", json={"message": "go to tmp", "script": script})
    assert first.status_code == 200, first.text
    convo = first.json()
    assert convo["thought"] == "go to tmp" and "cd /tmp" in convo["code"]
    cid = convo["conversation_id"]
    second = server.http.post("/v1/chat", json={"message": "where are you?", "conversation_id": cid}).json()
    assert second["code"] == "pwd; cat chat.txt" and second["observation"] == "/tmp\nmade\n"
    assert containers(cid)
    assert server.http.delete(f"/v1/chat/{cid}").status_code == 200
    assert not containers(cid)
    assert server.http.post("/v1/chat", json={"message": "hi", "conversation_id": cid}).status_code == 404
    assert server.http.delete(f"/v1/chat/{cid}").status_code == 404
    recorded = Path(server.home / "sessions" / cid / "events.jsonl").read_text()
    assert "the user says: where are you?" in recorded and '"SessionEnded"' in recorded


def test_conversations_are_bounded_and_an_idle_one_is_ended(tmp_path: Path) -> None:
    server = Server(tmp_path, SANDSHELL_MAX_CONVERSATIONS="1", SANDSHELL_CONVERSATION_IDLE="2")
    try:
        first = server.http.post("/v1/chat", json={"message": "hi", "script": [{"bash": "echo hi"}]})
        assert first.status_code == 200, first.text
        cid = first.json()["conversation_id"]
        second = server.http.post("/v1/chat", json={"message": "me too", "script": [{"bash": "echo 2"}]})
        assert second.status_code == 429 and "SANDSHELL_MAX_CONVERSATIONS" in second.json()["detail"]
        deadline = time.monotonic() + 20
        while containers(cid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not containers(cid), "the idle conversation's sandbox was ended"
        assert server.http.post("/v1/chat", json={"message": "hi", "conversation_id": cid}).status_code == 404
        assert '"status": "timeout"' in (server.home / "sessions" / cid / "events.jsonl").read_text()
        third = server.http.post("/v1/chat", json={"message": "now", "script": [{"bash": "echo 3"}]})
        assert third.status_code == 200 and third.json()["observation"] == "3\n"
        server.http.delete(f"/v1/chat/{third.json()['conversation_id']}")
    finally:
        server.stop()


def test_a_tasks_model_settings_start_its_config_json_and_bad_ones_are_refused(server: Server) -> None:
    task = server.task(
        "tuned", [{"bash": "cat /app/config.json"}, {"done": "ok"}], model={"temperature": 0.2, "seed": 5}
    )
    events = server.events(task)
    config = next(d["config"] for _, k, d in events if k == "StateRead")
    assert json.loads(config) == {"temperature": 0.2, "top_p": 0.95, "top_k": 40, "repeat_penalty": 1.1, "seed": 5}
    assert not [d for _, k, d in events if k == "Notice" and d["level"] != "info"]  # the model's config is valid
    r = server.http.post("/v1/tasks", json={"goal": "g", "model": {"temperature": 9}})
    assert r.status_code == 422 and "model.temperature" in r.json()["detail"]
    r = server.http.post("/v1/tasks", json={"goal": "g", "model": {"n_ctx": 100000}})
    assert r.status_code == 422
    r = server.http.post("/v1/tasks", json={"goal": "g", "model": {"max_tokens": 99999}})  # (not 202)
    assert r.status_code == 422 and "model.max_tokens may be at most" in r.json()["detail"], r.text


def test_a_long_poll_answers_when_the_task_ends_or_when_its_wait_is_over(server: Server) -> None:
    task = server.task("wait for me", [{"bash": "sleep 2; echo slept"}, {"done": "woke"}])
    asked = time.monotonic()
    r = server.http.get(f"/v1/tasks/{task}", params={"wait": 30})
    took = time.monotonic() - asked
    assert r.status_code == 200 and (r.json()["status"], r.json()["result"]) == ("done", "woke"), r.text
    assert 1.5 < took < 20, took  # answered at the end, not at once and not after the whole wait
    long = server.task("long", [{"bash": "sleep 60"}, {"done": "too late"}])
    asked = time.monotonic()
    r = server.http.get(f"/v1/tasks/{long}", params={"wait": 1})
    assert r.json()["status"] in ("queued", "running") and 0.9 < time.monotonic() - asked < 10
    waiting: dict[str, object] = {}
    poll = threading.Thread(target=lambda: waiting.update(server.http.get(f"/v1/tasks/{long}?wait=60").json()))
    poll.start()
    time.sleep(0.5)
    server.http.post(f"/v1/tasks/{long}/cancel")
    poll.join(20)
    assert waiting.get("status") == "cancelled", waiting
    assert server.http.get(f"/v1/tasks/{task}", params={"wait": 61}).status_code == 422
    assert server.http.get("/v1/tasks/nope", params={"wait": 1}).status_code == 404
