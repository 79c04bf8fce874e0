"""Soak: N commands in a row through one session (quick ones, floods, timeouts, failures, restarts).

Host file descriptors, threads and memory, and the agent's memory and the container's zombies,
are sampled every 200 commands. Run: .venv/bin/python bench/soak.py [--commands 2000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil

from sandshell import config
from sandshell.model.script import ScriptBackend
from sandshell.runner import SessionSpec, open_session
from sandshell.sandbox.sandbox import Sandbox
from sandshell.session import events
from sandshell.session.control import Control

MIX = [
    ("quick", "echo {i}"),
    ("quick", "cd /tmp && export N{i}={i} && pwd"),
    ("fail", "ls /nope-{i}"),
    ("quick", "python3 -c 'print({i} * 2)'"),
    ("flood", "yes {i} | head -c 3000000"),
    ("quick", "seq 1 {i} | tail -1"),
    ("syntax", 'echo "unterminated {i}'),
    ("quick", "true # {i}"),
    ("fail", "(exit 3) # {i}"),
    ("quick", "ls -la /app > /dev/null; echo ok {i}"),
    ("quick", "head -c 1000 /dev/urandom | wc -c # {i}"),
    ("quick", "date +%s # {i}"),
    ("quick", "sleep 0.01; echo slept {i}"),
    ("quick", "grep -c root /etc/passwd # {i}"),
    ("quick", "f{i}() {{ echo fn; }}; f{i}"),
    ("quick", "printf 'a\\nb\\n' | sort -r # {i}"),
    ("quick", "echo $PWD {i}"),
    ("quick", "stat -c %s /etc/hostname # {i}"),
    ("quick", "uname -r # {i}"),
    ("timeout", "sleep 30 # {i}"),
]


class Probe:
    """Samples resources every `every` finished actions."""

    def __init__(self, sandbox: Sandbox, every: int) -> None:
        self.sandbox = sandbox
        self.every = every
        self.done = 0
        self.rows: list[dict[str, float]] = []
        self.me = psutil.Process()

    def emit(self, event: events.Event) -> None:
        if isinstance(event, events.ActionFinished):
            self.done += 1
            if self.done % self.every == 0 or self.done == 1:
                self.sample()

    def sample(self) -> None:
        agent_pid = self.sandbox.hello.get("pid")
        top = self.sandbox.container.top(ps_args="-eo pid,stat,rss,args")
        procs = top.get("Processes") or []
        titles = top.get("Titles") or []
        i_stat, i_rss = titles.index("STAT"), titles.index("RSS")
        agent_rss = zombies = 0
        for row in procs:
            if "Z" in row[i_stat]:
                zombies += 1
            if "sandshell_agent" in " ".join(row) and "docker-init" not in " ".join(row):
                agent_rss = max(agent_rss, int(row[i_rss]))
        self.rows.append(
            {
                "commands": self.done,
                "host_rss_mb": self.me.memory_info().rss / 2**20,
                "host_fds": self.me.num_fds(),
                "host_threads": self.me.num_threads(),
                "agent_rss_mb": agent_rss / 1024,
                "zombies": zombies,
                "container_procs": len(procs),
                "agent_pid": agent_pid or 0,
            }
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=2000)
    args = ap.parse_args()
    answers = [json.dumps({"bash": MIX[i % len(MIX)][1].format(i=i), "timeout": 1}) for i in range(args.commands)]
    kinds: dict[str, int] = {}
    for i in range(args.commands):
        kinds[MIX[i % len(MIX)][0]] = kinds.get(MIX[i % len(MIX)][0], 0) + 1
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        s = config.load(env_file=None, environ={})
        s = s.replace(
            sandbox=s.sandbox.replace(workspace=str(ws), exit_timeout=1.0, kill_grace=0.3),
            session=s.session.replace(
                sessions_dir=str(Path(tmp) / "sessions"), max_steps=args.commands, repeat_limit=0
            ),
            model=s.model.replace(intro=False),
        )
        backend = ScriptBackend(answers)
        start = time.monotonic()
        with open_session(SessionSpec(s, "soak", backend, control=Control(), log=lambda m: None)) as session:
            probe = Probe(session.sandbox, 200)
            session.sinks.append(probe)
            outcome = session.run()
            probe.sample()
        seconds = time.monotonic() - start
    print(
        f"{args.commands} commands ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}) in {seconds:.0f} s; "
        f"session ended: {outcome.status}"
    )
    print()
    print("| after N commands | host RSS | host fds | host threads | agent RSS | zombies | processes in container |")
    print("|---|---|---|---|---|---|---|")
    for r in probe.rows:
        print(
            f"| {r['commands']:.0f} | {r['host_rss_mb']:.1f} MB | {r['host_fds']:.0f} | {r['host_threads']:.0f} "
            f"| {r['agent_rss_mb']:.1f} MB | {r['zombies']:.0f} | {r['container_procs']:.0f} |"
        )


if __name__ == "__main__":
    main()
