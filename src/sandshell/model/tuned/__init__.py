"""The default model's sandshell-tuned LoRA adapter, and the short fixed prompt it was trained on.

`adapter.gguf` is a LoRA adapter for the embedded SmolLM2-135M-Instruct (llama.cpp loads it beside
the quantized base); `provenance.json` says how it was made (`training/`, `scripts/train.sh`).
"""

from __future__ import annotations

from pathlib import Path

from sandshell.config import ModelSettings
from sandshell.errors import ModelError

HERE = Path(__file__).resolve().parent
ADAPTER = HERE / "adapter.gguf"
PROMPT = HERE / "system.md"


def uses_adapter(settings: ModelSettings) -> bool:
    """The adapter goes with the embedded default model only, in-process, unless turned off."""
    return settings.backend == "llama" and not settings.model_path and settings.adapter == "on"


def adapter_path(settings: ModelSettings) -> Path | None:
    """The adapter file to load, or None; ModelError when it should be there and is not."""
    if not uses_adapter(settings):
        return None
    if not ADAPTER.is_file():
        raise ModelError(f"the tuned adapter {ADAPTER} is missing; reinstall sandshell or set LLAMA_ADAPTER=off")
    return ADAPTER


def short_prompt(settings: ModelSettings) -> bool:
    """Whether the session sends the short fixed prompt the adapter was trained on instead of system.md."""
    return settings.prompt == "short" or (settings.prompt == "auto" and uses_adapter(settings))


def system_prompt() -> str:
    return PROMPT.read_text(encoding="utf-8")
