"""Newline-delimited JSON frames with a size bound (the agent's copy of the codec)."""

from __future__ import annotations

import json
from typing import Any


class FrameError(Exception):
    """A frame that cannot be accepted; `code` goes back to the peer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def encode(frame: dict[str, Any]) -> bytes:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class FrameReader:
    """Splits a byte stream into frames; oversized lines are skipped up to their newline."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._skipping = False

    def feed(self, data: bytes) -> list[dict[str, Any] | FrameError]:
        self._buf += data
        out: list[dict[str, Any] | FrameError] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                if len(self._buf) > self.max_frame:
                    if not self._skipping:
                        out.append(FrameError("too_large", f"frame over {self.max_frame} bytes"))
                    self._skipping = True
                    self._buf.clear()
                return out
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            if self._skipping:
                self._skipping = False
                continue
            if len(line) > self.max_frame:
                out.append(FrameError("too_large", f"frame over {self.max_frame} bytes"))
                continue
            if not line.strip():
                continue
            out.append(_parse(line))


def _parse(line: bytes) -> dict[str, Any] | FrameError:
    try:
        frame = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        return FrameError("malformed", f"not JSON: {e}")
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        return FrameError("malformed", "a frame is a JSON object with a string 'type'")
    return frame
