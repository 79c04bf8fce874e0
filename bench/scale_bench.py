"""What limits one machine: sessions at once, memory per session, generations per second of the default model.

Run: .venv/bin/python bench/scale_bench.py [--parallel 1,2,4,8,16] [--steps 10] [--idle 10] [--gens 6]
Prints Markdown tables (docs/scaling.md keeps them with the date and the machine's load).

1. N headless sessions at once (threads in one process, each its own sandbox, `run_task` with the
   script backend: `--steps` commands then done): wall time, per-session time, sessions a minute.
2. `--idle` idle sandboxes: each container's memory (cgroup v1 usage and RSS) and what each costs
   on the host (this process's RSS, the engine's containerd-shim and fuse-overlayfs processes).
3. The default model (SmolLM2-135M, in-process, constrained): one session's first-turn prompt,
   `--gens` answers of at most 128 tokens: time per answer cold (whole prompt) and warm (cached).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from sandshell import config
from sandshell.config import Settings
from sandshell.runner import run_task
from sandshell.sandbox.sandbox import Sandbox


def settings_for(tmp: Path) -> Settings:
    ws = tmp / "workspace"
    ws.mkdir(exist_ok=True)
    base = config.load(env_file=None, environ={"SANDSHELL_HOME": str(tmp)})
    return base.replace(
        sandbox=base.sandbox.replace(workspace=str(ws)),
        model=base.model.replace(intro=False),
        session=base.session.replace(sessions_dir=str(tmp / "sessions")),
    )


def parallel(base: Settings, tmp: Path, n: int, steps: int) -> dict[str, Any]:
    script = tmp / f"script-{steps}.jsonl"
    lines = [
        f'{{"bash": "echo step {i} && ls /app >/dev/null && head -c 2000 /etc/services | wc -c"}}' for i in range(steps)
    ] + ['{"done": "finished"}']
    script.write_text("\n".join(lines) + "\n")
    s = base.replace(model=base.model.replace(backend="script", script_path=str(script)))
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one() -> None:
        t = time.perf_counter()
        out = run_task("Run the script.", timeout=600, max_iterations=steps + 5, settings=s)
        out["wall"] = time.perf_counter() - t
        with lock:
            results.append(out)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    done = sum(r["status"] == "done" for r in results)
    errors = sorted({str(r["error"])[:160] for r in results if r["status"] != "done"})
    per, loop = statistics.median(r["wall"] for r in results), statistics.median(r["seconds"] for r in results)
    return {"n": n, "wall": wall, "done": done, "per": per, "loop": loop, "rate": 60 * n / wall, "errors": errors}


def engine_rss() -> dict[int, int]:
    """RSS of the engine's per-container processes (containerd-shim, fuse-overlayfs), by pid."""
    out = {}
    for p in psutil.process_iter(["name", "memory_info"]):
        name = p.info["name"] or ""
        if name.startswith("containerd-shim") or name == "fuse-overlayfs":
            out[p.pid] = p.info["memory_info"].rss if p.info["memory_info"] else 0
    return out


def cgroup(cid: str, name: str) -> int:
    for root in (f"/sys/fs/cgroup/memory/docker/{cid}", f"/sys/fs/cgroup/system.slice/docker-{cid}.scope"):
        path = Path(root) / name
        if path.exists():
            return int(path.read_text().split()[0])
    return 0


def container_rss(cid: str) -> int:
    path = Path(f"/sys/fs/cgroup/memory/docker/{cid}/memory.stat")
    if not path.exists():
        return 0
    stat = dict(line.split() for line in path.read_text().splitlines())
    return int(stat.get("total_rss", 0))


def idle(base: Settings, m: int) -> dict[str, float]:
    me = psutil.Process()
    before_rss, before_engine = me.memory_info().rss, engine_rss()
    boxes = []
    try:
        for _ in range(m):
            sb = Sandbox(settings=base.sandbox)
            sb.start()
            boxes.append(sb)
        for sb in boxes:
            sb.execute("true")
        time.sleep(3)  # settle
        ids = [sb.container.id for sb in boxes]
        usage = [cgroup(cid, "memory.usage_in_bytes") for cid in ids]
        rss = [container_rss(cid) for cid in ids]
        after = engine_rss()
        new = {pid: r for pid, r in after.items() if pid not in before_engine}
        host = (me.memory_info().rss - before_rss) / m
        return {
            "m": m,
            "usage": statistics.median(usage),
            "rss": statistics.median(rss),
            "host": host,
            "engine": sum(new.values()) / m,
            "engine_processes": len(new) / m,
        }
    finally:
        for sb in boxes:
            sb.kill()


def generations(base: Settings, n: int) -> dict[str, float]:
    from sandshell.model.llama import LlamaBackend
    from sandshell.model.turn import Model
    from sandshell.resources import fixed_system_prompt

    s = base.replace(model=base.model.replace(max_tokens=128))
    backend = LlamaBackend(s.model)
    model = Model(backend, s.model)
    messages = [
        {"role": "system", "content": fixed_system_prompt() + "\n\nYour goal: find the kernel version.\n"},
        {"role": "user", "content": "Begin. The shell is ready: 0 root@sandbox:/app #"},
    ]
    times, tokens, cpu = [], [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        for item in model.turn(messages, {"max_tokens": 128, "temperature": 0.7}):
            if not isinstance(item, str):
                tokens.append(item.stats.completion_tokens)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    warm = times[1:]
    return {
        "prompt": backend.count(messages),
        "cold": times[0],
        "warm": statistics.median(warm),
        "tokens": statistics.median(tokens),
        "tps": sum(tokens[1:]) / sum(warm),
        "cpu_cold": cpu[0],
        "cpu_warm": statistics.median(cpu[1:]),
    }


def parallel_table(base: Settings, tmp: Path, counts: list[int], steps: int) -> None:
    parallel(base, tmp, 1, 1)  # warm: the image is there, the engine awake
    print(f"\nload {os.getloadavg()[0]:.1f} before; {steps} commands a session")
    print("\n| sessions at once | all done | wall | one session (median), of which the loop | sessions a minute |")
    print("|---|---|---|---|---|")
    for n in counts:
        r = parallel(base, tmp, n, steps)
        row = [
            f"{n}",
            f"{r['done']}/{n}",
            f"{r['wall']:.1f} s",
            f"{r['per']:.1f} s, {r['loop']:.1f} s",
            f"{r['rate']:.1f}",
        ]
        print("| " + " | ".join(row) + " |")
        for e in r["errors"]:
            print(f"|   | failed: {e} | | | |")


def idle_table(base: Settings, m: int) -> None:
    print(f"\nload {os.getloadavg()[0]:.1f} before")
    r = idle(base, m)
    print(f"\n| per idle session (median of {m}) | MB |")
    print("|---|---|")
    print(f"| container memory, cgroup usage (RSS + page cache) | {r['usage'] / 1e6:.1f} |")
    print(f"| container memory, RSS only | {r['rss'] / 1e6:.1f} |")
    print(f"| host: this process (the Sandbox, its reader thread) | {r['host'] / 1e6:.1f} |")
    per_session = f"{r['engine_processes']:.1f} a session: containerd-shim, fuse-overlayfs"
    print(f"| host: the engine's own processes ({per_session}) | {r['engine'] / 1e6:.1f} |")


def model_table(base: Settings, n: int) -> None:
    print(f"\nload {os.getloadavg()[0]:.1f} before")
    g = generations(base, n)
    print(f"\n| default model, prompt {g['prompt']} tokens, answers ≤128 tokens | value |")
    print("|---|---|")
    print(f"| first answer (whole prompt evaluated) | {g['cold']:.2f} s |")
    print(f"| later answers (prompt cached), median | {g['warm']:.2f} s ({g['tokens']:.0f} tokens) |")
    print(f"| generations a second, one model | {1 / g['warm']:.2f} |")
    print(f"| tokens a second while generating | {g['tps']:.1f} |")
    cores = os.cpu_count() or 1
    print(f"| CPU seconds an answer, first / later | {g['cpu_cold']:.2f} / {g['cpu_warm']:.2f} |")
    print(f"| generations a second with all {cores} cores (CPU time / {cores}) | {cores / g['cpu_warm']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parallel", default="1,2,4,8,16", help="session counts, comma-separated ('' skips)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--idle", type=int, default=10, help="idle sandboxes (0 skips)")
    ap.add_argument("--gens", type=int, default=6, help="model answers (0 skips)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB")
    with tempfile.TemporaryDirectory(prefix="sandshell-scale-") as d:
        base = settings_for(Path(d))
        counts = [int(x) for x in args.parallel.split(",") if x]
        if counts:
            parallel_table(base, Path(d), counts, args.steps)
        if args.idle:
            idle_table(base, args.idle)
        if args.gens:
            model_table(base, args.gens)


if __name__ == "__main__":
    main()
