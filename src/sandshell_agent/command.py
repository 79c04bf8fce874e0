"""One running command: its output accounting (stream cap, spill file, tail) and its kill phases."""

from __future__ import annotations

import codecs
import os
import select
import signal
import time
from typing import Any

from . import diskguard, files

CHUNK_CHARS = 32 * 1024
FLUSH_SECONDS = 0.05
TAIL_BYTES = 8 * 1024
READ_BYTES = 256 * 1024  # a read of a command's output (see shell.OUTPUT_BUFFER)
DRAIN_BYTES = 4 * 1024 * 1024  # the most read of each stream as a command ends
# bash's word for a program SIGXFSZ killed; strerror(EFBIG) as a program that ignores the signal
# reports it (`cp: error writing 'x': File too large`, Python's `[Errno 27] File too large`), not the
# bare words, which a command may print for other reasons
FILE_TOO_LARGE = (b"File size limit exceeded", b": File too large", b"] File too large")
DECODER = codecs.getincrementaldecoder("utf-8")
_OUTPUT = bytearray(READ_BYTES)  # where every read of a command's output lands first (`read_output`)
_OUTPUT_VIEW = memoryview(_OUTPUT)


def read_output(fd: int) -> bytes:
    """One read of a command's output (the agent's loop only), through one buffer kept for good:
    `os.read(fd, READ_BYTES)` had Python allocate 256 KiB each time, which glibc may map fresh,
    shrink and unmap (the host's reads did: docs/benchmarks.md; here it was not measured)."""
    got = os.readv(fd, [_OUTPUT])
    return bytes(_OUTPUT_VIEW[:got])


class Limits:
    """Per-command output bounds, from the agent's environment."""

    def __init__(self, stream: int, spill: int, spill_dir: str) -> None:
        self.stream = stream  # bytes streamed live to the host; 0 = unlimited
        self.spill = spill  # bytes kept in the spill file before the command is stopped; 0 = no cap
        self.spill_dir = spill_dir


class Command:
    """Accounting for one command; the server feeds it bytes and asks it for frames."""

    def __init__(self, cid: str, text: bytes, timeout: float, before: dict[int, int], limits: Limits) -> None:
        self.id = cid
        self.text = text
        self.timeout = timeout
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.before = before
        self.limits = limits
        self.seq = 0
        self.total = 0
        self.streamed = 0
        self.head = bytearray()
        self.tail = bytearray()
        self.spill_path: str | None = None
        self._spill: Any = None
        self.spill_error = ""
        self.decoders: dict[str, Any] = {}  # a stream's, made at its first output (most commands print nothing)
        self.pending: list[tuple[str, list[str]]] = []  # (stream, texts) in arrival order
        self.pending_chars = 0
        self.pending_since: float | None = None
        self.last_flush = float("-inf")
        self.timed_out = False
        self.interrupted = False
        self.output_limited = False
        self.phase: str | None = None  # None, "term", "kill", "wedged"
        self.phase_deadline = 0.0
        self.rerun = False  # given again to a fresh shell: the one it went to died in its setup

    # -- output ------------------------------------------------------------------------------
    def feed(self, stream: str, data: bytes) -> None:
        """Account for bytes read from the command's stdout or stderr."""
        self.total += len(data)
        self.tail += data
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]
        live = data
        limit = self.limits.stream
        if limit:
            room = max(0, limit - self.streamed)
            live = data[:room]
            self.head += live
            if len(data) > room:
                self._to_spill(data[room:])
        self.streamed += len(live)
        if live:
            dec = self.decoders.get(stream) or self.decoders.setdefault(stream, DECODER("replace"))
            text = dec.decode(live)
            if text:
                self._queue(stream, text)
        if self.limits.spill and self.total > self.limits.stream + self.limits.spill:
            self.output_limited = True

    def drain(self, streams: tuple[tuple[int, str], ...]) -> None:
        """Take what is left in the shell's output channels as the command ends (bounded: a writer it
        left behind goes on writing)."""
        try:  # one call to see that nothing is left (the usual case), where two reads failing took twice that
            if not select.select([fd for fd, _ in streams if fd >= 0], [], [], 0)[0]:
                return
        except (OSError, ValueError):
            pass
        for fd, stream in streams:
            for _ in range(DRAIN_BYTES // READ_BYTES):
                try:
                    data = read_output(fd)
                except OSError:  # BlockingIOError included: nothing more
                    break
                if not data:
                    break
                self.feed(stream, data)

    def _queue(self, stream: str, text: str) -> None:
        if self.pending_since is None:
            self.pending_since = time.monotonic()
        if self.pending and self.pending[-1][0] == stream:
            self.pending[-1][1].append(text)
        else:
            self.pending.append((stream, [text]))
        self.pending_chars += len(text)

    def _to_spill(self, data: bytes) -> None:
        """Keep what is beyond the stream cap in a new file. The folder is the model's, so nothing
        there is trusted (see files.create_new); a failure is said in the result, never fatal."""
        if self.spill_error:
            return
        try:
            if self._spill is None:
                fd, self.spill_path = files.create_new(self.limits.spill_dir, _safe(self.id), ".log")
                self._spill = open(fd, "wb")  # noqa: SIM115 - kept open while output flows
                self._spill.write(self.head)
            if self.limits.spill and self._spill.tell() >= self.limits.stream + self.limits.spill:
                return
            self._spill.write(data)
        except OSError as e:
            self.spill_error = f"the output beyond {self.limits.stream:,} bytes could not be kept ({e.strerror or e})"
            self._close_spill()

    def _close_spill(self) -> None:
        if self._spill is not None:
            try:
                self._spill.close()
            except OSError as e:
                self.spill_error = self.spill_error or f"the spill file could not be written ({e.strerror or e})"
            self._spill = None

    def flush_due(self, now: float) -> bool:
        """Output after a quiet spell goes at once (the first byte must not wait); output that keeps
        coming is coalesced into chunks of FLUSH_SECONDS or CHUNK_CHARS, whichever comes first."""
        if self.pending_since is None:
            return False
        quiet = now - self.last_flush >= FLUSH_SECONDS
        return quiet or now - self.pending_since >= FLUSH_SECONDS or self.pending_chars >= CHUNK_CHARS

    def frames(self, final: bool = False) -> list[dict[str, Any]]:
        """Drain queued text into output frames in arrival order, at most CHUNK_CHARS each."""
        if final:
            for stream in ("stdout", "stderr"):
                if (dec := self.decoders.get(stream)) is None:
                    continue
                rest = dec.decode(b"", final=True)
                if rest:
                    self._queue(stream, rest)
        out: list[dict[str, Any]] = []
        for stream, texts in self.pending:
            text = "".join(texts)
            for start in range(0, len(text), CHUNK_CHARS):
                self.seq += 1
                out.append(
                    {
                        "type": "output",
                        "id": self.id,
                        "seq": self.seq,
                        "stream": stream,
                        "data": text[start : start + CHUNK_CHARS],
                    }
                )
        self.pending = []
        self.pending_chars = 0
        self.pending_since = None
        if out:
            self.last_flush = time.monotonic()
        return out

    # -- the end -----------------------------------------------------------------------------
    def file_limit_notice(self, code: int | None, limit: int) -> str | None:
        """What to tell when the command's writes met RLIMIT_FSIZE (`limit`: 0, none)."""
        if not limit or not (code == 128 + signal.SIGXFSZ or any(m in self.tail for m in FILE_TOO_LARGE)):
            return None
        return (
            f"a file reached the size limit of {diskguard.human(limit)} (SANDSHELL_FILE_LIMIT, which the "
            "workspace and scratch limits also cap): the write stopped there; raise it if the task needs bigger files"
        )

    def result(self, exit_code: int | None, cwd: str, user: str, host: str, **extra: Any) -> dict[str, Any]:
        self._close_spill()
        truncated = bool(self.limits.stream) and self.total > self.limits.stream
        frame: dict[str, Any] = {
            "type": "exit",
            "id": self.id,
            "exit_code": exit_code,
            "signal": None,
            "timed_out": self.timed_out,
            "interrupted": self.interrupted,
            "output_limited": self.output_limited,
            "restarted": False,
            "duration": round(time.monotonic() - self.started, 4),
            "output_bytes": self.total,
            "truncated": truncated,
            "spill_path": self.spill_path,
            "tail": self.tail.decode("utf-8", errors="replace") if truncated else None,
            "last_seq": self.seq,
            "user": user,
            "host": host,
            "cwd": cwd,
            "error": None,
        }
        frame.update(extra)
        if self.spill_error:
            frame["notice"] = "; ".join(n for n in (frame.get("notice"), self.spill_error) if n)
        if exit_code is not None and exit_code > 128 and frame["signal"] is None:
            frame["signal"] = _signal_name(exit_code - 128)
        # What is not said is None, false or 0 to the host: a `true`'s frame is half as long to write and read.
        return {k: v for k, v in frame.items() if k == "exit_code" or (v is not None and v is not False and v != 0)}


def _safe(cid: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in cid)[:64] or "cmd"


def _signal_name(num: int) -> str | None:
    try:
        return signal.Signals(num).name
    except ValueError:
        return None
