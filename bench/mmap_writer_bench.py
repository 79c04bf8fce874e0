"""How far a writer through shared mappings gets past a disk limit: no write call, so no inotify event,
and on fuse-overlayfs no blocks until the pages are written back; the disk watchdog's look through
/proc flushes such files and measures their folders (`src/sandshell_agent/openfiles.py`).

Run: .venv/bin/python bench/mmap_writer_bench.py [--runs 2] [--mb 50]
Into /root (the container's own files, the scratch limit) and /app (the workspace limit), each limit
--mb MB: 30 files of 4 MiB, sized and mapped first, then filled one each 0.5 s (8 MB/s). Prints how
long the command ran, what the result said, and what the host's disk lost, read after an `os.sync()`
(dirty pages of the container's files count only once written back). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from sandshell import config
from sandshell.sandbox.sandbox import Sandbox

WRITER = """
import mmap, os, sys, time
where = sys.argv[1]
os.makedirs(where, exist_ok=True)
maps = []
for i in range(30):
    fd = os.open(f"{where}/m{i}", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4 << 20)
    maps.append(mmap.mmap(fd, 4 << 20))
time.sleep(0.5)
for m in maps:
    m[:] = b"x" * (4 << 20)
    time.sleep(0.5)
time.sleep(5)
"""


def free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--mb", type=int, default=50)
    args = ap.parse_args()
    limit = args.mb * 1_000_000
    with tempfile.TemporaryDirectory() as home:
        ws = Path(home) / "workspace"
        ws.mkdir()
        s = config.load(env_file=None, environ={"SANDSHELL_HOME": home})
        s = s.replace(
            sandbox=s.sandbox.replace(workspace_limit=limit, scratch_limit=limit, file_limit=limit, exit_timeout=60.0)
        )
        print("| into | ran | the result's notice | host disk lost (after sync) |")
        print("|---|---|---|---|")
        with Sandbox(workspace=ws, settings=s.sandbox) as sb:
            sb.write_file("/tmp/writer.py", WRITER)
            for where in ("/root/mm", "/app/mm"):
                for _ in range(args.runs):
                    os.sync()
                    before, start = free(ws), time.monotonic()
                    r = sb.execute(f"python3 /tmp/writer.py {where}; echo after", timeout=60)
                    took = time.monotonic() - start
                    os.sync()
                    lost = (before - free(ws)) / 1e6
                    notice = (r.notice or "none").split(":")[0]
                    print(f"| {where} | {took:.1f} s | {notice} | {lost:.0f} MB |")
                    sb.execute(f"rm -rf {where}")
                    time.sleep(1.5)  # a trip seen after the command ended stops the next one
                    sb.execute("true")


if __name__ == "__main__":
    main()
