"""Sandbox benchmarks: round trip, throughput and host memory, against `docker exec` on the same container.

Run: .venv/bin/python bench/sandbox_bench.py [--runs 200] [--mb 100] [--gb 1]
     [--tls-engine | --ssh-engine]
--tls-engine runs it all on a second dockerd on 127.0.0.1 with mutual TLS (tests/engines.py), the
workspace copied in through the API; `docker exec` then goes there too (DOCKER_HOST, DOCKER_CERT_PATH).
--ssh-engine reaches the machine's engine through an sshd of its own on 127.0.0.1 (ssh://, tests/engines.py),
`docker exec` too (DOCKER_HOST=ssh://..., the same `ssh`).
`--mb 0` / `--gb 0` leave out the flood and the memory measure. The round trips of sandshell and of the
bash pipe alternate in blocks of 50, so both see the same load; then a quarter as many of each again,
one every 20 ms, as a session driven by a model sends them. Prints a Markdown table (paste into
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from sandshell import config
from sandshell.sandbox.protocol import Output
from sandshell.sandbox.sandbox import Sandbox


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


BLOCK = 50  # round trips of each kind in turn: the machine's load drifts, and both see the same


def round_trips(sb: Sandbox, runs: int, settle: float) -> tuple[list[float], list[float], list[float], list[float]]:
    """`true` through sandshell and through the bash pipe, in alternating blocks; then `docker exec`.
    The first `settle` seconds after the start are timed apart (`early`): the agent's first full
    measure of the container's files (~0.2 s of CPU, disk watchdog) runs then, and the engine has
    just started the pipe's `docker exec`."""
    agent: list[float] = []
    early: list[float] = []
    cli: list[float] = []
    pipe = BashPipe(sb)
    end = time.monotonic() + settle
    while len(early) < 5 or time.monotonic() < end:  # (five at least: the first of each are cold)
        t = time.perf_counter()
        sb.execute("true")
        early.append(time.perf_counter() - t)
        pipe.round_trip()
    del pipe.times[:]
    for done in range(0, runs, BLOCK):
        for _ in range(min(BLOCK, runs - done)):
            t = time.perf_counter()
            sb.execute("true")
            agent.append(time.perf_counter() - t)
        for _ in range(min(BLOCK, runs - done)):
            pipe.round_trip()
    pipe.close()
    for _ in range(max(20, runs // 5)):  # docker exec is ~100x slower: fewer runs say as much
        t = time.perf_counter()
        subprocess.run(["docker", "exec", sb.container.id, "true"], check=True)
        cli.append(time.perf_counter() - t)
    return agent, pipe.times, cli, early


class BashPipe:
    """The floor: one bash kept open with `docker exec -i`, a sentinel echoed after each command."""

    def __init__(self, sb: Sandbox) -> None:
        self.proc = subprocess.Popen(
            ["docker", "exec", "-i", sb.container.id, "bash"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self.times: list[float] = []

    def round_trip(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        sentinel = f"__done{len(self.times)}__".encode()
        t = time.perf_counter()
        self.proc.stdin.write(b"true; echo " + sentinel + b"\n")
        buf = b""
        while sentinel not in buf:
            got = os.read(self.proc.stdout.fileno(), 4096)
            if not got:
                raise SystemExit(f"the bash pipe's bash ended (exit {self.proc.wait()}); the bench cannot go on")
            buf += got
        self.times.append(time.perf_counter() - t)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


INSIDE = r"""
import json, os, subprocess, sys, time
from sandshell_agent import PROTOCOL_VERSION
env = dict(os.environ, SANDSHELL_STATE_DIR="/run/sandshell-agent/bench", SANDSHELL_WORKDIR="/tmp")
p = subprocess.Popen([sys.executable, "-m", "sandshell_agent", "--stdio"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0)
buf = b""
def frame(kind):
    global buf
    while True:
        nl = buf.find(b"\n")
        if nl < 0:
            buf += os.read(p.stdout.fileno(), 65536)
            continue
        f, buf = json.loads(buf[:nl]), buf[nl + 1:]
        if f.get("type") == kind:
            return f
p.stdin.write(json.dumps({"type": "hello", "version": PROTOCOL_VERSION}).encode() + b"\n")
frame("hello")
trips, shell = [], []
for i in range(int(sys.argv[1]) + 5):
    t = time.perf_counter()
    p.stdin.write(json.dumps({"type": "run", "id": str(i), "command": "true", "timeout": 10}).encode() + b"\n")
    f = frame("exit")
    trips.append(time.perf_counter() - t)
    shell.append(f.get("duration", 0))  # (left out when it rounds to 0)
print(json.dumps({"trip": sorted(trips[5:])[len(trips[5:]) // 2], "shell": sorted(shell[5:])[len(shell[5:]) // 2]}))
p.stdin.close()
p.wait()
"""


def spaced_round_trips(sb: Sandbox, runs: int, gap: float = 0.02) -> tuple[float, float]:
    """Medians of `true` through sandshell and through the bash pipe, one every `gap` seconds in turn,
    as a session driven by a model sends them (its turns take seconds): every process on the way has
    gone to sleep, and its caches cold, when the command comes. The target's measure sends them back to back."""
    pipe, agent = BashPipe(sb), []
    pipe.round_trip()  # (its first, as a new `docker exec -i` starts, is not counted)
    del pipe.times[:]
    for _ in range(runs):
        time.sleep(gap)
        t = time.perf_counter()
        sb.execute("true")
        agent.append(time.perf_counter() - t)
        time.sleep(gap)
        pipe.round_trip()
    pipe.close()
    return statistics.median(agent), statistics.median(pipe.times)


def inside_round_trips(sb: Sandbox, runs: int) -> tuple[float, float]:
    """Where the time goes: a second agent started inside the same container on plain pipes, asked
    the same (no engine, no host library); its own `duration` is the shell's part."""
    out = subprocess.run(
        ["docker", "exec", "-i", sb.container.id, "python3", "-", str(runs)], input=INSIDE.encode(), capture_output=True
    )
    if out.returncode:
        raise SystemExit(f"the in-container agent failed: {out.stderr.decode()[-2000:]}")
    got = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return got["trip"], got["shell"]


def first_byte(sb: Sandbox, rounds: int = 10) -> list[float]:
    """From asking for `echo hi; sleep 0.3; echo bye` to its first output on the host."""
    out = []
    for _ in range(rounds):
        start, first = time.perf_counter(), None
        for event in sb.stream("echo hi; sleep 0.3; echo bye", timeout=10):
            if isinstance(event, Output) and first is None:
                first = time.perf_counter() - start
        assert first is not None
        out.append(first)
    return out


def throughput(sb: Sandbox, mb: int, rounds: int = 5) -> tuple[float, float]:
    """MB/s through the agent and through `docker exec`, alternating; medians (the machine is noisy)."""
    command = f"head -c {mb}M /dev/zero | tr '\\0' 'x' | fold -w 99"
    agent, cli = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        got = sum(len(e.data) for e in sb.stream(command, timeout=300) if isinstance(e, Output))
        agent.append(mb / (time.perf_counter() - t))
        assert got >= mb * 1024 * 1024, got
        t = time.perf_counter()
        proc = subprocess.Popen(["docker", "exec", sb.container.id, "bash", "-c", command], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        total = 0
        while chunk := proc.stdout.read(1 << 16):
            total += len(chunk)
        proc.wait()
        cli.append(mb / (time.perf_counter() - t))
        assert total >= mb * 1024 * 1024, total
    return statistics.median(agent), statistics.median(cli)


SETID_CHMODS = """
import os, time
p = "/tmp/bench-chmod"; open(p, "w").close()
def each(mode, n=2000):
    t = time.perf_counter()
    for _ in range(n):
        os.chmod(p, mode)
    return (time.perf_counter() - t) / n
print(each(0o755), each(0o4755))
"""


def setid_chmods(sb: Sandbox) -> tuple[float, float]:
    """Seconds per chmod inside: a plain one, and one asking for a set-uid bit (the agent's guard makes it)."""
    r = sb.execute(f"python3 - <<'PY'\n{SETID_CHMODS}\nPY", timeout=60)
    plain, setid = (float(x) for x in r.output.split())
    return plain, setid


def peak_rss(sb: Sandbox, gb: int) -> tuple[float, float, float]:
    me = psutil.Process()
    before = me.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], me.memory_info().rss)
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()
    t = time.perf_counter()
    got = sum(
        len(e.data) for e in sb.stream(f"head -c {gb}G /dev/zero | tr '\\0' 'y'", timeout=600) if isinstance(e, Output)
    )
    seconds = time.perf_counter() - t
    done.set()
    assert got >= gb * 1024**3, got
    return before / 2**20, peak[0] / 2**20, seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--gb", type=int, default=1)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds after the start timed apart (see round_trips)")
    ap.add_argument("--tls-engine", action="store_true", help="on a second dockerd with mutual TLS")
    ap.add_argument("--ssh-engine", action="store_true", help="on this machine's engine through ssh://")
    ap.add_argument("--shell-loop", default="auto", choices=["auto", "off"], help="off: the bash functions alone")
    ap.add_argument("--agent-code", default="compiled", choices=["compiled", "source"], help="source: not compiled")
    ap.add_argument("--shell-cpu", default="any", choices=["any", "shared"], help="shared: agent and bash on one CPU")
    args = ap.parse_args()
    settings = config.load(env_file=None, environ={})
    settings = settings.replace(sandbox=settings.sandbox.replace(output_limit=0, spill_limit=0, max_exit_timeout=600))
    settings = settings.replace(
        sandbox=settings.sandbox.replace(
            shell_loop=args.shell_loop, agent_code=args.agent_code, shell_cpu=args.shell_cpu
        )
    )
    if not args.tls_engine and not args.ssh_engine:
        return run(settings, args)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests.engines
    from tests import engines

    if args.ssh_engine:
        with tempfile.TemporaryDirectory() as base, engines.ssh_engine(Path(base)) as sshd:
            os.environ.update(DOCKER_HOST=sshd.url, PATH=f"{sshd.shim()}:{os.environ['PATH']}")  # docker exec too
            print(f"(on this machine's engine through ssh at {sshd.url})")
            return run(settings.replace(sandbox=settings.sandbox.replace(docker_host=sshd.url)), args)

    with tempfile.TemporaryDirectory() as base, engines.tls_engine(Path(base)) as e:
        os.environ.update(DOCKER_HOST=e.url, DOCKER_TLS_VERIFY="1", DOCKER_CERT_PATH=str(e.certs))  # docker exec
        print(f"(on a second dockerd at {e.url}, mutual TLS)")
        run(settings.replace(sandbox=settings.sandbox.replace(docker_host=e.url, docker_tls=str(e.certs))), args)


def run(settings: config.Settings, args: argparse.Namespace) -> None:
    if os.environ.get("BENCH_NO_DISK_LIMITS"):  # the cost of the disk watchdog: compare with and without
        settings = settings.replace(sandbox=settings.sandbox.replace(workspace_limit=0, scratch_limit=0, file_limit=0))
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        agent, pipe, cli, early = round_trips(sb, args.runs, args.settle)
        spaced = spaced_round_trips(sb, max(20, args.runs // 4))
        inside, shell = inside_round_trips(sb, args.runs)
        first = first_byte(sb)
        a_mbs, c_mbs = throughput(sb, args.mb) if args.mb else (0.0, 0.0)
        rss0, rss1, secs = peak_rss(sb, args.gb) if args.gb else (0.0, 0.0, 0.0)
        plain, setid = setid_chmods(sb)
    ms = 1000
    print("| measure | sandshell agent | docker exec | ratio |")
    print("|---|---|---|---|")
    a_med, c_med = statistics.median(agent), statistics.median(cli)
    print(
        f"| `true` round trip, median | {a_med * ms:.2f} ms | {c_med * ms:.1f} ms "
        f"| {statistics.median(cli) / statistics.median(agent):.0f}x faster |"
    )
    print(
        f"| `true` round trip, p95 | {pct(agent, 0.95) * ms:.2f} ms | {pct(cli, 0.95) * ms:.1f} ms "
        f"| {pct(cli, 0.95) / pct(agent, 0.95):.0f}x faster |"
    )
    p_med = statistics.median(pipe)
    print(
        f"| `true` round trip against one bash kept open by `docker exec -i` (median) | {a_med * ms:.2f} ms "
        f"| {p_med * ms:.2f} ms | {a_med / p_med:.2f}x slower |"
    )
    print(
        f"| the same, one every 20 ms as a model's session sends them (median) | {spaced[0] * ms:.2f} ms "
        f"| {spaced[1] * ms:.2f} ms | {spaced[0] / spaced[1]:.2f}x slower |"
    )
    if early:
        print(
            f"| `true` round trip in the first {args.settle:g} s after the start ({len(early)} runs, median) "
            f"| {statistics.median(early) * ms:.2f} ms | | |"
        )
    print(
        f"| of which inside the container: agent + bash on plain pipes (median) | {inside * ms:.2f} ms "
        f"| | the command's own duration in the agent (bash, mostly) {shell * ms:.2f} ms; "
        f"the engine's hop and the host library {(a_med - inside) * ms:.2f} ms |"
    )
    print(
        f"| first byte of `echo hi; sleep 0.3; echo bye` (median, worst of {len(first)}) "
        f"| {statistics.median(first) * ms:.1f} ms, {max(first) * ms:.1f} ms | | |"
    )
    if args.mb:
        print(
            f"| {args.mb} MB of output to the host (median of 5) | {a_mbs:.0f} MB/s | {c_mbs:.0f} MB/s "
            f"| {a_mbs / c_mbs:.2f}x |"
        )
    if args.gb:
        print(f"| host RSS while {args.gb} GB streams ({secs:.0f} s) | {rss0:.0f} MB before, {rss1:.0f} MB peak | | |")
    print(
        f"| a chmod inside (2,000 in a loop): plain, and asking for a set-uid bit (through the agent's guard) "
        f"| {plain * 1e6:.1f} µs, {setid * 1e6:.0f} µs | | |"
    )


if __name__ == "__main__":
    main()
