"""Sessions on Docker beside sessions as pods (the fake API server of tests/kubefake.py), in one run.

Run: PYTHONPATH=src:. .venv/bin/python bench/kubernetes_bench.py [--runs 300] [--mb 50] [--starts 5]
(needs the kubernetes client: pip install '.[kubernetes]').

Both engines use the same local Docker engine and image: a pod is a container the fake created, reached
through pods/attach (a WebSocket through the fake, then the container's Docker attach stream), so
the difference is the attach path and the pod's life cycle as the API server drives it, not a node.
Round trips (`true`) alternate between the two in blocks of 50; first byte is `echo hi; sleep 1`
from sending to the first output; bulk is MB of output through the stream; a start is `Sandbox`
entered (pod created, scheduled, running, attached, hello) and left (pod deleted). Prints a Markdown
table (docs/benchmarks.md). --workspace-mb 0 leaves out the workspace's trip into a pod and back.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sandshell import config
from sandshell.config import Settings
from sandshell.sandbox import engine
from sandshell.sandbox.image import ensure_image
from sandshell.sandbox.protocol import Output
from sandshell.sandbox.sandbox import Sandbox
from tests.kubefake import FakeCluster

BLOCK = 50


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f} ms"


def p95_ms(values: list[float]) -> str:
    return f"{sorted(values)[int(len(values) * 0.95)] * 1000:.2f} ms"


def first_byte(sb: Sandbox) -> float:
    start = time.perf_counter()
    for event in sb.stream("echo hi; sleep 1"):
        if isinstance(event, Output):
            first = time.perf_counter() - start
    return first


def bulk(sb: Sandbox, mb: int) -> tuple[float, int]:
    start, got = time.perf_counter(), 0
    for event in sb.stream(f"head -c {mb}M /dev/zero | tr '\\0' 'x' | fold -w 99", timeout=300):
        if isinstance(event, Output):
            got += len(event.data)
    return time.perf_counter() - start, got


def starts(settings: Settings, workspace: Path, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
            sb.ping()
            out.append(time.perf_counter() - start)
    return out


def workspace_trip(settings: Settings, folder: Path, mb: int) -> dict[str, str]:
    """A workspace of one `mb` MB file and 1,000 small ones, streamed into a pod and back (rw)."""
    folder.mkdir()
    (folder / "big.bin").write_bytes(os.urandom(mb * 1_000_000))
    for i in range(1000):
        (folder / f"f{i}.txt").write_text("x" * 100)
    start = time.perf_counter()
    with Sandbox(workspace=folder, settings=settings.sandbox.replace(sync_seconds=0)) as sb:
        went_in = time.perf_counter() - start
        start = time.perf_counter()
        sb.sync_workspace()
        came_back = time.perf_counter() - start
    label = f"{mb} MB + 1,000 files"
    return {f"workspace in ({label}, with the start)": f"{went_in:.1f} s", "back": f"{came_back:.1f} s"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--workspace-mb", type=int, default=50, help="a workspace of this many MB and 1,000 files")
    args = parser.parse_args()
    client = engine.client()
    base = config.load(env_file=None, environ={})
    base = base.replace(sandbox=base.sandbox.replace(output_limit=0, spill_limit=0, max_exit_timeout=600))
    image = ensure_image(client, base.sandbox, lambda m: print(m, file=sys.stderr))
    fake = FakeCluster(client).start()
    folder = Path(tempfile.mkdtemp(prefix="kube-bench-"))
    workspace = folder / "workspace"
    workspace.mkdir()
    pods = base.replace(
        sandbox=base.sandbox.replace(
            engine="kubernetes", kube_config=fake.kubeconfig(str(folder / "kubeconfig")), kube_image=image
        )
    )
    rows: dict[str, dict[str, str]] = {"docker": {}, "pods (fake API server)": {}}
    try:
        with (
            Sandbox(workspace=workspace, settings=base.sandbox) as d,
            Sandbox(workspace=workspace, settings=pods.sandbox) as k,
        ):
            trips: dict[str, list[float]] = {"docker": [], "pods (fake API server)": []}
            for _ in range(5):  # warm both
                d.execute("true")
                k.execute("true")
            for done in range(0, args.runs, BLOCK):
                for name, sb in (("docker", d), ("pods (fake API server)", k)):
                    for _ in range(min(BLOCK, args.runs - done)):
                        t = time.perf_counter()
                        sb.execute("true")
                        trips[name].append(time.perf_counter() - t)
            for name, sb in (("docker", d), ("pods (fake API server)", k)):
                rows[name]["round trip (median, p95)"] = f"{median_ms(trips[name])}, {p95_ms(trips[name])}"
                rows[name]["first byte"] = median_ms([first_byte(sb) for _ in range(3)])
                seconds, got = bulk(sb, args.mb)
                rows[name][f"{args.mb} MB out"] = f"{seconds:.2f} s ({got / seconds / 1e6:.0f} MB/s)"
        for name, s in (("docker", base), ("pods (fake API server)", pods)):
            took = starts(s, workspace, args.starts)
            rows[name]["session start (median)"] = f"{statistics.median(took):.2f} s"
        if args.workspace_mb:
            rows["pods (fake API server)"] |= workspace_trip(pods, folder / "data", args.workspace_mb)
    finally:
        fake.stop()
    columns = list(rows["pods (fake API server)"])
    print("| engine | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row.get(c, "(mounted)") for c in columns) + " |")


if __name__ == "__main__":
    main()
