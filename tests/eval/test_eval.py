"""The task suite and `eval`: the loader, every shipped task solvable and checked, the CLI, --compare."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandshell.eval import report
from sandshell.eval.cli import main as eval_main
from sandshell.eval.run import Variant, run_suite
from sandshell.eval.task import LEVELS, TaskError, load_task, load_tasks, select
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks"
GOOD = """goal = "Write hi into /app/hi.txt"
level = "trivial"
tags = ["files"]
setup = ["mkdir -p /app/x"]
check = "grep -qx hi /app/hi.txt"
time_limit = 30
step_limit = 4
solution = [{bash = "echo hi > /app/hi.txt"}, [{bash = "cat /app/hi.txt"}, {done = "ok"}]]
"""


def write(folder: Path, name: str, text: str) -> Path:
    p = folder / f"{name}.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_a_good_task_loads_with_its_fields(tmp_path: Path) -> None:
    t = load_task(write(tmp_path, "hi", GOOD))
    assert (t.name, t.level, t.tags, t.setup, t.time_limit, t.step_limit) == (
        "hi",
        "trivial",
        ("files",),
        ("mkdir -p /app/x",),
        30.0,
        4,
    )
    assert t.solution_lines() == [
        '[{"bash": "echo hi > /app/hi.txt"}]',
        '[{"bash": "cat /app/hi.txt"}, {"done": "ok"}]',
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("goal = 'x'\nlevel = 'trivial'\ncheck = \"unclosed", "is not valid TOML"),
        ("level = 'trivial'\ncheck = 'true'", "'goal' is missing"),
        ("goal = 'x'\nlevel = 'hard'\ncheck = 'true'", "'level'"),
        ("goal = 'x'\nlevel = 'easy'\ncheck = 'true'\nchek = 'typo'", "'chek' is not a field"),
        ("goal = 'x'\nlevel = 'easy'\ncheck = 'true'\ntime_limit = -1", "'time_limit'"),
        ("goal = 'x'\nlevel = 'easy'\ncheck = 'true'\nsolution = [{run = 'ls'}]", "answer 1 is not valid"),
        ("goal = 'x'\nlevel = 'easy'\ncheck = 'true'\nname = 'other'", "'name' is not a field"),
        ("goal = ''\nlevel = 'easy'\ncheck = 'true'", "'goal'"),
    ],
)
def test_a_malformed_task_is_one_clear_sentence(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(TaskError) as e:
        load_task(write(tmp_path, "bad", text))
    message = str(e.value)
    assert says in message and "bad.toml" in message and "\n" not in message.strip()


def test_folders_files_and_their_faults(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write(tmp_path / "a", "one", GOOD)
    write(tmp_path / "b", "one", GOOD)
    with pytest.raises(TaskError, match="two tasks are named 'one'"):
        load_tasks([tmp_path / "a", tmp_path / "b"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="holds no task files"):
        load_tasks([tmp_path / "empty"])
    with pytest.raises(TaskError, match="no task file or folder"):
        load_tasks([tmp_path / "nowhere"])
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(TaskError, match="not UTF-8"):
        load_task(tmp_path / "bin.toml")
    tasks = load_tasks([tmp_path / "a"])
    assert select(tasks, ["trivial"], ["files"]) == tasks and select(tasks, ["easy"]) == []
    with pytest.raises(TaskError, match="unknown level"):
        select(tasks, ["hard"])


def test_the_shipped_suite_has_thirty_tasks_in_three_levels() -> None:
    tasks = load_tasks([TASKS])
    assert len(tasks) >= 30
    assert {t.level for t in tasks} == set(LEVELS)
    assert all(t.solution for t in tasks), [t.name for t in tasks if not t.solution]


@pytest.mark.slow
def test_every_task_is_solvable_and_its_check_fails_when_nothing_was_done(tmp_path: Path) -> None:
    """Each reference solution passes its check; a session that does nothing fails it."""
    nothing = tmp_path / "nothing.jsonl"
    nothing.write_text('[{"done": "did nothing"}]\n')
    base = _base_settings(
        sandbox={"exit_timeout": 20.0, "profile": "locked"}, model={"intro": False}
    )  # the tasks are offline
    variants = [
        Variant("solution", base, solutions=True),
        Variant("nothing", base.replace(model=base.model.replace(backend="script", script_path=str(nothing)))),
    ]
    tasks = load_tasks([TASKS])
    results = run_suite(tasks, variants, tmp_path / "out", parallel=2)
    by = {(r.variant, r.task): r for r in results}
    unsolved = [t.name for t in tasks if not by["solution", t.name].passed]
    assert not unsolved, [(n, by["solution", n].error, by["solution", n].check_output) for n in unsolved]
    passed_anyway = [t.name for t in tasks if by["nothing", t.name].passed]
    assert not passed_anyway, f"these checks pass when nothing was done: {passed_anyway}"
    assert all(
        by["nothing", t.name].status == "done" for t in tasks
    )  # setup ran, the session ran: only the check failed


def test_eval_command_runs_tasks_records_each_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    picked = [str(TASKS / f"{n}.toml") for n in ("write-hello", "rename-file", "fix-script")]
    broken = write(tmp_path, "broken", GOOD.replace("grep -qx hi /app/hi.txt", "grep -qx bye /app/hi.txt"))
    out = tmp_path / "run"
    variant = "ref:LLAMA_INTRO=false,SANDSHELL_PROFILE=locked"
    code = eval_main([*picked, str(broken), "--solutions", "--out", str(out), "--variant", variant])
    assert code == 0
    captured = capsys.readouterr()
    doc = json.loads((out / "results.json").read_text())
    assert doc["format"] == report.FORMAT and len(doc["results"]) == 4
    by = {r["task"]: r for r in doc["results"]}
    assert [by[n]["passed"] for n in ("write-hello", "rename-file", "fix-script", "broken")] == [
        True,
        True,
        True,
        False,
    ]
    for r in doc["results"]:
        assert (Path(r["session"]) / "events.jsonl").is_file() and Path(r["session"]).parent == out / "sessions"
    assert doc["summary"]["ref"]["trivial"]["passed"] == 2 and doc["summary"]["ref"]["easy"]["passed"] == 1
    assert "| ref | all | 4/5" not in captured.out and "| ref | all | 4/4" not in captured.out
    assert "| ref | all | 3/4 | 75% |" in captured.out
    assert "fail ref        broken" in captured.out and by["broken"]["session"] in captured.out
    assert "4/4 passed 3" in captured.err  # the progress bar
    assert doc["meta"]["variants"]["ref"]["changed"] == {"intro": "False", "profile": "locked"}


def test_compare_shows_rates_and_the_tasks_that_flipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def r(task: str, level: str, passed: bool) -> dict[str, object]:
        return {
            "task": task,
            "level": level,
            "variant": "v",
            "repeat": 1,
            "passed": passed,
            "status": "done",
            "error": None,
            "check_output": "",
            "steps": 2,
            "tokens_in": 10,
            "tokens_out": 5,
            "seconds": 1.0,
            "ttft": [0.5],
            "cache": [0.9],
            "session": None,
        }

    a = report.document([r("t1", "trivial", False), r("t2", "easy", True)], {})
    b = report.document([r("t1", "trivial", True), r("t2", "easy", True)], {})
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert eval_main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "| v | trivial | 0/1 (0%) | 1/1 (100%) | +100 points |" in out
    assert "| v | easy | 1/1 (100%) | 1/1 (100%) | +0 points |" in out
    assert "v t1: 0/1 passed -> 1/1" in out and "t2:" not in out
    (tmp_path / "c.json").write_text("{}")
    assert eval_main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "c.json")]) == 1
    assert "is not an eval results file" in capsys.readouterr().err


@pytest.mark.model
def test_a_real_model_run_is_measured(tmp_path: Path) -> None:
    tasks = load_tasks([TASKS / "write-hello.toml"])
    s = _base_settings(sandbox={"profile": "locked"}, model={"max_tokens": 96})
    [res] = run_suite(tasks, [Variant("model", s)], tmp_path)
    assert res.status in {"done", "max_steps", "timeout", "stuck"}, res.error
    assert res.steps >= 1 and len(res.ttft) == res.steps and res.tokens_in > 0 and res.tokens_out > 0
    assert all(0 <= c <= 1 for c in res.cache) and all(t > 0 for t in res.ttft)
    assert Path(res.session or "").is_dir()


def test_a_turn_that_runs_past_the_time_limit_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sandshell.eval import run as eval_run

    monkeypatch.setattr(eval_run, "HARD_GRACE", 1.0)
    task = load_task(write(tmp_path, "slow", GOOD.replace("time_limit = 30", "time_limit = 1")))
    script = tmp_path / "slow.jsonl"
    script.write_text('[{"bash": "sleep 25", "timeout": 30}]\n')
    s = _base_settings(
        model={"intro": False, "backend": "script", "script_path": str(script)},
        sandbox={"profile": "locked", "exit_timeout": 30.0},
    )
    [res] = run_suite([task], [Variant("v", s)], tmp_path / "out")
    assert res.status == "timeout" and "past the time limit" in (res.error or "")
    assert res.seconds < 15 and not res.passed


def _eval(args: list[str], home: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "SANDSHELL_"))}
    env["SANDSHELL_HOME"] = str(home)
    return subprocess.Popen(
        [sys.executable, "-m", "sandshell.cli", "eval", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.model
@pytest.mark.docker
def test_eval_in_parallel_on_the_real_model_loses_no_output(tmp_path: Path) -> None:
    """Two sessions load their models at once: every task's line, the table and `results in` arrive."""
    names = ("write-hello", "rename-file", "count-files")
    picked = [str(TASKS / f"{n}.toml") for n in names]
    variant = "m:SANDSHELL_PROFILE=locked,LLAMA_MAX_TOKENS=96,LLAMA_REPEAT_LIMIT=2"
    proc = _eval([*picked, "--parallel", "2", "--out", str(tmp_path / "run"), "--variant", variant], tmp_path)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    for name in names:
        assert sum(name in line for line in out.splitlines()) == 1, out  # its result line
        assert name in err  # its progress line
    assert "| time to first token (mean s) |" in out and "| m | all |" in out
    assert "results in" in err


SLOW = GOOD.replace("time_limit = 30", "time_limit = 120").replace("step_limit = 4", "step_limit = 50")


@pytest.mark.docker
@pytest.mark.parametrize("signals", [["SIGINT"], ["SIGINT", "SIGINT"], ["SIGTERM"]])
def test_eval_stops_on_ctrl_c_and_sigterm_with_a_summary(tmp_path: Path, signals: list[str]) -> None:
    """First Ctrl-C: after the current turn; a second (or SIGTERM): at once. The table is printed either way."""
    sleep = "sleep 30" if len(signals) > 1 or signals == ["SIGTERM"] else "sleep 2"
    script = tmp_path / "slow.jsonl"
    script.write_text("".join(f'[{{"bash": "{sleep} # {i}", "timeout": 60}}]\n' for i in range(40)))
    tasks = [write(tmp_path, f"slow{i}", SLOW) for i in range(4)]
    variant = f"s:LLAMA_BACKEND=script,LLAMA_SCRIPT={script},LLAMA_INTRO=false,SANDSHELL_PROFILE=locked"
    proc = _eval([*map(str, tasks), "--out", str(tmp_path / "run"), "--variant", variant], tmp_path)
    assert proc.stderr is not None
    assert "tasks ×" in proc.stderr.readline()  # the header: the run has begun
    time.sleep(8)  # the first task's session is under way
    started = time.monotonic()
    for name in signals:
        proc.send_signal(getattr(signal, name))
        time.sleep(0.5)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - started
    assert took < 20, f"took {took:.0f}s to stop:\n{err[-2000:]}"
    assert proc.returncode == 128 + getattr(signal, signals[-1]), err[-2000:]
    assert "stopped early" in err and "of 4 tasks ran" in err and "results in" in err
    assert "| variant | level |" in out and "slow0" in out and "slow3" not in out
    doc = json.loads((tmp_path / "run" / "results.json").read_text())
    assert doc["results"][0]["status"] == "quit" and "of 4 tasks ran" in doc["meta"]["stopped"]


def test_the_result_line_says_turns_and_the_table_names_its_columns_in_words() -> None:
    r = {
        "passed": False,
        "variant": "v",
        "task": "t",
        "steps": 1,
        "seconds": 2.0,
        "status": "stuck",
        "error": "the model repeated the same action 4 times in a row",
    }
    assert " 1 turn " in report.result_line(r) and "steps" not in report.result_line(r)
    assert " 2 turns " in report.result_line({**r, "steps": 2})
    head = report.table({}).splitlines()[0]
    assert "time to first token" in head and "prompt reuse" in head and "ttft" not in head
