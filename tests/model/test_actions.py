"""Actions: strict parsing, and a grammar that never cripples bash (checked by llama.cpp itself)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandshell.model import actions
from sandshell.model.actions import Action, ParseError
from tests.grammar_util import grammar_accepts

NASTY = [
    'echo "double \\"quoted\\"" and \'single\'',
    "printf '%s\\n' \"$HOME\" `whoami` $(date +%s) $((1+2))",
    "cat <<'EOF' > /app/x.sh\n#!/bin/bash\necho \"$1\" \\\n  | tr a-z A-Z\nEOF",
    "find . -name '*.py' -exec grep -l 'import' {} \\;",
    'python3 -c \'print("\\\\n".join(["a", "b"]))\'',
    "awk -F: '{ print $1 \"\\t\" $7 }' /etc/passwd | head -3",
    "echo -e 'tab\\there\\r\\nbell\\a' ; echo 'ünïcødé ✓'",
    'for f in *; do [ -f "$f" ] && echo "${f%.*}"; done 2>/dev/null || true',
    "sed -i 's/\\/usr\\/bin/\\/opt/g' file && echo '{\"json\": [1, {\"k\": null}]}' | jq .",
    "a=$'\\x01\\x1f' ; echo ${#a}",
]


@pytest.mark.parametrize("command", NASTY)
def test_nasty_commands_round_trip_through_json(command: str) -> None:
    text = actions.dumps([Action("bash", command, comment="try it")])
    (parsed,) = actions.parse(text)
    assert parsed.arg == command and parsed.comment == "try it"


@pytest.fixture(scope="module")
def llm() -> Any:
    from llama_cpp import Llama

    from sandshell.model.llama import default_model_path

    return Llama(model_path=str(default_model_path()), n_ctx=512, verbose=False)


@pytest.mark.model
@pytest.mark.parametrize("command", NASTY)
def test_the_grammar_lets_the_model_write_any_command(llm: Any, command: str) -> None:
    text = actions.dumps([Action("bash", command, comment="c"), Action("write", "/app/n.md", 'x\n"y"')])
    assert grammar_accepts(llm, actions.GRAMMAR, text)
    assert grammar_accepts(llm, actions.GRAMMAR, json.dumps([{"bash": command, "timeout": 30}]))


@pytest.mark.model
def test_the_grammar_refuses_what_would_not_parse(llm: Any) -> None:
    debris = ['[{"read": "/app/note.txt}}] ]"}]', '[{"write": "/app/a\\"b", "content": "x"}]', '[{"read": ""}]']
    for bad in ['[{"bash": "ls"', "ls -la", '[{"rm": "-rf /"}]', "[]", '[{"bash": 1}]', *debris]:
        assert not grammar_accepts(llm, actions.GRAMMAR, bad), bad
    for good in ['[{"done": "ok"}]', '[{"read": "/app/goal"}, {"bash": "ls"}]']:
        assert grammar_accepts(llm, actions.GRAMMAR, good), good


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("I think we should run ls", "no JSON found"),
        ('[{"bash": "ls"', "invalid JSON"),
        ("[]", "empty"),
        ('[{"bash": "ls", "read": "/x"}]', "exactly one of"),
        ('[{"bash": ""}]', "must not be empty"),
        ('[{"bash": "ls", "sudo": true}]', "unknown key(s) sudo"),
        ('[{"read": "/app/note.txt}}] ] ]"}]', "without quotes, backslashes, brackets or braces"),
        ('[{"write": "/app/x\\ny", "content": ""}]', "must be a path"),
        ('[{"bash": "sleep 1", "timeout": -3}]', "positive, finite number"),
        ('[{"bash": "sleep 1", "timeout": NaN}]', "positive, finite number"),
        ('[{"bash": "sleep 1", "timeout": Infinity}]', "positive, finite number"),
        ('[{"write": "/x", "content": 5}]', '"content" must be a string'),
        ("[1]", "must be a JSON object"),
        ('[{"done": "ok \\ud83d"}]', '"done" holds \\ud83d, half of a character'),
        ('[{"comment": "\\udcff", "bash": "ls"}]', '"comment" holds \\udcff'),
        ('[{"write": "/app/x", "content": "a\\udfffb"}]', '"content" holds \\udfff'),
        ('[{"read": "/app/\\u009b2J"}]', "must be a path"),
        (json.dumps([{"bash": "ls"}] * 5), "at most 4"),
    ],
)
def test_parse_errors_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ParseError, match=None) as info:
        actions.parse(text)
    assert words in str(info.value)


def test_parse_accepts_one_object_and_surrounding_text() -> None:
    (a,) = actions.parse('Sure! {"comment": "c", "done": "finished"} hope that helps')
    assert a == Action("done", "finished", comment="c")
    b = actions.parse('[{"bash": "make", "timeout": 90}, {"write": "f", "content": ""}]')
    assert b[0].timeout == 90.0 and b[1] == Action("write", "f", "")


def test_salvage_keeps_complete_actions_of_a_cut_answer() -> None:
    cut = '[{"comment": "a", "bash": "ls"}, {"read": "/app/goal"}, {"bash": "rm -rf /app/bu'
    assert actions.salvage(cut) == [Action("bash", "ls", comment="a"), Action("read", "/app/goal")]
    assert actions.salvage('[{"bash": "rm -rf /ap') == []
    assert actions.salvage("no list here") == []


def test_a_cut_done_is_closed_but_a_cut_command_is_not() -> None:
    assert actions.salvage('[{"comment": "x", "done": "I found the ker') == [
        Action("done", "I found the ker", comment="x")
    ]
    assert actions.salvage('[{"bash": "echo hi') == []
