"""The service's door against a live server: the sign-in cookie and Origin, the stream limit under a
crowd, malformed resume points, HEAD, non-finite numbers, live numbers, and the OpenAPI checked
against what the server really answers."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service_util import TOKEN, Server

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("door"), SANDSHELL_MAX_SESSIONS="2")
    try:
        yield s
    finally:
        s.stop()


def sign_in(server: Server) -> tuple[str, str]:
    """(the cookie's name, its value), as a browser gets them from /?token=."""
    r = httpx.get(f"{server.url}/?token={TOKEN}")
    assert r.status_code == 303
    jar = {k: v for k, v in r.cookies.items() if v}
    assert len(jar) == 1, r.headers.get_list("set-cookie")
    return next(iter(jar.items()))


def test_the_sign_in_is_a_revocable_value_and_a_change_needs_this_servers_origin(server: Server) -> None:
    name, value = sign_in(server)
    assert value != TOKEN and TOKEN not in value and str(server.port) in name
    browser = httpx.Client(base_url=server.url, cookies={name: value})
    assert browser.get("/v1/tasks").status_code == 200
    assert browser.get("/v1/health").json()["backend"] == "script"  # signed in: the full health
    task = server.task("long", [{"bash": "sleep 60"}, {"done": "never"}])
    for origin in ({"Origin": "http://127.0.0.1:1"}, {"Origin": "null"}, {}):  # another site's page, or none said
        r = browser.post(f"/v1/tasks/{task}/cancel", headers=origin)
        assert r.status_code == 403 and "Origin" in r.json()["detail"], (origin, r.text)
        r = browser.post("/v1/tasks", json={"goal": "forged", "script": [{"done": "x"}]}, headers=origin)
        assert r.status_code == 403
    assert server.get(task)["status"] in ("queued", "running")
    r = browser.post(f"/v1/tasks/{task}/cancel", headers={"Origin": server.url})  # the server's own page
    assert r.status_code == 200
    assert server.wait(task)["status"] == "cancelled"
    old = httpx.get(f"{server.url}/v1/tasks", cookies={"sandshell_token": TOKEN})  # the token is no cookie
    assert old.status_code == 401
    assert browser.post("/signout", headers={"Origin": "http://127.0.0.1:1"}).status_code == 403
    assert browser.post("/signout", headers={"Origin": server.url}).status_code == 204
    gone = httpx.get(f"{server.url}/v1/tasks", cookies={name: value})
    assert gone.status_code == 401 and gone.json() == {
        "detail": "the sign-in has ended or was revoked: sign in again with /?token=<token>"
    }
    assert httpx.get(f"{server.url}/v1/health", cookies={name: value}).json() == {"status": "ok"}


def test_a_sign_in_outlives_a_restart_and_is_kept_as_a_hash(tmp_path: Path) -> None:
    first = Server(tmp_path)
    port = first.port
    try:
        name, value = sign_in(first)
    finally:
        first.stop()
    kept = tmp_path / "sessions" / ".service" / "sign-ins"
    assert kept.stat().st_mode & 0o777 == 0o600 and value not in kept.read_text()
    again = Server(tmp_path, port=port)
    try:
        assert httpx.get(f"{again.url}/v1/tasks", cookies={name: value}).status_code == 200
    finally:
        again.stop()


def test_no_page_may_be_framed(server: Server) -> None:
    for path in ("/", f"/tasks/x?token={TOKEN}", "/docs", "/v1/health", "/static/view.js", "/openapi.json"):
        r = httpx.get(server.url + path)
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"], path
        assert r.headers["x-frame-options"] == "DENY", path


def test_never_more_than_64_of_200_simultaneous_streams_are_let_in(server: Server) -> None:
    task = server.task("held open", [{"bash": "sleep 60"}, {"done": "never"}])
    server.wait(task, ("running",))
    statuses: list[int] = []
    everyone_answered = asyncio.Event()

    async def one(client: httpx.AsyncClient) -> None:
        async with client.stream("GET", f"/v1/tasks/{task}/events") as r:
            statuses.append(r.status_code)
            if len(statuses) == 200:
                everyone_answered.set()
            if r.status_code == 200:
                await asyncio.wait_for(everyone_answered.wait(), 60)  # held open until all have an answer

    async def crowd() -> None:
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=0)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, limits=limits, timeout=60) as client:
            await asyncio.gather(*(one(client) for _ in range(200)))

    asyncio.run(crowd())
    assert len(statuses) == 200 and set(statuses) <= {200, 429}
    assert statuses.count(200) == 64, f"{statuses.count(200)} streams were let in at once"
    assert server.http.head(f"/v1/tasks/{task}/events", timeout=10).status_code == 200  # their slots were given back
    said = server.output()
    assert said.count("Traceback") == 0, said[-3000:]  # 136 refused and 64 readers gone: no error of the server's
    server.http.post(f"/v1/tasks/{task}/cancel")


@pytest.mark.parametrize("given", ["9" * 4301, "12abc", "-1", "1e3", "٣", "1" * 19])
def test_a_malformed_last_event_id_gets_a_clear_400(server: Server, given: str) -> None:
    task = server.task("quick", [{"done": "ok"}])
    server.wait(task)
    r = server.http.get(f"/v1/tasks/{task}/events", headers={"Last-Event-ID": given.encode()})
    assert r.status_code == 400 and r.json()["detail"].startswith("Last-Event-ID must be the id of an event"), r.text
    r = server.http.get(f"/v1/tasks/{task}/events", params={"after": "9" * 4301})
    assert r.status_code == 422 and isinstance(r.json()["detail"], str)
    said = server.output()
    assert said.count("Traceback") == 0, said[-3000:]


def test_head_answers_as_get_without_a_body(server: Server) -> None:
    task = server.task("held open", [{"bash": "sleep 30"}, {"done": "never"}])
    server.wait(task, ("running",))
    for path in (
        "/",
        "/v1/health",
        "/v1/tasks",
        f"/v1/tasks/{task}",
        "/docs",
        "/openapi.json",
        f"/v1/tasks/{task}/events",
    ):
        got = server.http.get(path) if not path.endswith("/events") else None
        started = time.monotonic()
        head = server.http.head(path, timeout=10)
        assert head.status_code == 200 and head.content == b"", path
        assert time.monotonic() - started < 5, path  # a stream's HEAD ends at its head
        if got is not None:
            assert head.headers["content-type"] == got.headers["content-type"], path
    assert server.http.head("/v1/tasks/nope").status_code == 404
    heads = [server.http.head(f"/v1/tasks/{task}/events").status_code for _ in range(70)]
    assert heads == [200] * 70  # each HEAD of a stream gives its slot back
    server.http.post(f"/v1/tasks/{task}/cancel")


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_a_timeout_that_is_not_a_finite_number_is_refused_as_such(server: Server, number: str) -> None:
    body = f'{{"goal": "g", "timeout": {number}}}'
    r = server.http.post("/v1/tasks", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "timeout: Input should be a finite number" in r.json()["detail"], r.text
    body = f'{{"goal": "g", "model": {{"temperature": {number}}}}}'
    r = server.http.post("/v1/tasks", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "finite number" in r.json()["detail"], r.text
    r = server.http.get("/v1/tasks/x", params={"wait": number.lower()})
    assert r.status_code == 422 and "finite number" in r.json()["detail"], r.text


def test_a_running_tasks_numbers_are_live_and_a_crash_keeps_what_it_ran(tmp_path: Path) -> None:
    first = Server(tmp_path)
    try:
        task = first.task("counting", [{"bash": "echo one"}, {"bash": "echo two; sleep 60"}, {"done": "never"}])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and first.get(task)["turns"] < 2:
            time.sleep(0.1)
        time.sleep(1.2)
        live = first.get(task)
        assert live["status"] == "running" and live["turns"] == 2, live
        assert live["seconds"] >= 1.0, live  # (a script backend writes no tokens: those stay 0)
        listed = next(t for t in first.http.get("/v1/tasks").json()["tasks"] if t["id"] == task)
        assert listed["turns"] == 2 and listed["seconds"] > 0
    finally:
        first.kill()  # as a crash
    again = Server(tmp_path)
    try:
        after = again.get(task)
        assert after["status"] == "interrupted" and after["turns"] == 2 and after["seconds"] > 0, after
        assert any("one" in line for line in after["log"]), after["log"]
    finally:
        again.stop()


# -- the OpenAPI against real answers ---------------------------------------------------------------
def conforms(value: Any, schema: dict[str, Any], doc: dict[str, Any], at: str = "") -> None:
    """Assert `value` fits `schema` (the subset of JSON Schema the OpenAPI uses here)."""
    if "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in schema or "oneOf" in schema:
        failures = []
        for option in schema.get("anyOf") or schema["oneOf"]:
            try:
                conforms(value, option, doc, at)
                return
            except AssertionError as e:
                failures.append(str(e))
        raise AssertionError(f"{at}: {value!r} fits none of {failures}")
    if "const" in schema:
        assert value == schema["const"], at
    if "enum" in schema:
        assert value in schema["enum"], f"{at}: {value!r} not in {schema['enum']}"
    kind = schema.get("type")
    python = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list,
              "object": dict, "null": type(None)}  # fmt: skip
    if kind is not None:
        assert isinstance(value, python[kind]) and not (kind in ("integer", "number") and isinstance(value, bool)), (
            f"{at}: {value!r} is not {kind}"
        )
    if kind == "object":
        props = schema.get("properties", {})
        missing = set(schema.get("required", [])) - set(value)
        assert not missing, f"{at}: missing {missing}"
        if props and schema.get("additionalProperties") in (None, False):
            assert not set(value) - set(props), f"{at}: {set(value) - set(props)} not in the schema"
        for key, item in value.items():
            if key in props:
                conforms(item, props[key], doc, f"{at}.{key}")
    if kind == "array":
        for i, item in enumerate(value):
            conforms(item, schema.get("items", {}), doc, f"{at}[{i}]")


def answer_schema(doc: dict[str, Any], method: str, path: str, status: int) -> dict[str, Any]:
    responses = doc["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method} {path} answers {status}, which the OpenAPI does not list"
    content = responses[str(status)]["content"]
    return dict(next(iter(content.values()))["schema"])


def test_the_openapi_says_what_the_server_really_answers(server: Server) -> None:
    doc = server.http.get("/openapi.json").json()
    scheme = doc["components"]["securitySchemes"]["HTTPBearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")  # Swagger UI's Authorize button
    bare = httpx.Client(base_url=server.url)
    task = server.task("described", [{"bash": "echo hi"}, {"done": "ok"}])
    done = server.wait(task)
    chat = server.http.post("/v1/chat", json={"message": "hi", "script": [{"bash": "echo hi"}]})
    cid = chat.json()["conversation_id"]
    busy_stream = server.http.get(f"/v1/tasks/{task}/events", headers={"Last-Event-ID": "x"})
    real = [
        ("post", "/v1/tasks", server.http.post("/v1/tasks", json={"goal": "g", "script": [{"done": "x"}]})),
        ("get", "/v1/tasks/{task_id}", server.http.get(f"/v1/tasks/{task}")),
        ("get", "/v1/tasks", server.http.get("/v1/tasks")),
        ("get", "/v1/health", server.http.get("/v1/health")),
        ("get", "/v1/health", bare.get("/v1/health")),
        ("post", "/v1/tasks/{task_id}/cancel", server.http.post(f"/v1/tasks/{task}/cancel")),
        ("post", "/v1/chat", chat),
        ("delete", "/v1/chat/{conversation_id}", server.http.delete(f"/v1/chat/{cid}")),
        ("get", "/v1/tasks", bare.get("/v1/tasks")),
        ("get", "/v1/tasks/{task_id}", server.http.get("/v1/tasks/nope")),
        ("post", "/v1/tasks", server.http.post("/v1/tasks", json={"goal": ""})),
        ("post", "/v1/tasks", server.http.post("/v1/tasks", json={"goal": "g", "profile": "standard"})),
        ("post", "/v1/chat", server.http.post("/v1/chat", json={"message": "x", "conversation_id": "gone"})),
        ("get", "/v1/tasks/{task_id}/events", busy_stream),
    ]
    seen = set()
    for method, path, r in real:
        seen.add(r.status_code)
        conforms(r.json(), answer_schema(doc, method, path, r.status_code), doc, f"{method} {path} {r.status_code}")
    assert {200, 202, 400, 401, 403, 404, 422} <= seen, seen
    assert done["status"] == "done"
    for code in (401, 403, 404, 409, 413, 422, 429):  # the documented refusals are all {"detail": sentence}
        assert answer_schema(doc, "post", "/v1/chat", code) == {"$ref": "#/components/schemas/Problem"}
    events = server.events(task)
    stream = answer_schema(doc, "get", "/v1/tasks/{task_id}/events", 200)
    kinds = {ref["$ref"].rsplit("/", 1)[-1] for ref in stream["oneOf"]}
    for _, kind, data in events:
        assert kind in kinds
        conforms(data, stream, doc, kind)
    assert not math.isnan(done["seconds"])


def test_the_start_line_counts_in_words(tmp_path: Path) -> None:
    one = Server(tmp_path, SANDSHELL_MAX_SESSIONS="1")
    try:
        said = one.output()
        assert "; 1 task at once;" in said, said
    finally:
        one.stop()
