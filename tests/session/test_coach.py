"""Help for small models: each setting changes what the model sees or what runs (the mechanism, not luck)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandshell.config import Settings
from sandshell.model import actions
from sandshell.model.script import ScriptBackend
from sandshell.model.types import Message, Stats
from sandshell.runner import SessionSpec, open_session
from sandshell.session import events
from sandshell.session.coach import FEW_SHOT, INTRO
from sandshell.session.control import Control
from tests.conftest import _base_settings
from tests.grammar_util import grammar_accepts

pytestmark = [pytest.mark.docker, pytest.mark.model]


class Seeing(ScriptBackend):
    """The script backend, keeping every prompt it was given."""

    def __init__(self, *answers: object) -> None:
        super().__init__([json.dumps(a) for a in answers])
        self.prompts: list[list[Message]] = []
        self.params: list[dict[str, Any]] = []

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats]:
        self.prompts.append([dict(m) for m in messages])
        self.params.append(dict(params))
        yield from super().stream(messages, params)


@pytest.fixture
def s(workspace: Path, tmp_path: Path) -> Settings:
    return _base_settings(
        sandbox={"workspace": str(workspace), "exit_timeout": 5.0, "profile": "locked"},
        session={"sessions_dir": str(tmp_path / "sessions")},
        model={"intro": False},
    )


def run(s: Settings, backend: Seeing, goal: str = "make /app/x") -> tuple[Any, list[events.Event]]:
    seen: list[events.Event] = []

    class Sink:
        def emit(self, event: events.Event) -> None:
            seen.append(event)

    with open_session(SessionSpec(s, goal, backend, [Sink()], Control())) as session:
        outcome = session.run()
    return outcome, seen


def ran(seen: list[events.Event]) -> list[str]:
    return [e.action.arg for e in seen if isinstance(e, events.ActionStarted)]


def test_few_shot_examples_are_in_the_fixed_prompt_only_when_asked(s: Settings) -> None:
    for on in (False, True):
        backend = Seeing({"done": "x"})
        run(s.replace(model=s.model.replace(few_shot=on)), backend)
        system = backend.prompts[0][0]["content"]
        assert (FEW_SHOT.strip() in system) is on
        assert backend.prompts[0][1]["content"].endswith('\nGoal "make /app/x":') is on
        assert ("Your goal: make /app/x" in system) is True


def test_intro_as_observation_is_not_the_models_own_move(s: Settings) -> None:
    backend = Seeing({"done": "x"})
    run(s.replace(model=s.model.replace(intro=True)), backend)
    assert [m["role"] for m in backend.prompts[0]] == ["system", "user", "assistant", "user"]
    assert json.loads(backend.prompts[0][2]["content"])[0]["bash"] == "pwd && ls -la"
    backend = Seeing({"done": "x"})
    run(s.replace(model=s.model.replace(intro=True, intro_style="observation", comment_chars=0)), backend)
    prompt = backend.prompts[0]
    assert [m["role"] for m in prompt] == ["system", "user"]
    assert "$ pwd && ls -la\n/app\n" in prompt[1]["content"] and "look at where I am" not in prompt[1]["content"]


def test_best_of_n_keeps_the_answer_the_checker_likes(s: Settings) -> None:
    script = [
        {"bash": "false"},  # turn 1: nothing known against it: the first sample is taken
        {"bash": "false"},
        {"bash": "echo 'unclosed"},
        {"read": "/app/nowhere.txt"},
        {"bash": "echo fixed"},  # turn 2
        {"done": "ok"},  # turn 3
    ]
    outcome, seen = run(s.replace(model=s.model.replace(best_of=4)), Seeing(*script))
    assert ran(seen) == ["false", "echo fixed", "ok"] and outcome.status == "done"
    outcome, seen = run(s.replace(model=s.model.replace(best_of=1)), Seeing(*script))
    assert ran(seen)[:3] == ["false", "false", "echo 'unclosed"]


def test_best_of_n_samples_reuse_the_prompt_and_report_all_tokens(s: Settings) -> None:
    backend = Seeing({"bash": "false"}, {"bash": "false"}, {"bash": "true"}, {"done": "ok"})
    run(s.replace(model=s.model.replace(best_of=2, sampling={"temperature": 0.2, "seed": 7})), backend)
    assert len(backend.prompts) == 4 and backend.prompts[1] == backend.prompts[2]
    first, second = backend.params[1], backend.params[2]  # turn 2's two samples: the second is hotter, reseeded
    assert (first["temperature"], first["seed"]) == (0.2, 7) and second["seed"] == 8
    assert second["temperature"] == pytest.approx(0.5)


def test_error_fix_quotes_the_error(s: Settings) -> None:
    for on in (False, True):
        backend = Seeing({"bash": "cat /app/nope.txt"}, {"done": "x"})
        run(s.replace(model=s.model.replace(error_fix=on)), backend)
        last = backend.prompts[1][-1]["content"]
        quoted = 'failed: "cat: /app/nope.txt: No such file or directory". Fix the cause'
        assert (quoted in last) is on, last


def test_a_nudge_restates_the_goal_once_before_the_session_is_stuck(s: Settings) -> None:
    same = [{"bash": "ls"}] * 6
    outcome, _ = run(s.replace(session=s.session.replace(repeat_limit=2)), Seeing(*same))
    assert outcome.status == "stuck" and outcome.turns == 2
    backend = Seeing(*same)
    outcome, _ = run(
        s.replace(session=s.session.replace(repeat_limit=2), model=s.model.replace(nudge=True)),
        backend,
        goal="count the files in /etc",
    )
    assert outcome.status == "stuck" and outcome.turns == 4
    told = backend.prompts[2][-1]["content"]
    assert "You are stuck" in told and "Your goal: count the files in /etc" in told


@pytest.fixture(scope="module")
def llm() -> Any:
    from llama_cpp import Llama

    from sandshell.model.llama import default_model_path

    return Llama(model_path=str(default_model_path()), n_ctx=512, verbose=False)


@pytest.mark.model
def test_the_comment_is_capped_or_gone_by_the_grammar(llm: Any) -> None:
    plain, short = '[{"bash": "ls"}]', '[{"comment": "look", "bash": "ls"}]'
    long = json.dumps([{"comment": "x" * 21, "bash": "ls"}])
    assert grammar_accepts(llm, actions.grammar(-1), long) and grammar_accepts(llm, actions.grammar(-1), plain)
    assert grammar_accepts(llm, actions.grammar(20), short) and not grammar_accepts(llm, actions.grammar(20), long)
    assert grammar_accepts(llm, actions.grammar(0), plain) and not grammar_accepts(llm, actions.grammar(0), short)
    assert INTRO[1].comment  # the intro's comments are dropped when the grammar has none (see the intro test)


@pytest.mark.model
def test_the_history_penalty_reaches_the_last_answers_commands() -> None:
    from sandshell.model.llama import LlamaBackend

    msgs = [
        {"role": "system", "content": "You answer with JSON actions."},
        {"role": "user", "content": "Begin."},
        {"role": "assistant", "content": '[{"bash": "ls -la"}]'},
        {"role": "user", "content": "$ ls -la\ntotal 0"},
    ]
    greedy = {"temperature": 0.0, "max_tokens": 12}
    answers = {}
    for penalty in (1.0, 2.0):
        plain = {"comment_chars": 0, "history_penalty": penalty, "adapter": "off"}  # the model that repeats itself
        backend = LlamaBackend(_base_settings(model=plain).model)
        answers[penalty] = "".join(x for x in backend.stream(msgs, greedy) if isinstance(x, str))
        if penalty > 1:
            assert [backend.llm.detokenize([t]) for t in backend._recent_commands(msgs)] == [b"ls", b" -", b"la"]
    assert answers[1.0].startswith('[{"bash": "ls -la"')  # unpenalized, the model repeats itself
    assert "ls -la" not in answers[2.0]
