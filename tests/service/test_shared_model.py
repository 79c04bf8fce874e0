"""The service with the real small GGUF model: one loaded model shared by three tasks at once."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service_util import ENDED, TOKEN, Server, containers, parse_sse

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(900)]
SLACK = 0.3  # seconds: events of different tasks arrive on different connections


def _follow(url: str, task_id: str, into: list[tuple[float, str]]) -> None:
    """A task's stream from its start to its end: (arrival time, event type) of each event."""
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=600)
    with http, http.stream("GET", f"/v1/tasks/{task_id}/events") as r:
        for _, kind, _ in parse_sse(r.iter_lines()):
            into.append((time.monotonic(), kind))


def _generations(events: list[tuple[float, str]]) -> list[dict[str, float]]:
    """Each model generation: when the turn asked for it (TurnStarted), its first token, its end (ModelReplied).
    The intro's scripted answer (a ModelReplied with no TurnStarted before it) is not one."""
    out: list[dict[str, float]] = []
    current: dict[str, float] | None = None
    for t, kind in events:
        if kind == "TurnStarted":
            current = {"ready": t}
        elif kind == "ModelText" and current is not None and "start" not in current:
            current["start"] = t
        elif kind == "ModelReplied" and current is not None:
            current.setdefault("start", t)
            current["end"] = t
            out.append(current)
            current = None
    return out


def test_three_tasks_share_one_model_taking_turns_in_the_order_they_ask(tmp_path: Path) -> None:
    server = Server(
        tmp_path,
        LLAMA_BACKEND="llama",
        LLAMA_MAX_TOKENS="64",
        LLAMA_SEED="7",
        LLAMA_EXIT_TIMEOUT="5",
        SANDSHELL_MAX_SESSIONS="3",
    )
    try:
        assert "SmolLM2" in server.http.get("/v1/health").json()["backend"]
        goals = ("Print the date", "Count files in /etc", "Show the kernel version")
        tasks = [server.task(goal, max_steps=3, timeout=400) for goal in goals]
        streams: dict[str, list[tuple[float, str]]] = {t: [] for t in tasks}
        readers = [threading.Thread(target=_follow, args=(server.url, t, streams[t]), daemon=True) for t in tasks]
        for r in readers:
            r.start()
        most, sandboxes, deadline = 0, 0, time.monotonic() + 600
        while time.monotonic() < deadline:
            health = server.http.get("/v1/health").json()
            most = max(most, health["generations"]["generating"])
            sandboxes = max(sandboxes, sum(1 for t in tasks if containers(t)))
            if all(server.get(t)["status"] in ENDED for t in tasks):
                break
            time.sleep(0.1)
        for r in readers:
            r.join(30)
        results = [server.get(t) for t in tasks]
        for r in results:
            assert r["status"] in ("done", "max_steps", "stuck", "timeout"), r
            assert r["turns"] >= 1 and r["tokens_out"] > 0 and r["tokens_in"] > 0, r
        assert sandboxes == 3, "the three tasks ran at once, each in its own container"
        assert most == 1, "the model was busy, but never with two generations at once"

        gens: list[tuple[dict[str, float], int]] = []
        for i, t in enumerate(tasks):
            assert streams[t][-1][1] == "SessionEnded" and any(k == "ModelText" for _, k in streams[t])
            gens += [(g, i) for g in _generations(streams[t])]
        gens.sort(key=lambda x: x[0]["start"])
        order = "".join("ABC"[i] for _, i in gens)
        shown: Any = [(("ABC"[i]), round(g["ready"], 2), round(g["start"], 2), round(g["end"], 2)) for g, i in gens]
        for (a, _), (b, _) in itertools.pairwise(gens):
            assert a["end"] <= b["start"] + SLACK, f"two generations at once: {shown}"
        for g, i in gens:  # first come, first served: who asked earlier generated earlier
            for h, j in gens:
                if i != j and g["ready"] + SLACK < h["ready"]:
                    assert g["start"] < h["start"], f"{'ABC'[j]} went before {'ABC'[i]}, which asked first: {shown}"
        for i in range(3):  # not one after another: each task had turns while the others were still taking theirs
            mine = [g for g, k in gens if k == i]
            for j in range(3):
                theirs = [g for g, k in gens if k == j]
                if i != j and len(theirs) >= 2:
                    assert theirs[0]["start"] < mine[-1]["start"] and mine[0]["start"] < theirs[-1]["start"], (
                        f"{'ABC'[i]} and {'ABC'[j]} ran one after the other: {order} {shown}"
                    )
        print(f"generation order {order}: {shown}")
    finally:
        server.stop()
