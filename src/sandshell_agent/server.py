"""The agent's event loop: requests from the host's channel dispatched to the shell and the files."""

from __future__ import annotations

import base64
import math
import os
import pwd
import selectors
import signal
import socket
import time
from typing import Any

from . import AGENT_NAME, compiled, cpus, ferry, files, listing, procs
from .channel import error
from .diskguard import DiskGuard
from .execution import Runner
from .frames import FrameError, refusal
from .pace import EagerPoll
from .poller import Poller
from .settings import Config
from .shell import LONG_CWD, Shell, loop_loads
from .stdio import StdioChannel
from .watchdog import OomScoreWatch, PidWatchdog

OUTBUF_HIGH = 1024 * 1024  # stop reading command output while this much waits for the host
SHELL_KEYS = ("status", "stdout", "stderr")
SETTLE_SECONDS = 0.001  # how long the agent waits for a command that just started before its loop goes on
SPIN_SECONDS = 0.0003  # ... of which without sleeping (`_settle`)


class Agent:
    def __init__(self, cfg: Config, stdio: tuple[int, int]) -> None:
        """Serve the host on stdin/stdout (`stdio`: the descriptors `stdio.seal` moved them to)."""
        self.cfg = cfg
        self.sel = Poller()
        self.channel = StdioChannel(*stdio, self.sel, cfg.max_frame, self._hello)
        self.pid1 = os.getpid() == 1  # then orphans are ours to reap
        uid = os.getuid()
        user = pwd.getpwuid(uid).pw_name if _has_pw(uid) else str(uid)
        home = os.environ.get("HOME") or "/root"
        os.makedirs(cfg.state_dir, mode=0o700, exist_ok=True)
        loop = cfg.shell_loop and loop_loads()
        self.cpus = cpus.Home(shared=loop and cfg.shared_cpu)
        shell = Shell(cfg.state_dir, home, cfg.workdir, cfg.file_limit, loop, self.cpus)
        self.runner = Runner(
            self.sel,
            self.channel.send,
            shell,
            cfg.limits,
            cfg.kill_grace,
            cfg.workdir,
            cfg.owner,
            (user, socket.gethostname()),
        )
        self.watchdog = PidWatchdog(cfg.pids_limit)
        self.oom = OomScoreWatch()
        self.disk = DiskGuard(
            cfg.workspace_limit, cfg.scratch_limit, lambda: self.runner.shell.pid, lambda: self.runner.cmd is not None
        )
        self.sel.register(self.disk.wake_r, selectors.EVENT_READ, "disk")
        self.quick = True  # the last command ended within SPIN_SECONDS (`_settle`)
        self.next = EagerPoll()  # whether the loop looks for the next request without sleeping

    @property
    def shell(self) -> Shell:
        return self.runner.shell

    def _hello(self) -> dict[str, Any]:
        r = self.runner
        running = r.cmd.id if r.cmd else None
        return {
            "agent": AGENT_NAME,
            "pid": os.getpid(),
            "user": r.user,
            "host": r.host,
            "cwd": r.shell.shown_cwd,
            "running": running,
            "shell": "loop" if r.shell.loop else "wrapper",
            "code": "compiled" if compiled(__name__) else "source",
        }

    # -- requests ----------------------------------------------------------------------------
    def _handle(self, frame: dict[str, Any]) -> None:
        send = self.channel.send
        if not isinstance(frame.get("id"), str | int | float | None):  # echoed in the reply: a list nested
            frame["id"] = None  # as deep as the parser takes could not be encoded again (RecursionError)
        kind, rid = frame["type"], frame.get("id")
        if kind == "ping":
            send({"type": "pong", "id": rid, "busy": self.runner.cmd is not None})
        elif kind == "run":
            self._run(frame)
        elif kind == "interrupt":
            self.runner.interrupt(rid)
        elif kind in ("read", "write"):
            self._file(kind, rid, frame)
        elif kind == "state":
            send({"type": "state", "id": rid, **files.model_state(self.cfg.state_limit)})
        elif kind == "list":
            self._list(rid)
        elif kind in ferry.KINDS:  # the workspace through the channel (a pod's)
            send({"type": kind, "id": rid, **ferry.handle(kind, frame, self.cfg.workdir, self.cfg.owner)})
        elif kind == "ack":
            self.channel.window.ack(rid, frame.get("seq"))
        elif kind == "hello":
            send(error(rid, "bad_request", "already authenticated"))
        else:
            send(error(rid, "unknown_type", f"unknown frame type {kind!r}"))

    def _file(self, kind: str, rid: Any, frame: dict[str, Any]) -> None:
        raw, content = frame.get("path"), frame.get("content", "")
        if not isinstance(raw, str) or not isinstance(content, str):
            self.channel.send(error(rid, "bad_request", f"{kind} needs a string 'path' (and 'content' for a write)"))
            return
        why = refusal("path", raw) or (refusal("content", content) if kind == "write" else None)
        if why:
            self.channel.send(error(rid, "bad_request", why))
            return
        if not raw.startswith("/") and not self.shell.cwd:  # (joined to "", it was the agent's own cwd)
            self.channel.send(error(rid, "bad_request", f"the shell is in {LONG_CWD}: give {raw!r} as a full path"))
            return
        path = raw if raw.startswith("/") else os.path.join(self.shell.cwd, raw)
        if kind == "read":
            try:
                limit = min(int(frame.get("limit") or self.cfg.read_limit), self.cfg.read_limit)
            except (TypeError, ValueError, OverflowError):
                self.channel.send(error(rid, "bad_request", "a read's 'limit' is a number of bytes"))
                return
            self.channel.send({"type": "file", "id": rid, **files.read_text(path, max(limit, 0))})
        else:
            result = files.write_text(path, content, bool(frame.get("append")), self._owner_for(path))
            self.channel.send({"type": "written", "id": rid, **result})

    def _list(self, rid: Any) -> None:
        """The workspace listed for the host's quick copy back (listing.py): base64 parts, the last one
        `more: false`; an error when a bound was reached or a folder could not be read."""
        try:
            records = listing.walk(self.cfg.workdir)
        except (listing.TooBig, OSError) as e:
            why = str(e) if isinstance(e, listing.TooBig) else f"a folder could not be read ({e.strerror})"
            self.channel.send(error(rid, "unlisted", why))
            return
        parts = [records[i : i + listing.PART] for i in range(0, len(records), listing.PART)] or [b""]
        for n, part in enumerate(parts):
            data = base64.b64encode(part).decode("ascii")
            self.channel.send({"type": "listing", "id": rid, "data": data, "more": n < len(parts) - 1})

    def _owner_for(self, path: str) -> tuple[int, int] | None:
        inside = path == self.cfg.workdir or path.startswith(self.cfg.workdir.rstrip("/") + "/")
        return self.cfg.owner if inside and os.geteuid() == 0 else None

    def _run(self, frame: dict[str, Any]) -> None:
        rid, command = frame.get("id"), frame.get("command")
        if not isinstance(rid, str) or not isinstance(command, str):
            self.channel.send(error(rid, "bad_request", "run needs a string 'id' and 'command'"))
            return
        if self.runner.cmd is not None:
            self.channel.send(error(rid, "busy", f"command {self.runner.cmd.id} is still running"))
            return
        why = refusal("command", command)
        if why:
            self.channel.send(error(rid, "bad_request", why))
            return
        try:
            timeout = float(frame.get("timeout") or 10.0)
        except (TypeError, ValueError, OverflowError):
            timeout = math.nan
        if not math.isfinite(timeout):
            self.channel.send(error(rid, "bad_request", "timeout must be a finite number of seconds"))
            return
        self.cpus.keep(True)
        self.next.request(time.monotonic())
        with self.disk.tripping:  # a trip under way ends first; its news goes with this command as past news
            self._watch(time.monotonic(), starting=True)
            self.runner.run(rid, command.encode(), min(max(timeout, 0.1), self.cfg.max_timeout))
        self._settle()

    def _settle(self) -> None:
        """Most commands end within a millisecond: wait that long for this one here, taking its output
        and its status as they come, so its result goes out without a turn of the loop (~0.1 ms of
        the agent's own work, where the loop's upkeep ran first). Anything else the loop waits on
        (the host, the disk watchdog) ends the wait, and the loop takes it all from there.
        For its first SPIN_SECONDS it looks without sleeping (waking a process costs this VM tens of
        µs), if the last command ended within that time: in a loop of commands a little longer every
        look was in vain (the agent's CPU doubled, its CPU limit held it back; docs/benchmarks.md)."""
        runner, shell = self.runner, self.runner.shell
        start = time.monotonic()
        until, spin_until = start + SETTLE_SECONDS, start + (SPIN_SECONDS if self.quick else 0.0)
        self.quick = False  # (a command still running when this wait ends was not quick)
        while runner.cmd is not None and (left := until - (now := time.monotonic())) > 0:
            if now < spin_until:
                ready = self.sel.select(0)
                if not ready:
                    os.sched_yield()  # (bash may be waiting for this CPU)
                    continue
            else:
                ready = self.sel.select(left)  # (the loop's own selector: one system call, nothing to set up)
            if not ready or any(key.data not in SHELL_KEYS for key, _ in ready):
                return  # nothing yet, or something of the loop's
            for key, _ in ready:
                if key.data == "status":
                    self.quick = time.monotonic() < start + SPIN_SECONDS
                    self._watch(time.monotonic(), ending=True)
                    runner.on_status(drained=len(ready) == 1)
                    if _idle(runner) and shell.loop:  # its save ends in a moment: heard now, not on a turn
                        shell.status.wait_saved(SETTLE_SECONDS)
                    return
                if self.sel.get_map().get(key.fd) is key:  # (not unregistered by the one before it)
                    runner.on_output(key.fd, key.data)
            runner.tick(time.monotonic())

    # -- loop --------------------------------------------------------------------------------
    def _timeout(self, now: float) -> float:
        waits = [1.0, *(d - now for d in self.channel.deadlines())]
        command = self.runner.wait_seconds(now)
        if command is not None:
            waits.append(command)
        return max(0.0, min(waits))

    def _watch(self, now: float, ending: bool = False, starting: bool = False) -> None:
        """The watchdogs' news: the running command's, or, between commands, the background's for the next result.
        `starting`: a command is about to start: the process count is read now (one read of the
        cgroup's counter), so a fork bomb left in the background is stopped as the background's,
        not in the middle of the next command."""
        runner = self.runner
        # As a command ends its process count is checked, unless it started no process at all.
        stop = runner.cmd is not None and runner.cmd.phase is None and not ending  # (woken by begin_kill below)
        before = runner.cmd.before if runner.cmd is not None else None
        force = (ending and runner.alive.moved()) or starting
        notice = self.watchdog.check(now, runner.shell.pid, force=force, stop=stop, before=before)
        oom = self.oom.check() if ending or runner.cmd is None else None  # (as the others' news: nothing to stop)
        disk = self.disk.take()
        if disk is not None and (runner.cmd is None or ending):  # the shell itself is done: it goes on
            procs.signal_all([runner.shell.pid], signal.SIGCONT)
        for news in (notice, disk, oom):
            if news is None:
                continue
            if runner.cmd is None:
                runner.background.append(news)
                del runner.background[:-4]
                continue
            runner.notice = "; ".join(n for n in (runner.notice, news) if n)
            if runner.cmd.phase is None and not ending:
                runner.begin_kill()

    def _next_events(self) -> list[tuple[selectors.SelectorKey, int]]:
        """The loop's next events; while commands come back to back, looked for without sleeping first (pace.py)."""
        now = time.monotonic()
        look = self.next.idle(now, self.quick) if self.runner.cmd is None else 0.0
        while look and time.monotonic() < now + look:
            if ready := self.sel.select(0):
                return ready
            os.sched_yield()
        return self.sel.select(self._timeout(time.monotonic()))

    def serve_forever(self) -> None:
        channel, runner = self.channel, self.runner
        while True:
            # No host, or a host behind: the command waits on its writes; its output is never dropped.
            flowing = channel.client is not None and len(channel.outbuf) < OUTBUF_HIGH and channel.window.open()
            runner.watch_output(flowing)
            for key, mask in self._next_events():
                if self.sel.get_map().get(key.fd) is not key:
                    continue  # unregistered (or its number reused) by an event before it in this turn
                what = key.data
                if what == "flush":
                    channel.flush()
                elif what == "client":
                    for frame in channel.receive(mask):
                        if isinstance(frame, FrameError):
                            channel.send(error(None, frame.code, str(frame)))
                        else:
                            self._handle(frame)
                elif what == "control":
                    runner.give_input()
                elif what == "exit":
                    runner.on_exit(key)
                elif what == "disk":
                    pass  # the disk watchdog tripped: taken below, with the other watchdog
                elif what == "status":
                    if runner.cmd is not None:  # what happened during it is its news
                        self._watch(time.monotonic(), ending=True)
                    runner.on_status()
                elif what in ("stdout", "stderr"):
                    runner.on_output(key.fd, what)
            now = time.monotonic()
            channel.expire(now)
            self._watch(now)
            runner.tick(now)
            if self.pid1:
                procs.reap_orphans(keep=runner.shell.pid)
            self.cpus.keep(runner.cmd is None)  # (a command that runs on: its output read where there is room)


def _idle(runner: Runner) -> bool:
    """No command running. (A call, not `cmd is None`: the type checker keeps a test of `cmd` true
    across the calls that end the command, and the compiled agent then checks it as a Command.)"""
    return runner.cmd is None


def _has_pw(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False
