"""Newline-delimited JSON frames with a size bound; shared by the agent and the host.

An output chunk travels as a JSON header with `"bytes": N` followed by N raw UTF-8 bytes, so
the bulk of a flood is neither escaped nor parsed as JSON; the reader puts it back as `data`.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
from typing import Any, Literal

COMMAND_LIMIT = 256 * 1024  # bytes of one command (sent to bash as ASCII: up to 4x that past ASCII)
PATH_LIMIT = 4096  # bytes of a path in a read or write (Linux's PATH_MAX)
CONTENT_LIMIT = 1024 * 1024  # bytes of one write's content; a frame holds it even fully escaped
LIMITS = {"command": COMMAND_LIMIT, "path": PATH_LIMIT, "content": CONTENT_LIMIT}


def refusal(what: Literal["command", "path", "content"], text: str) -> str | None:
    """Why `text` cannot be a command, path or file content, in one sentence, or None. The host
    asks before it sends anything; the agent asks again of what arrives."""
    if "\0" in text:
        return f"the {what} contains a NUL byte, which cannot pass to bash or a file name; nothing ran"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return f"the {what} is not valid text (a lone surrogate); nothing ran"
    if size > LIMITS[what]:
        return f"the {what} is {size:,} bytes, over the limit: a {what} may have at most {LIMITS[what]:,}; nothing ran"
    if what == "path":
        if not text.strip():
            return "the path is empty"
        bad = next((c for c in text if ord(c) < 32 or 127 <= ord(c) < 160), None)
        if bad is not None:
            return f"the path contains the control character {bad!r}; nothing ran"
    return None


class FrameError(Exception):
    """A frame that cannot be accepted; `code` goes back to the peer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# JSON's C encoder and scanner, each made once and called as they are: `json.dumps` with separators
# builds a new encoder at every call, and `JSONEncoder.encode` and `JSONDecoder.decode` make their
# C halves' work (~5 µs a frame) cost ~10 µs more of Python around it on each end of a command.
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_DECODE = json.JSONDecoder().decode
_SCAN: Any = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # (typeshed: of itself)
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_ITERENCODE: Any = (  # (no check for cycles: a frame is built of fresh dicts, lists and scalars)
    _C_ENCODER(None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
    if _C_ENCODER is not None
    else None
)


def _json(frame: dict[str, Any]) -> str:
    # ASCII JSON: a lone surrogate (from a broken model reply) travels escaped, not as a crash
    return "".join(_ITERENCODE(frame, 0)) if _ITERENCODE is not None else _ENCODER.encode(frame)


def encode(frame: dict[str, Any]) -> bytes:
    data = frame.get("data")
    if frame.get("type") == "output" and isinstance(data, str):
        payload = data.encode("utf-8", errors="replace")
        header = {k: v for k, v in frame.items() if k != "data"}
        header["bytes"] = len(payload)
        return _json(header).encode() + b"\n" + payload
    return _json(frame).encode() + b"\n"


class FrameReader:
    """Splits a byte stream into frames; oversized lines are skipped up to their newline."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._skipping = False
        self._body: dict[str, Any] | None = None  # a header whose raw bytes are still coming
        self._body_size = 0

    def coming(self) -> int:
        """Bytes of a frame's raw output still to come (0 between frames)."""
        return self._body_size - len(self._buf) if self._body is not None else 0

    def feed(self, data: bytes) -> list[dict[str, Any] | FrameError]:
        whole = data[:1] == b"{" and data.find(b"\n") == len(data) - 1 and len(data) <= self.max_frame
        if whole and not self._buf and self._body is None and not self._skipping:
            # One whole frame and nothing before it (a request, a result): parsed as it is.
            item = _parse(data[:-1])
            if not isinstance(item, dict) or "bytes" not in item:
                return [item]
        self._buf += data
        out: list[dict[str, Any] | FrameError] = []
        buf, start = self._buf, 0
        while True:
            if self._body is not None:
                if len(buf) - start < self._body_size:
                    break
                end = start + self._body_size
                self._body["data"] = bytes(buf[start:end]).decode("utf-8", errors="replace")
                out.append(self._body)
                self._body, start = None, end
                continue
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line, start = bytes(buf[start:nl]), nl + 1
            if self._skipping:  # the end of a line already reported as too large
                self._skipping = False
            elif len(line) > self.max_frame:
                out.append(FrameError("too_large", f"frame over {self.max_frame} bytes"))
            elif line.strip():
                item = _parse(line)
                if isinstance(item, dict) and "bytes" in item:
                    size = item.pop("bytes")
                    if isinstance(size, int) and 0 <= size <= self.max_frame:
                        self._body, self._body_size = item, size
                    else:
                        out.append(FrameError("malformed", "'bytes' must be a size up to the frame limit"))
                else:
                    out.append(item)
        del buf[:start]  # once per feed: deleting per frame copied the rest of the buffer each time
        if self._body is None and len(buf) > self.max_frame:
            if not self._skipping:
                out.append(FrameError("too_large", f"frame over {self.max_frame} bytes"))
            self._skipping = True
            buf.clear()
        return out


def _parse(line: bytes) -> dict[str, Any] | FrameError:
    try:  # (frames are UTF-8: ASCII JSON from either side)
        text = line.decode("utf-8", "surrogatepass")
        if text[:1] != "{":  # (what `json.loads` takes besides: leading space, other values)
            frame = _DECODE(text)
        else:
            frame, end = _SCAN(text, 0)
            if end != len(text) and text[end:].strip(" \t\n\r"):
                return FrameError("malformed", f"not JSON: Extra data: line 1 column {end + 1} (char {end})")
    except (ValueError, UnicodeDecodeError) as e:
        return FrameError("malformed", f"not JSON: {e}")
    except StopIteration as e:  # (the scanner's way to say a value was expected at char e.value)
        return FrameError("malformed", f"not JSON: Expecting value: char {e.value}")
    except RecursionError:  # a line of ~1,000 nested brackets must not crash the reader
        return FrameError("malformed", "not JSON: nested too deeply")
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        return FrameError("malformed", "a frame is a JSON object with a string 'type'")
    return frame
