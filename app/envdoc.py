"""Write `.env.example` from the settings' own documentation: `python -m sandshell.envdoc > .env.example`."""

from __future__ import annotations

from sandshell.config import documented_fields

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


def render() -> str:
    lines = [HEADER]
    for env, doc, default in documented_fields():
        value = str(default).lower() if isinstance(default, bool) else str(default)
        if "\n" in value or " " in value:
            value = '"' + value.replace('"', '\\"') + '"'
        lines.append(f"# {doc}\n{env}={value}\n")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
