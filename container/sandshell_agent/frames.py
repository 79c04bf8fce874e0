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
        buf, start = self._buf, 0
        while (nl := buf.find(b"\n", start)) >= 0:
            line, start = bytes(buf[start:nl]), nl + 1
            if self._skipping:  # the end of a line already reported as too large
                self._skipping = False
            elif len(line) > self.max_frame:
                out.append(FrameError("too_large", f"frame over {self.max_frame} bytes"))
            elif line.strip():
                out.append(_parse(line))
        del buf[:start]  # once per feed: deleting per frame copied the rest of the buffer each time
        if len(buf) > self.max_frame:
            if not self._skipping:
                out.append(FrameError("too_large", f"frame over {self.max_frame} bytes"))
            self._skipping = True
            buf.clear()
        return out


def _parse(line: bytes) -> dict[str, Any] | FrameError:
    try:
        frame = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        return FrameError("malformed", f"not JSON: {e}")
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        return FrameError("malformed", "a frame is a JSON object with a string 'type'")
    return frame
