"""The training data's task families: every solution passes its check, every check fails untouched.

Each family runs through a real session in a real sandbox (`training.collect.run_one`), which
runs the check before the session (it must fail) and after the solution (it must pass), and
keeps the messages only when every turn's prompt is the start of the next one.
"""

from __future__ import annotations

import json
import random

import pytest

from sandshell.eval.task import load_tasks
from sandshell.model import actions
from tests.conftest import REPO
from training.collect import plan, run_one
from training.families import FAMILIES, MORE, generate


@pytest.mark.docker
@pytest.mark.parametrize("family", sorted({**FAMILIES, **MORE}))
def test_every_family_solves_its_own_task_and_its_check_fails_untouched(family: str) -> None:
    spec = {**FAMILIES, **MORE}[family](random.Random(f"test {family}"))
    record = run_one(spec, {}, goal_in_file=family.startswith(("c", "m", "p")))
    assert record["ok"], f"{family}: {record.get('why')} ({spec.goal})"
    messages = record["messages"]
    assert messages[0]["role"] == "system" and spec.goal in messages[0]["content"]
    taught = [m for m in messages[record["train_from"] :] if m["role"] == "assistant"]
    assert len(taught) == len(spec.answers)
    assert json.loads(taught[-1]["content"])[0].keys() == {"done"}


@pytest.mark.docker
def test_an_error_note_is_recorded_as_the_session_sends_it() -> None:
    spec = FAMILIES["fix_python"](random.Random(3))
    record = run_one(spec, {"LLAMA_ERROR_FIX": "true"}, goal_in_file=False)
    assert record["ok"], record.get("why")
    assert any("[note] The command" in m["content"] for m in record["messages"] if m["role"] == "user")


def test_generation_is_seeded_and_goals_are_unique() -> None:
    a, b = generate(7, 120), generate(7, 120)
    assert [s.goal for s in a] == [s.goal for s in b]
    assert len({s.goal for s in a}) == 120
    assert {s.family for s in generate(7, 400)} == set(FAMILIES)
    assert {s.family for s in generate(7, 400, more=True)} == set(FAMILIES) | set(MORE)
    assert [s.goal for s in generate(8, 20)] != [s.goal for s in a[:20]]
    assert [j[1:] for j in plan(7, 50)] == [j[1:] for j in plan(7, 50)]


def test_every_generated_answer_is_valid_for_the_grammar() -> None:
    for spec in generate(1, 400):
        for answer in spec.answers:
            parsed = actions.parse(json.dumps(answer))
            assert actions.dumps(parsed) == json.dumps(answer, ensure_ascii=False)


def test_no_goal_or_command_of_an_eval_suite_is_generated() -> None:
    suite = load_tasks([REPO / "tasks", REPO / "bench" / "heldout"])
    goals = {t.goal for t in suite}
    said = [a for t in suite for answer in t.solution for a in (answer if isinstance(answer, list) else [answer])]
    commands = {a["bash"] for a in said if "bash" in a}
    writes = {(a["write"], a["content"]) for a in said if "write" in a}
    for spec in generate(1, 2000):
        assert spec.goal not in goals
        for answer in spec.answers:
            for a in answer:
                assert a.get("bash") not in commands, (spec.family, a)
                assert (a.get("write"), a.get("content")) not in writes, (spec.family, a)
