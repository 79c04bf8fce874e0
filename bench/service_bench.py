"""The HTTP service's cost: tasks through the API against run_task directly, and an event's delay
from the recorder to an SSE client.

Run: .venv/bin/python bench/service_bench.py [--tasks 20] [--parallel 4] [--rounds 2] [--poll 0.02]

Both use the script backend (no model), the locked profile, and a server in this process
(uvicorn on 127.0.0.1, a free port). The delay is from the moment the recorder has written
an event (the sink after it is called) to the moment the client has parsed it off the stream.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import uvicorn

from sandshell import config
from sandshell.model.script import ScriptBackend
from sandshell.runner import run_task
from sandshell.service import taskqueue as tasks_module
from sandshell.service.api import create_app
from sandshell.service.core import Service
from sandshell.workspace import init_workspace

SCRIPT = [{"bash": "echo hello"}, {"bash": "ls / | wc -l"}, {"bash": "echo done >&2"}, {"done": "ok"}]
STREAMY = [{"bash": "for i in $(seq 40); do echo line $i; sleep 0.02; done"}] * 3 + [{"done": "ok"}]


def direct(settings: config.Settings, n: int, parallel: int, starters: bool = True) -> float:
    """`n` tasks through run_task from `parallel` threads; each workspace laid out as an API task's is (the
    goal, system.md and config.json the session reads every turn), unless `starters` is false."""
    lines = [json.dumps(a) for a in SCRIPT]

    def one(_: int) -> str:
        s = settings.replace(
            sandbox=settings.sandbox.replace(workspace=tempfile.mkdtemp()),
            session=settings.session.replace(default_goal="bench"),
        )
        if starters:
            init_workspace(s)
        r = run_task("bench", 60, 10, settings=s, backend=ScriptBackend(lines))
        return str(r["status"] if r["status"] == "done" else (r["status"], r["error"]))

    start = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        statuses = list(pool.map(one, range(n)))
    assert statuses == ["done"] * n, statuses
    return time.perf_counter() - start


def through_api(http: httpx.Client, n: int, poll: float = 0.0) -> float:
    """POST `n` tasks, then wait for each: a long poll (`?wait=`), or asking every `poll` seconds."""
    start = time.perf_counter()
    ids = [http.post("/v1/tasks", json={"goal": "bench", "script": SCRIPT}).json()["id"] for _ in range(n)]
    for task_id in ids:
        params = {} if poll else {"wait": 60}
        while (t := http.get(f"/v1/tasks/{task_id}", params=params).json())["status"] in ("queued", "running"):
            time.sleep(poll)
        assert t["status"] == "done", t
    return time.perf_counter() - start


def delays(http: httpx.Client, written: dict[str, list[float]]) -> list[float]:
    task_id = http.post("/v1/tasks", json={"goal": "stream", "script": STREAMY}).json()["id"]
    arrived: dict[int, float] = {}
    with http.stream("GET", f"/v1/tasks/{task_id}/events") as r:
        seq = 0
        for line in r.iter_lines():
            if line.startswith("id:"):
                seq = int(line[3:])
            elif line == "" and seq:
                arrived[seq] = time.perf_counter()
    stamps = written[task_id]
    return [(arrived[i + 1] - stamps[i]) * 1000 for i in range(len(stamps)) if i + 1 in arrived]


def idle(http: httpx.Client, n: int) -> None:
    """Open `n` conversations (a sandbox each, left idle): the server's memory and each container's."""
    import docker
    import psutil

    from sandshell.sandbox import engine

    me = psutil.Process()
    before = me.memory_info().rss
    start = time.perf_counter()
    ids = []
    for _ in range(n):
        r = http.post("/v1/chat", json={"message": "idle", "script": [{"bash": "true"}]})
        assert r.status_code == 200, r.text
        ids.append(r.json()["conversation_id"])
    opened = time.perf_counter() - start
    time.sleep(2)
    client = docker.from_env()
    usage = []
    for cid in ids:
        (listed,) = client.api.containers(filters={"label": f"{engine.LABEL}={cid}"})
        stats = client.api.stats(listed["Id"], stream=False)
        mem = stats["memory_stats"]
        usage.append(mem["usage"] - mem.get("stats", {}).get("inactive_file", 0))
    grown = me.memory_info().rss - before
    print(
        f"{n} idle sessions (chat conversations) opened in {opened:.1f}s: each container "
        f"{statistics.median(usage) / 2**20:.1f} MiB (median, max {max(usage) / 2**20:.1f} MiB), "
        f"the server grew {grown / 2**20 / n:.1f} MiB a session"
    )
    for cid in ids:
        http.delete(f"/v1/chat/{cid}")


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--idle", type=int, default=0, help="also open this many idle sessions and measure memory")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of run_task then the API, interleaved")
    ap.add_argument("--empty", action="store_true", help="run_task on an empty workspace (API tasks get starter files)")
    ap.add_argument("--poll", type=float, default=0.0, help="ask for each task every POLL seconds (0: long poll)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="sandshell-bench-"))
    settings = config.load(env_file=None, environ={"SANDSHELL_HOME": str(home)})
    settings = settings.replace(
        model=settings.model.replace(backend="script", intro=False),
        sandbox=settings.sandbox.replace(profile="locked"),
        service=settings.service.replace(
            max_sessions=args.parallel, api_token="bench", max_conversations=max(4, args.idle)
        ),
    )
    written: dict[str, list[float]] = {}
    original = tasks_module.StreamWaker.emit

    def stamped(self: tasks_module.StreamWaker, event: object) -> None:
        written.setdefault(self.task_id, []).append(time.perf_counter())
        original(self, event)  # type: ignore[arg-type]

    tasks_module.StreamWaker.emit = stamped  # type: ignore[method-assign]
    service = Service(settings, log=lambda _m: None)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests.net
    from tests.net import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer bench"}, timeout=60)
    try:
        if args.idle:
            idle(http, args.idle)
            return
        through_api(http, args.parallel, args.poll)  # warm: image, imports
        runs: dict[str, list[float]] = {"run_task": [], "API": []}
        cpu: dict[str, list[float]] = {"run_task": [], "API": []}
        redone = 0
        while len(runs["API"]) < args.rounds:  # interleaved: the machine is shared, so its load moves both alike
            got: dict[str, tuple[float, float]] = {}
            try:
                for name, run in (
                    ("run_task", lambda: direct(settings, args.tasks, args.parallel, not args.empty)),
                    ("API", lambda: through_api(http, args.tasks, args.poll)),
                ):
                    used = _cpu()
                    got[name] = (run(), _cpu() - used)
            except AssertionError as e:  # a task that failed (the engine, shared with others, lost a container)
                redone += 1
                print(f"a round is run again: {str(e)[:300]}", file=sys.stderr)
                if redone > 3:
                    raise
                continue
            for name, (seconds, used_cpu) in got.items():
                runs[name].append(seconds)
                cpu[name].append(used_cpu)
        shown = "; ".join(f"{k} " + ", ".join(f"{x:.2f}s" for x in v) for k, v in runs.items())
        best = min(runs["API"]) / min(runs["run_task"]) - 1
        paired = statistics.median(a / d for a, d in zip(runs["API"], runs["run_task"], strict=True)) - 1
        client = f"polling every {args.poll:g}s" if args.poll else "long poll"
        print(
            f"{args.tasks} tasks, {args.parallel} at a time ({client}): {shown} "
            f"(best against best: {best * 100:+.1f}%, median of each round's API/run_task: {paired * 100:+.1f}%)"
        )
        each = {k: statistics.median(v) / args.tasks * 1000 for k, v in cpu.items()}
        print(
            f"this process's CPU a task (median): run_task {each['run_task']:.1f} ms, API {each['API']:.1f} ms "
            f"(server and client: {each['API'] - each['run_task']:+.1f} ms)"
        )
        ms: list[float] = []
        for _ in range(3):
            ms += delays(http, written)
        ms.sort()
        p95 = ms[int(len(ms) * 0.95) - 1]
        print(
            f"event delay recorder -> SSE client over {len(ms)} events: median {statistics.median(ms):.2f} ms, "
            f"p95 {p95:.2f} ms, max {ms[-1]:.2f} ms"
        )
    finally:
        http.close()
        server.should_exit = True
        thread.join(30)


if __name__ == "__main__":
    main()
