"""The agent's event loop: one authenticated client, one shell, one command at a time."""

from __future__ import annotations

import hmac
import os
import pwd
import selectors
import signal
import socket
import time
from typing import Any

from . import AGENT_NAME, PROTOCOL_VERSION, files, procs
from .command import Command, Limits
from .frames import FrameError, FrameReader, encode
from .outbox import OutBuffer, Replay
from .shell import Shell

READ_BYTES = 64 * 1024
OUTBUF_HIGH = 1024 * 1024  # stop reading command output while this much waits for the host
REPLAY_BYTES = 4 * 1024 * 1024  # output kept for a host that reconnects mid-command
HANDSHAKE_SECONDS = 5.0


class Config:
    """The agent's settings, passed by the host as environment variables."""

    def __init__(self, env: dict[str, str]) -> None:
        self.token = env.get("SANDSHELL_TOKEN", "")
        self.max_frame = int(env.get("SANDSHELL_MAX_FRAME", str(4 * 1024 * 1024)))
        self.max_timeout = float(env.get("SANDSHELL_MAX_TIMEOUT", "600"))
        self.kill_grace = float(env.get("SANDSHELL_KILL_GRACE", "1.0"))
        self.read_limit = int(env.get("SANDSHELL_READ_LIMIT", str(1024 * 1024)))
        self.state_limit = int(env.get("SANDSHELL_STATE_LIMIT", str(64 * 1024)))
        self.limits = Limits(
            stream=int(env.get("SANDSHELL_OUTPUT_LIMIT", str(1024 * 1024))),
            spill=int(env.get("SANDSHELL_SPILL_LIMIT", str(32 * 1024 * 1024))),
            spill_dir=env.get("SANDSHELL_SPILL_DIR", "/app/.sandshell/output"),
        )
        uid, gid = env.get("SANDSHELL_HOST_UID", ""), env.get("SANDSHELL_HOST_GID", "")
        self.owner = (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() else None
        self.pids_limit = int(env.get("SANDSHELL_PIDS_LIMIT", "0"))
        self.workdir = env.get("SANDSHELL_WORKDIR", "/app")
        self.state_dir = env.get("SANDSHELL_STATE_DIR", "/run/sandshell-agent")


class Agent:
    def __init__(self, listener: socket.socket, cfg: Config) -> None:
        self.cfg = cfg
        self.listener = listener
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ, "accept")
        self.pending: dict[socket.socket, tuple[FrameReader, float]] = {}
        self.client: socket.socket | None = None
        self.reader = FrameReader(cfg.max_frame)
        self.outbuf = OutBuffer()
        self.replay = Replay(REPLAY_BYTES)
        self.cmd: Command | None = None
        self.closed_fds: set[int] = set()
        self.replaced = False
        self.notice: str | None = None
        self.next_pid_check = 0.0
        self.user = pwd.getpwuid(os.getuid()).pw_name if _has_pw(os.getuid()) else str(os.getuid())
        self.host = socket.gethostname()
        home = os.environ.get("HOME") or "/root"
        os.makedirs(cfg.state_dir, mode=0o700, exist_ok=True)
        self.shell = Shell(cfg.state_dir, home, cfg.workdir)
        self._start_shell(restore=False)

    # -- plumbing ----------------------------------------------------------------------------
    def _start_shell(self, restore: bool) -> None:
        self.closed_fds.clear()
        self.replaced = False
        self.shell.start(restore=restore)
        self.sel.register(self.shell.status_r, selectors.EVENT_READ, "status")
        self._watch_output(True)

    def _watch_output(self, on: bool) -> None:
        for fd, name in ((self.shell.stdout_r, "stdout"), (self.shell.stderr_r, "stderr")):
            registered = fd in self.sel.get_map()
            if fd < 0 or fd in self.closed_fds:
                continue
            if on and not registered:
                self.sel.register(fd, selectors.EVENT_READ, name)
            elif not on and registered:
                self.sel.unregister(fd)

    def _stop_shell(self) -> None:
        for fd in (self.shell.status_r, self.shell.stdout_r, self.shell.stderr_r):
            if fd in self.sel.get_map():
                self.sel.unregister(fd)
        self.shell.kill()

    def send(self, frame: dict[str, Any]) -> None:
        data = encode(frame)
        if frame.get("type") in ("output", "exit"):
            self.replay.remember(frame, data)
        if self.client is None:
            return
        self.outbuf.append(data)
        self._flush_client()

    def _flush_client(self) -> None:
        if self.client is None or not self.outbuf:
            return
        try:
            self.outbuf.send_to(self.client)
        except BlockingIOError:
            pass
        except OSError:
            self._drop_client()
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.outbuf else 0)
        self.sel.modify(self.client, events, "client")

    def _drop_client(self) -> None:
        if self.client is not None:
            self.sel.unregister(self.client)
            self.client.close()
        self.client = None
        self.outbuf.clear()

    # -- connections -------------------------------------------------------------------------
    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        conn.setblocking(False)
        try:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)  # fewer wakeups in a flood
        except OSError:
            pass
        self.pending[conn] = (FrameReader(self.cfg.max_frame), time.monotonic() + HANDSHAKE_SECONDS)
        self.sel.register(conn, selectors.EVENT_READ, "pending")

    def _close_pending(self, conn: socket.socket, error: dict[str, Any] | None) -> None:
        if error is not None:
            try:
                conn.send(encode(error))
            except OSError:
                pass
        self.sel.unregister(conn)
        self.pending.pop(conn, None)
        conn.close()

    def _handshake(self, conn: socket.socket) -> None:
        reader, _ = self.pending[conn]
        try:
            data = conn.recv(READ_BYTES)
        except OSError:
            data = b""
        if not data:
            self._close_pending(conn, None)
            return
        for frame in reader.feed(data):
            if isinstance(frame, FrameError) or frame.get("type") != "hello":
                self._close_pending(conn, _error(None, "unauthenticated", "send hello with the session token first"))
                return
            if frame.get("version") != PROTOCOL_VERSION:
                msg = f"protocol version {frame.get('version')!r} is not {PROTOCOL_VERSION}"
                self._close_pending(conn, _error(None, "version", msg))
                return
            token = frame.get("token")
            if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.cfg.token.encode()):
                self._close_pending(conn, _error(None, "unauthenticated", "wrong session token"))
                return
            self._promote(conn, frame.get("resume"))
            return

    def _promote(self, conn: socket.socket, resume: Any) -> None:
        """Make an authenticated connection the client, replacing an older one."""
        self.sel.unregister(conn)
        self.pending.pop(conn, None)
        self._drop_client()
        self.client = conn
        self.reader = FrameReader(self.cfg.max_frame)
        self.sel.register(conn, selectors.EVENT_READ, "client")
        running = self.cmd.id if self.cmd else None
        self.send(
            {
                "type": "hello",
                "version": PROTOCOL_VERSION,
                "agent": AGENT_NAME,
                "pid": os.getpid(),
                "user": self.user,
                "host": self.host,
                "cwd": self.shell.cwd,
                "running": running,
            }
        )
        if isinstance(resume, dict):
            for data in self.replay.after(resume.get("id"), int(resume.get("seq") or 0)):
                self.outbuf.append(data)
            self._flush_client()

    # -- requests ----------------------------------------------------------------------------
    def _on_client(self, mask: int) -> None:
        assert self.client is not None
        if mask & selectors.EVENT_WRITE:
            self._flush_client()
        if not mask & selectors.EVENT_READ or self.client is None:
            return
        try:
            data = self.client.recv(READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop_client()
            return
        for frame in self.reader.feed(data):
            if isinstance(frame, FrameError):
                self.send(_error(None, frame.code, str(frame)))
            else:
                self._handle(frame)

    def _handle(self, frame: dict[str, Any]) -> None:
        kind, rid = frame["type"], frame.get("id")
        if kind == "ping":
            self.send({"type": "pong", "id": rid, "busy": self.cmd is not None})
        elif kind == "run":
            self._run(frame)
        elif kind == "interrupt":
            if self.cmd is not None and (rid is None or rid == self.cmd.id):
                self.cmd.interrupted = True
                self._begin_kill()
        elif kind == "read":
            path = self._path(frame.get("path"))
            if path is None:
                self.send(_error(rid, "bad_request", "read needs a string 'path'"))
                return
            limit = min(int(frame.get("limit") or self.cfg.read_limit), self.cfg.read_limit)
            self.send({"type": "file", "id": rid, **files.read_text(path, limit)})
        elif kind == "write":
            path, content = self._path(frame.get("path")), frame.get("content")
            if path is None or not isinstance(content, str):
                self.send(_error(rid, "bad_request", "write needs a string 'path' and 'content'"))
                return
            result = files.write_text(path, content, bool(frame.get("append")), self._owner_for(path))
            self.send({"type": "written", "id": rid, **result})
        elif kind == "state":
            self.send({"type": "state", "id": rid, **files.model_state(self.cfg.state_limit)})
        elif kind == "hello":
            self.send(_error(rid, "bad_request", "already authenticated"))
        else:
            self.send(_error(rid, "unknown_type", f"unknown frame type {kind!r}"))

    def _path(self, raw: Any) -> str | None:
        if not isinstance(raw, str) or not raw or "\0" in raw:
            return None
        return raw if raw.startswith("/") else os.path.join(self.shell.cwd, raw)

    def _owner_for(self, path: str) -> tuple[int, int] | None:
        inside = path == self.cfg.workdir or path.startswith(self.cfg.workdir.rstrip("/") + "/")
        return self.cfg.owner if inside and os.geteuid() == 0 else None

    def _run(self, frame: dict[str, Any]) -> None:
        rid, command = frame.get("id"), frame.get("command")
        if not isinstance(rid, str) or not isinstance(command, str):
            self.send(_error(rid, "bad_request", "run needs a string 'id' and 'command'"))
            return
        if self.cmd is not None:
            self.send(_error(rid, "busy", f"command {self.cmd.id} is still running"))
            return
        try:
            timeout = min(max(float(frame.get("timeout") or 10.0), 0.1), self.cfg.max_timeout)
        except (TypeError, ValueError):
            self.send(_error(rid, "bad_request", "timeout must be a number"))
            return
        if not self.shell.alive():
            self._stop_shell()
            self._start_shell(restore=True)
        path = os.path.join(self.cfg.state_dir, "cmd")
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(command)
        self.cmd = Command(rid, timeout, procs.snapshot(), self.cfg.limits)
        self.shell.run(path)

    # -- the running command -----------------------------------------------------------------
    def _on_output(self, fd: int, stream: str) -> None:
        try:
            data = os.read(fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(fd)  # every writer closed; a revived shell brings new pipes
            self.closed_fds.add(fd)
            return
        if self.cmd is None:
            return  # a background job printing between commands: nobody asked for it
        self.cmd.feed(stream, data)
        if self.cmd.output_limited and self.cmd.phase is None:
            self._begin_kill()

    def _on_status(self) -> None:
        try:
            status = self.shell.read_status()
        except (EOFError, OSError):
            status = None
            dead = True
        else:
            dead = False
        if status is not None:
            if self.cmd is not None:
                self._drain_output()
                self._finish(status[0], syntax_error=status[2])
            return
        if not dead:
            return
        if self.shell.alive():
            # `exec` replaced the shell with another program: that program is the command now.
            self.sel.unregister(self.shell.status_r)
            self.replaced = True
            return
        self._shell_ended()

    def _shell_ended(self) -> None:
        """The shell exited (exit 3, kill -9 $$, set -e, an exec'd program ended): revive it."""
        code = self.shell.exit_code(wait=0.5)
        if self.cmd is not None:
            self._drain_output()
        self._stop_shell()
        self._start_shell(restore=True)
        if self.cmd is not None:
            self._finish(code, restarted=True, error="the shell exited; a new one started in the same cwd")

    def _drain_output(self) -> None:
        assert self.cmd is not None
        for fd, stream in ((self.shell.stdout_r, "stdout"), (self.shell.stderr_r, "stderr")):
            for _ in range(64):
                try:
                    data = os.read(fd, READ_BYTES)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                self.cmd.feed(stream, data)

    def _begin_kill(self) -> None:
        cmd = self.cmd
        if cmd is None or cmd.phase is not None:
            return
        cmd.phase = "term"
        cmd.phase_deadline = time.monotonic() + self.cfg.kill_grace
        keep = {os.getpid(), 1}
        found = procs.spawned_since(cmd.before, self.shell.pid, keep)
        procs.signal_all(found, signal.SIGTERM)
        if not found:  # a loop inside the shell itself: only a restart ends it
            cmd.phase, cmd.phase_deadline = "kill", time.monotonic() + 0.3

    def _tick(self, now: float) -> None:
        cmd = self.cmd
        if cmd is None:
            return
        if cmd.flush_due(now):
            for frame in cmd.frames():
                self.send(frame)
        if self.replaced and not self.shell.alive():
            self._shell_ended()
            return
        if cmd.phase is None and now >= cmd.deadline:
            cmd.timed_out = True
            self._begin_kill()
        elif cmd.phase == "term" and now >= cmd.phase_deadline:
            procs.kill_all(cmd.before, self.shell.pid, {os.getpid(), 1})
            cmd.phase, cmd.phase_deadline = "kill", now + 0.5
        elif cmd.phase == "kill" and now >= cmd.phase_deadline:
            # Nothing left to kill and still no status: the shell itself is stuck.
            self._drain_output()
            self._stop_shell()
            procs.kill_all(cmd.before, -1, {os.getpid(), 1})
            self._start_shell(restore=True)
            self._finish(
                None, restarted=True, signal="SIGKILL", error="the shell was stuck and was restarted in the same cwd"
            )

    def _finish(self, code: int | None, **extra: Any) -> None:
        cmd = self.cmd
        assert cmd is not None
        for frame in cmd.frames(final=True):
            self.send(frame)
        if self.cfg.owner is not None and os.geteuid() == 0 and self.cfg.owner != (0, 0):
            files.fix_ownership(self.cfg.workdir, *self.cfg.owner)  # root's files are root's already
        self.cmd = None
        if self.notice:
            extra["notice"], self.notice = self.notice, None
        self.send(cmd.result(code, self.shell.cwd, self.user, self.host, **extra))

    def _watch_pids(self, now: float) -> None:
        """Near the container's process limit (a fork bomb, even in the background): kill them all."""
        if not self.cfg.pids_limit or now < self.next_pid_check:
            return
        self.next_pid_check = now + 0.5
        count = sum(1 for name in os.listdir("/proc") if name.isdigit())
        if count < self.cfg.pids_limit * 3 // 4:
            return
        killed = procs.kill_all(set(), self.shell.pid, {os.getpid(), 1})
        self.notice = (
            f"{count} processes reached the limit of {self.cfg.pids_limit}: "
            f"{killed} processes started from the shell were killed"
        )
        if self.cmd is not None and self.cmd.phase is None:
            self._begin_kill()

    # -- loop --------------------------------------------------------------------------------
    def _timeout(self) -> float:
        now = time.monotonic()
        waits = [1.0]
        if self.cmd is not None:
            c = self.cmd
            waits.append((c.phase_deadline if c.phase else c.deadline) - now)
            if c.pending_since is not None:
                waits.append(c.pending_since + 0.05 - now)
        waits += [deadline - now for _, deadline in self.pending.values()]
        return max(0.0, min(waits))

    def serve_forever(self) -> None:
        while True:
            self._watch_output(len(self.outbuf) < OUTBUF_HIGH)
            for key, mask in self.sel.select(self._timeout()):
                what = key.data
                if what == "accept":
                    self._accept()
                elif what == "pending":
                    self._handshake(key.fileobj)  # type: ignore[arg-type]
                elif what == "client":
                    self._on_client(mask)
                elif what == "status":
                    self._on_status()
                elif key.fd in (self.shell.stdout_r, self.shell.stderr_r):
                    self._on_output(key.fd, what)
            now = time.monotonic()
            for conn, (_, deadline) in list(self.pending.items()):
                if now > deadline:
                    self._close_pending(conn, _error(None, "unauthenticated", "no hello in time"))
            self._watch_pids(now)
            self._tick(now)


def _error(rid: Any, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": rid, "code": code, "message": message}


def _has_pw(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False
