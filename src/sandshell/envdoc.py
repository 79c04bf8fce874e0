"""Write `.env.example` from the settings' own documentation: `python -m sandshell.envdoc > .env.example`."""

from __future__ import annotations

from typing import Any

from sandshell.config import SECTIONS, documented

HEADER = """\
# sandshell settings. Copy to .env (start.sh does it) and change what you need; the
# environment wins over this file. Every value shown is the default.
#
# Any llama_cpp.Llama constructor parameter can also be set as LLAMA_<NAME> (LLAMA_N_THREADS,
# LLAMA_N_GPU_LAYERS, LLAMA_SEED, LLAMA_CHAT_FORMAT, ...), and any chat-completion parameter as
# the default for generation (LLAMA_TEMPERATURE, LLAMA_TOP_P, LLAMA_TOP_K, LLAMA_MIN_P,
# LLAMA_REPEAT_PENALTY, LLAMA_MIROSTAT_MODE, ...). The model may override generation
# parameters each turn in /app/config.json.
"""


def documented_fields() -> list[tuple[str, str, Any]]:
    """(env name, doc, default) for every fixed setting, for `.env.example` and `--help`."""
    return [(f.metadata["env"], f.metadata["doc"], f.default) for _, f in documented()]


def render() -> str:
    lines = [HEADER]
    section = ""
    for name, f in documented():
        if name != section:
            section = name
            title = (SECTIONS[name].__doc__ or name).strip()
            lines.append(f"# -- {title} " + "-" * max(3, 94 - len(title)) + "\n")
        env, doc, default = f.metadata["env"], f.metadata["doc"], f.default
        value = str(default).lower() if isinstance(default, bool) else str(default)
        if "\n" in value or " " in value:
            value = '"' + value.replace('"', '\\"') + '"'
        lines.append(f"# {doc}\n{env}={value}\n")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
