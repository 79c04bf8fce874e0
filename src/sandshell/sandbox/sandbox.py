"""The sandbox: a hardened, labelled container with the agent inside, and the API to use it
(`execute`, `stream`, `read_file`, `write_file`, `state`; see the README)."""

from __future__ import annotations

import base64
import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from sandshell.config import SandboxSettings, SessionSettings
from sandshell.errors import ProtocolError, SandboxDied, SandboxError
from sandshell.sandbox import boxes, delta, engine, ferry, transfer
from sandshell.sandbox.connection import Connection, ConnectionLost
from sandshell.sandbox.container import ContainerSpec
from sandshell.sandbox.protocol import FileContent, ModelState, Output, OutputCollector, Result, number, refusal

Event = Output | Result
ACK_EVERY = 8  # output frames; the agent's window is 32
RETRIES, SILENCE = 5, 15.0  # reconnects in one command; seconds past its timeout and grace until an agent is silent
EPISODE = 60.0  # seconds after a reconnect from which a drop counts afresh (a long command over a flaky link)


class Sandbox:
    """One session's container and its agent. Thread-safe: one operation at a time, interrupt any time."""

    def __init__(
        self,
        workspace: str | Path | None = None,
        settings: SandboxSettings | None = None,
        session_id: str | None = None,
        log: Callable[[str], None] = lambda _m: None,
        recording: SessionSettings | None = None,
    ) -> None:
        from sandshell import config

        self.settings = settings or config.load().sandbox  # (a relative workspace is in SANDSHELL_HOME, as all paths)
        self.workspace = self.settings.path(str(workspace if workspace is not None else self.settings.workspace))
        self.session_id, self.log = session_id or engine.new_session_id(), log
        # What the model left for host tools goes beside the session's recording.
        recording = recording or SessionSettings(home=self.settings.home)
        self.quarantine = recording.path(recording.sessions_dir) / self.session_id / "quarantine"
        self.container: Any = None
        self.conn: Connection | None = None
        self.hello: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._running: str | None = None
        self._docker: Any = None  # the engine's client: docker-py's, or a kube.Cluster
        self._spec: ContainerSpec | None = None
        self._sync: transfer.Sync | ferry.Sync = transfer.Sync(self.workspace, self.settings, log, self._listing)

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        try:
            self.start()
        except BaseException:
            self.kill()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.kill()

    def start(self) -> None:
        """Build the image if needed, start the container (or pod) and connect to the agent."""
        if self.settings.engine == "kubernetes":
            self._docker, self.container, self.conn = boxes.start_pod(
                self._docker, self.settings, self.workspace, self.session_id, self.log
            )
            self._sync = ferry.Sync(self.workspace, self.settings, self.log, self._ask)
        else:
            self._docker, self._spec, self.container, self.conn = boxes.start_container(
                self._docker, self.settings, self.workspace, self.session_id, self.log, self.quarantine
            )
        self._connect(resume=None, wait=15.0)
        self._sync.begin()  # /app as it came in, before the model touches it

    def _connect(self, resume: dict[str, Any] | None, wait: float) -> None:
        assert self.conn is not None
        deadline = time.monotonic() + wait
        last, pause = "", 0.02
        while time.monotonic() < deadline:
            try:
                self.hello = self.conn.open(resume=resume, timeout=min(2.0, max(0.5, deadline - time.monotonic())))
                return
            except (ConnectionLost, TimeoutError) as e:
                last = str(e)
            if not boxes.alive(self.container):
                said = self.conn.stderr[-1] if self.conn.stderr else boxes.last_words(self.container)
                raise SandboxDied(f"the sandbox container stopped: {said}")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)  # bounded and backed off: no reconnect storm
        raise SandboxError(f"the agent in the sandbox did not answer within {wait:.0f}s ({last})")

    def restart(self) -> None:
        """Replace a dead container with a fresh one (the workspace is kept)."""
        self._remove_container()
        self.start()

    def kill(self) -> None:
        """Stop and remove the container now, and let go of the engine; safe to call twice."""
        if self.conn is not None:
            self.conn.close()
        self._remove_container()
        if self._docker is not None:  # its pooled connections (over ssh: an ssh process each)
            self._docker.close()
        self._docker = None

    def _remove_container(self) -> None:
        if self.container is not None:
            self._sync.now(self.container, quiet=False, full=True)  # a dead container still gives its /app
            boxes.remove(self._docker, self.container, self._spec)
            self.container = None

    def sync_workspace(self) -> str:
        """Copy /app back into the host folder now (rw mode, archive transfer or a pod); says what came back."""
        with self._lock:
            return self._sync.now(self.container, quiet=False)

    # -- commands ----------------------------------------------------------------------------
    def stream(self, command: str, timeout: float | None = None) -> Iterator[Event]:
        """Run `command` in the persistent shell; yield Output chunks as they come, then one Result."""
        if timeout is not None and not 0 < timeout < math.inf:
            yield Result(command, None, error=f"the timeout must be a finite number of seconds above 0, not {timeout}")
            return
        if (why := refusal("command", command)) is not None:
            yield Result(command, None, error=why)
            return
        with self._lock:
            if self.container is None or self.conn is None:
                self.log("the sandbox was lost; starting a fresh one")
                self.restart()
            assert self.conn is not None
            limit = self.settings.max_exit_timeout
            seconds = min(timeout if timeout is not None else self.settings.exit_timeout, limit)
            cid = f"c{next(self._ids)}"
            self._running = cid
            try:
                self._send_run({"type": "run", "id": cid, "command": command, "timeout": seconds})
                yield from self._follow(command, cid, seconds)
            finally:
                self._running = None
                self._sync.due(self.container)

    def _send_run(self, frame: dict[str, Any]) -> None:
        """Send a command; if the sandbox died since the last one, start a fresh one first (nothing ran yet)."""
        assert self.conn is not None
        with contextlib.suppress(ConnectionLost):
            if not self.conn.closed_by_peer():  # an attach to a dead container still takes writes
                return self.conn.send(frame)
        if not self._reconnect({}):
            self._lost()
            self.log("the sandbox was lost between commands; starting a fresh one")
            self.restart()
        assert self.conn is not None
        self.conn.send(frame)

    def _follow(self, command: str, cid: str, seconds: float) -> Iterator[Event]:
        assert self.conn is not None
        last_seq, retries, episode = 0, 0, -math.inf  # episode: when the last reconnect was
        deadline = time.monotonic() + seconds + self.settings.kill_grace + SILENCE  # (the agent keeps the timeout)
        while True:
            try:
                frame = self.conn.recv(deadline)
            except (ConnectionLost, ProtocolError, TimeoutError) as e:
                fresh = time.monotonic() - episode > EPISODE
                late, retries = isinstance(e, TimeoutError), (0 if fresh else retries) + 1
                if retries <= RETRIES and not (late and retries > 1):  # bounded, backed off; once after a silence
                    time.sleep(0 if retries == 1 else min(0.05 * 2**retries, 1.0))
                    if self._reconnect({"id": cid, "seq": last_seq}):
                        episode = time.monotonic()
                        deadline = max(deadline, episode + self.settings.kill_grace + 5.0)
                        continue
                why = "the agent stopped answering" if late else None  # else the engine's word, before removal:
                why = why or f"the sandbox died mid-command ({boxes.why_dead(self.container, e)})"
                self._lost()
                yield Result(command, None, error=f"{why}; the next command starts a fresh one", lost=True)
                return
            kind = frame.get("type")
            if frame.get("id") != cid:
                continue
            if kind == "output":
                last_seq = seq if type(seq := frame.get("seq")) is int else last_seq  # (int() of any value raised)
                if last_seq % ACK_EVERY == 0:  # the agent sends only so far beyond what we acknowledged
                    self._tell({"type": "ack", "id": cid, "seq": last_seq})
                yield Output.from_frame(cid, last_seq, frame)
            elif kind == "gap":
                yield Output(cid, last_seq, "stderr", "\n[sandshell: output lost while reconnecting]\n")
            elif kind == "exit":
                yield Result.from_frame(command, frame)
                return
            elif kind == "error":
                yield Result(command, None, error=f"the agent refused the command: {frame.get('message')}")
                return

    def _reconnect(self, resume: dict[str, Any]) -> bool:
        """After a dropped socket: reconnect and resume if the container still runs."""
        if self.container is None or self.conn is None or not boxes.alive(self.container):
            return False
        try:
            self._connect(resume=resume, wait=5.0)
            self.log("reconnected to the agent")
            return True
        except SandboxError:
            return False

    def _lost(self) -> None:
        self.log("the sandbox container died; the next command will start a fresh one")
        self.kill()
        self.conn = None

    def execute(
        self, command: str, timeout: float | None = None, on_output: Callable[[Output], None] | None = None
    ) -> Result:
        """Run `command` to the end (its output bounded: head and tail); `on_output` sees each chunk as it comes."""
        collector = OutputCollector()
        result = None
        for event in self.stream(command, timeout):
            if isinstance(event, Output):
                collector.add(event)
                if on_output is not None:
                    on_output(event)
            else:
                result = event
        return collector.finish(result if result is not None else Result(command, None, error="no result"))

    def interrupt(self) -> None:
        """Stop the running command (its whole process tree), from any thread."""
        if (cid := self._running) is not None:
            self._tell({"type": "interrupt", "id": cid})

    def _tell(self, frame: dict[str, Any]) -> None:
        """Send, expecting no reply; a dead link is the reader's to notice (it reconnects)."""
        if (conn := self.conn) is not None:
            with contextlib.suppress(ConnectionLost):
                conn.send(frame)

    def _request(self, frame: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        with self._lock:
            if self.container is None or self.conn is None:
                self.restart()
            assert self.conn is not None
            frame["id"] = f"r{next(self._ids)}"
            for attempt in range(2):
                try:
                    reply = self.conn.request(frame, timeout)
                    break
                except (ConnectionLost, TimeoutError) as e:
                    if attempt == 0 and self._reconnect({}):
                        continue
                    self._lost()
                    raise SandboxDied(f"the sandbox stopped answering ({e}); the next call starts afresh") from None
            if reply.get("type") == "error":
                raise ProtocolError(str(reply.get("message")), str(reply.get("code")))
            return reply

    def copy_app(self, folder: Path) -> str:
        """Make `folder` hold a copy of a pod's /app (through the agent, as rw copies back); says what came."""
        with self._lock:
            return ferry.pull(self._ask, folder, self.settings.workspace_limit)

    def _ask(self, frame: dict[str, Any]) -> dict[str, Any]:  # the ferry's requests: an error frame as {"error"}
        assert self.conn is not None
        if self.conn.sock is None:  # closed by kill() before the last copy back: attach again
            self._connect(resume={}, wait=5.0)
        reply = self.conn.request({**frame, "id": f"w{next(self._ids)}"}, timeout=60.0)
        return {"error": reply.get("message")} if reply.get("type") == "error" else reply

    def read_file(self, path: str, limit: int | None = None) -> FileContent:
        """Read a file in the container (bounded); missing or binary files come back with `.error`."""
        if (why := refusal("path", path)) is not None:
            return FileContent(path, None, error=why)
        frame: dict[str, Any] = {"type": "read", "path": path, **({"limit": limit} if limit else {})}
        try:
            return FileContent.from_frame(self._request(frame))
        except ProtocolError as e:  # the agent refused it: the model hears why, the session goes on
            return FileContent(path, None, error=str(e))

    def write_file(self, path: str, content: str, append: bool = False) -> int:
        """Write (or append to) a file in the container; returns its size."""
        if (why := refusal("path", path) or refusal("content", content)) is not None:
            raise SandboxError(f"cannot write {path[:200]!r}: {why}")
        reply = self._request({"type": "write", "path": path, "content": content, "append": append})
        if reply.get("error"):
            raise SandboxError(f"cannot write {path}: {reply['error']}")
        return int(number(reply, "size", int))  # (what the agent says, checked: int() of any value raised)

    def state(self) -> ModelState:
        """The model's goal, /app/system.md and /app/config.json, in one round trip."""
        return ModelState.from_frame(self._request({"type": "state"}))

    def _listing(self) -> bytes | None:
        """/app listed by the agent (records, `sandshell_agent/listing.py`), or None when it would not or
        could not: the caller copies everything instead. Never restarts a sandbox."""
        with self._lock:
            conn = self.conn
            if self.container is None or conn is None:
                return None
            rid = f"r{next(self._ids)}"
            records = bytearray()
            try:
                conn.send({"type": "list", "id": rid})
                deadline = time.monotonic() + delta.LIST_SECONDS
                while True:
                    reply = conn.recv(deadline)
                    if reply.get("id") != rid or reply.get("type") in ("output", "exit", "gap"):
                        continue
                    if reply.get("type") != "listing" or not isinstance(data := reply.get("data"), str):
                        return None  # (an error: a bound reached, a folder it could not read)
                    records += base64.b64decode(data, validate=True)
                    if len(records) > delta.MAX_LISTING:
                        return None
                    if reply.get("more") is not True:
                        return bytes(records)
            except (ConnectionLost, TimeoutError, ValueError):  # (binascii.Error is a ValueError)
                return None

    def ping(self) -> float:
        """Round-trip time to the agent, in seconds."""
        start, _ = time.perf_counter(), self._request({"type": "ping"})
        return time.perf_counter() - start


__all__ = ["Event", "Sandbox"]
