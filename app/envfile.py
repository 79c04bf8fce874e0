"""Reading `.env`: its values, and a sentence for each line that is not `NAME=value` (python-dotenv
skips such a line with a log message nobody sees, and the setting quietly keeps its default)."""

from __future__ import annotations

from pathlib import Path

from dotenv.parser import parse_stream

PREFIXES = ("LLAMA_", "SANDSHELL_")


def read(path: str | Path) -> tuple[dict[str, str], list[str]]:
    """The values `path` sets, and what is wrong with its lines (empty when nothing is)."""
    values: dict[str, str] = {}
    errors: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for binding in parse_stream(f):
            key, line = binding.key, binding.original.line
            text = binding.original.string.strip()[:80]
            if binding.error or (key is not None and not key.isidentifier()):
                errors.append(f"line {line} of {path} is not NAME=value: {text!r}")
            elif key is not None and key != key.upper() and key.upper().startswith(PREFIXES):
                errors.append(f"line {line} of {path} names {key}: setting names are upper case ({key.upper()})")
            elif key is not None and binding.value is not None:
                values[key] = binding.value
    return values, errors
