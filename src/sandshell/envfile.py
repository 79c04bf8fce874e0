"""Reading `.env`: its values (as python-dotenv gives them, `${VAR}` expanded), and a sentence for
each line that cannot be what it seems meant to be: python-dotenv skips a line it cannot parse with
a log message nobody sees, and the setting quietly keeps its default."""

from __future__ import annotations

import io
from pathlib import Path

from dotenv import dotenv_values
from dotenv.parser import parse_stream

PREFIXES = ("LLAMA_", "SANDSHELL_")


def read(path: str | Path) -> tuple[dict[str, str], list[str]]:
    """The values `path` sets, and what is wrong with its lines (empty when nothing is). Lines meant
    for other programs (`my-key=1`, a bare `HTTP_PROXY`) are theirs: left alone, as before."""
    errors: list[str] = []
    try:
        raw = Path(path).read_bytes()  # read once: checked and parsed alike
    except OSError as e:
        return {}, [f"cannot read {path} ({e.strerror or e}): make it readable, or move it away"]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # (a value's bytes replaced would pass unseen into a token or a path)
        line = raw.count(b"\n", 0, e.start) + 1
        return {}, [f"line {line} of {path} is not UTF-8 text (byte {raw[e.start]:#04x}): save the file as UTF-8"]
    for binding in parse_stream(io.StringIO(text)):
        key, line = binding.key, binding.original.line
        shown = binding.original.string.strip()[:80]
        ours = key is not None and key.upper().startswith(PREFIXES)
        if binding.error or (key is not None and binding.value is None and not key.isidentifier()):
            errors.append(f"line {line} of {path} is not NAME=value: {shown!r}")
        elif ours and key is not None and key != key.upper():
            errors.append(f"line {line} of {path} names {key}: setting names are upper case ({key.upper()})")
        elif ours and binding.value is None:
            errors.append(f"line {line} of {path} names {key} with no value: write {key}=value")
    values = {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if v is not None}
    return values, errors
