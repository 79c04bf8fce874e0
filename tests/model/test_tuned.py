"""The tuned default: the adapter goes with the embedded model only, loads, and changes what it answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandshell import config
from sandshell.errors import SettingsError
from sandshell.eval.run import Variant, run_suite
from sandshell.eval.task import load_tasks
from sandshell.model import actions, tuned
from sandshell.model.llama import LlamaBackend, default_model_path
from tests.conftest import REPO

GOAL = "Write the number of lines of /app/poems.txt into /app/n.txt."
LISTING = (
    "$ pwd && ls -la\n/app\ntotal 12\ndrwxrwxrwt  2 root root 4096 Nov 28 08:00 .\n"
    "drwxr-xr-x 18 root root 4096 Nov 28 08:00 ..\n-rw-r--r--  1 root root  310 Nov 28 08:00 poems.txt\n"
    "0 root@sandbox:/app #"
)


def messages(system: str) -> list[dict[str, str]]:
    """A session's first model turn, as the session builds it with the goal given."""
    return [
        {"role": "system", "content": system.rstrip() + f"\n\nYour goal: {GOAL}\n"},
        {"role": "user", "content": "Begin. The shell is ready: 0 root@sandbox:/app #"},
        {"role": "assistant", "content": '[{"comment": "look at where I am", "bash": "pwd && ls -la"}]'},
        {"role": "user", "content": LISTING},
    ]


def answer(backend: LlamaBackend) -> str:
    params = {"temperature": 0.0, "max_tokens": 48, "seed": 1}
    return "".join(p for p in backend.stream(messages(tuned.system_prompt()), params) if isinstance(p, str))


def test_the_adapter_goes_with_the_embedded_model_only() -> None:
    default = config.load(env_file=None, environ={})
    assert tuned.uses_adapter(default.model) and tuned.short_prompt(default.model)
    off = config.load(env_file=None, environ={"LLAMA_ADAPTER": "off"})
    assert not tuned.uses_adapter(off.model) and not tuned.short_prompt(off.model)
    own = config.load(env_file=None, environ={"LLAMA_MODEL_PATH": "/models/other.gguf"})
    assert not tuned.uses_adapter(own.model) and not tuned.short_prompt(own.model)
    remote = config.load(env_file=None, environ={"LLAMA_BACKEND": "openai"})
    assert not tuned.uses_adapter(remote.model)
    forced = config.load(env_file=None, environ={"LLAMA_ADAPTER": "off", "LLAMA_PROMPT": "short"})
    assert tuned.short_prompt(forced.model) and not tuned.uses_adapter(forced.model)


def test_a_bad_adapter_setting_is_one_sentence() -> None:
    with pytest.raises(SettingsError, match="LLAMA_ADAPTER='yes' must be one of on, off"):
        config.load(env_file=None, environ={"LLAMA_ADAPTER": "yes"})


def test_the_adapter_ships_with_its_provenance() -> None:
    assert tuned.ADAPTER.read_bytes()[:4] == b"GGUF"
    provenance = json.loads((tuned.HERE / "provenance.json").read_text())
    assert provenance["base_model"] == default_model_path().name
    assert provenance["curve"][-1]["val_loss"] < provenance["curve"][0]["val_loss"]


@pytest.mark.model
def test_the_adapter_loads_and_changes_the_answer() -> None:
    on = LlamaBackend(config.load(env_file=None, environ={}).model)
    off = LlamaBackend(config.load(env_file=None, environ={"LLAMA_ADAPTER": "off"}).model)
    assert "adapter" in on.description and "adapter" not in off.description
    tuned_answer, plain_answer = answer(on), answer(off)
    assert tuned_answer != plain_answer
    # The plain model copies the intro's command; the tuned one acts on a path of the goal.
    first = actions.parse(tuned_answer)[0]
    assert first.kind == "bash" and first.arg != "pwd && ls -la", tuned_answer
    assert "/app/poems.txt" in first.arg or "/app/n.txt" in first.arg, tuned_answer


@pytest.mark.model
@pytest.mark.docker
def test_the_tuned_default_passes_trivial_tasks_the_plain_model_does_not(tmp_path: Path) -> None:
    # (time limits four times the suite's, as the benchmark runs them: a loaded machine must not decide)
    tasks = [
        t.model_copy(update={"time_limit": t.time_limit * 4}) for t in load_tasks([REPO / "tasks"]) if t.name in TRIVIAL
    ]
    base = {"LLAMA_SEED": "1", "SANDSHELL_HOME": str(tmp_path)}
    variants = [
        Variant("tuned", config.load(env_file=None, environ=base)),
        Variant("plain", config.load(env_file=None, environ={**base, "LLAMA_ADAPTER": "off"})),
    ]
    # Twice each, so that one unlucky generation under load does not decide: the tuned model must
    # pass every task in at least one run, the plain model none in any.
    results = run_suite(tasks, variants, tmp_path / "eval", repeat=2)
    passed = {v.label: sorted({r.task for r in results if r.variant == v.label and r.passed}) for v in variants}
    how = [(r.variant, r.task, r.status, r.error, r.check_output) for r in results]
    assert passed["tuned"] == sorted(TRIVIAL), how
    assert passed["plain"] == [], passed


# What the tuned default passes with this seed and the plain model does not (docs/benchmarks.md).
TRIVIAL = ("append-line", "copy-file", "rename-file")
