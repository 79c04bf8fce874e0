"""The prompt always fits: budgets, head/tail cuts, shrinking in batches, what is always kept."""

from __future__ import annotations

from sandshell.model.actions import Action
from sandshell.model.context import Context, Step, Turn, cut, observe_command
from sandshell.model.types import Message
from sandshell.sandbox.protocol import Result


def count(messages: list[Message]) -> int:
    """A deterministic stand-in tokenizer: 4 characters a token, 5 a message."""
    return sum(len(m["content"]) // 4 + 5 for m in messages)


def turn(i: int, output: str, failed: bool = False) -> Turn:
    r = Result(f"cmd{i}", 1 if failed else 0, output=output, stderr_tail="boom" if failed else "")
    step = Step(Action("bash", f"cmd{i}"), observe_command(r, 2000), f"$ cmd{i} -> short", failed=failed)
    return Turn(answer=f'[{{"bash": "cmd{i}"}}]', steps=[step])


def test_cut_keeps_head_and_tail_and_says_where_the_rest_is() -> None:
    text = "".join(f"line {i}\n" for i in range(10000))
    out = cut(text, 1000, "/app/.sandshell/output/c1.log")
    assert out.startswith("line 0\n") and out.rstrip().endswith("line 9999")
    assert "characters left out; full output in /app/.sandshell/output/c1.log" in out
    assert len(out) < 1200
    assert cut("short", 100) == "short"


def test_huge_outputs_always_fit() -> None:
    ctx = Context(n_ctx=2048, max_tokens=256, margin=32, count=count)
    for i in range(60):
        ctx.turns.append(turn(i, "x" * 50_000))
        msgs, used = ctx.messages("system " * 50, "Begin.")
        assert used <= ctx.limit, (i, used)
        assert msgs[0]["content"].startswith("system")
        assert msgs[-1]["content"] == ctx.turns[-1].observation()  # the last turn is always whole


def test_older_observations_shrink_before_turns_are_dropped() -> None:
    ctx = Context(n_ctx=4096, max_tokens=256, margin=32, count=count)
    for i in range(12):
        ctx.turns.append(turn(i, "y" * 1800))
    msgs, used = ctx.messages("sys", "Begin.")
    assert used <= ctx.limit
    assert ctx.dropped == 0 and any(t.compact for t in ctx.turns)
    assert "$ cmd0 -> short" in msgs[3]["content"]


def test_the_last_error_is_kept_when_turns_are_dropped() -> None:
    ctx = Context(n_ctx=1024, max_tokens=128, margin=16, count=count)
    ctx.turns.append(turn(0, "err", failed=True))
    for i in range(1, 80):
        ctx.turns.append(turn(i, "z" * 300))
    msgs, used = ctx.messages("sys", "Begin.")
    assert used <= ctx.limit and ctx.dropped > 0
    assert any(t.steps[0].action.arg == "cmd0" for t in ctx.turns)
    assert "dropped to fit the context window" in msgs[1]["content"]


def test_prefix_is_stable_between_turns_until_a_shrink() -> None:
    ctx = Context(n_ctx=8192, max_tokens=256, margin=32, count=count)
    ctx.turns.append(turn(0, "a" * 500))
    before, _ = ctx.messages("sys", "Begin.")
    ctx.turns.append(turn(1, "b" * 500))
    after, _ = ctx.messages("sys", "Begin.")
    assert after[: len(before)] == before


def test_failed_command_observation_has_exit_code_and_stderr_tail() -> None:
    r = Result("make", 2, output="a lot of output\n" * 5, stderr_tail="make: *** [all] Error 2\n")
    text = observe_command(r, 4000)
    assert "[exit 2]" in text and "make: *** [all] Error 2" in text
    assert text.endswith("2 root@sandbox:/app #")


def test_a_shrink_leaves_room_so_the_next_turns_keep_the_prefix() -> None:
    ctx = Context(n_ctx=4096, max_tokens=256, margin=32, count=count)
    shrinks = 0
    previous: list[Message] = []
    for i in range(40):
        ctx.turns.append(turn(i, "q" * 1500))
        msgs, used = ctx.messages("sys", "Begin.")
        assert used <= ctx.limit
        if previous and msgs[: len(previous)] != previous:
            shrinks += 1
        previous = msgs
    assert shrinks <= 40 // 3, shrinks  # most turns only append to the prompt
