"""The Bot API end to end: LLM.ask and clear_history, Bot.run's status paths, the bot types; real model once."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandshell import config
from sandshell.bot import LLM, Bot, BotType, Environment, Permission, ToolDefinition
from sandshell.bot.bot import BROWSER
from sandshell.config import Settings
from sandshell.errors import ModelError, SandshellError
from sandshell.model.script import ScriptBackend
from sandshell.model.types import Message, Stats
from tests.conftest import HOME, _base_settings

pytestmark = [pytest.mark.model, pytest.mark.docker]


class Recording(ScriptBackend):
    """The script backend, keeping every prompt it was given."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines)
        self.prompts: list[list[Message]] = []

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats]:
        self.prompts.append([dict(m) for m in messages])
        yield from super().stream(messages, params)


def _model_settings(**env: str) -> Settings:
    return config.load(env_file=None, environ={"SANDSHELL_HOME": HOME, **env})


def _llm(lines: list[str], prompt: str = "You look around.") -> tuple[LLM, Recording]:
    backend = Recording(lines)
    return LLM(prompt, settings=_base_settings().model, backend=backend), backend


# -- LLM ----------------------------------------------------------------------------------------
def test_ask_returns_the_parsed_actions_and_keeps_the_exchange() -> None:
    llm, backend = _llm(['[{"comment": "look", "bash": "ls -la"}]', '{"done": "seen"}'])
    assert llm.ask("What is here?") == [{"comment": "look", "bash": "ls -la"}]
    assert llm.ask("And now?") == [{"done": "seen"}]
    second = backend.prompts[1]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[1]["content"] == "What is here?" and second[3]["content"] == "And now?"
    assert json.loads(second[2]["content"]) == [{"comment": "look", "bash": "ls -la"}]
    assert second[0]["content"].startswith("You look around.") and '{"bash": "command"}' in second[0]["content"]


def test_ask_lowers_a_timeout_above_the_limit_to_it() -> None:
    llm, _ = _llm(['[{"bash": "sleep 1", "timeout": 2000}, {"bash": "ls", "timeout": 5}]'])
    cap = llm.timeout_cap
    assert llm.ask("Go") == [{"bash": "sleep 1", "timeout": cap}, {"bash": "ls", "timeout": 5}]
    assert json.loads(llm.history[-1]["content"])[0]["timeout"] == cap  # the history holds what would run


def test_clear_history_keeps_only_the_system_prompt() -> None:
    llm, backend = _llm(['{"bash": "ls"}', '{"bash": "pwd"}'])
    llm.ask("one")
    llm.clear_history()
    assert llm.messages == [{"role": "system", "content": llm.system_prompt}]
    llm.ask("two")
    assert [m["content"] for m in backend.prompts[1]][1:] == ["two"]


def test_an_answer_that_is_not_actions_is_a_model_error_and_is_not_kept() -> None:
    llm, _ = _llm(["this is not JSON at all", '{"done": "ok"}'])
    with pytest.raises(ModelError, match="not a list of actions"):
        llm.ask("hello")
    assert llm.history == []
    assert llm.ask("again") == [{"done": "ok"}]


def test_the_oldest_exchanges_go_when_the_context_is_full() -> None:
    s = _base_settings(model={"n_ctx": 512, "max_tokens": 64})
    backend = Recording(['{"bash": "ls"}'] * 30)
    backend.n_ctx = 512
    llm = LLM("You look around.", settings=s.model, backend=backend)
    for i in range(30):
        llm.ask(f"message {i} " + "x" * 200)
    assert backend.count(backend.prompts[-1]) <= 512 - 64 - s.model.context_margin
    assert backend.prompts[-1][-1]["content"].startswith("message 29") and len(llm.history) < 20
    with pytest.raises(ModelError, match="shorter message"):
        llm.ask("y" * 4000)


@pytest.mark.model
def test_ask_on_the_real_default_model_gives_actions() -> None:
    llm = LLM("You are a careful shell user.", settings=_model_settings(LLAMA_SEED="5", LLAMA_MAX_TOKENS="96").model)
    answer = llm.ask("List the files in /app.")
    assert answer and all(len({"bash", "read", "write", "done"} & set(a)) == 1 for a in answer)
    assert len(llm.history) == 2


# -- Bot ----------------------------------------------------------------------------------------
@pytest.fixture
def folder(tmp_path: Path) -> Path:
    f = tmp_path / "docs"
    f.mkdir()
    (f / "report.txt").write_text("The answer is 42.\n")
    return f


def _bot(folder: Path, lines: list[str], **kw: Any) -> tuple[Bot, Recording]:
    llm, backend = _llm(lines)
    s = _base_settings(model={"intro": False})
    return Bot(
        "reader", BotType.READING, Permission.READ_ONLY, llm=llm, folder_to_mount=folder, settings=s, **kw
    ), backend


def test_run_is_true_when_the_task_finished(
    folder: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    bot, backend = _bot(folder, ['{"bash": "cat /app/report.txt"}', '{"done": "it says 42"}'])
    with caplog.at_level(logging.INFO, logger="sandshell.bot"):
        out = bot.run("What does the report say?", timeout=60, max_iterations=5)
    assert set(out) == {"status", "result", "error", "log"}
    assert out["status"] is True and out["result"] == "it says 42" and out["error"] is None
    assert out["log"][0].startswith("reader: done after 2 turn(s)")
    assert any("The answer is 42." in line for line in out["log"])  # the command's output, in the transcript
    system = backend.prompts[0][0]["content"]
    assert "You are a reading bot" in system and "read-only" in system and "What does the report say?" in system
    assert any("reader: done" in r.getMessage() for r in caplog.records)  # logged, never printed
    assert capfd.readouterr() == ("", "")


def test_run_is_false_at_the_step_limit_with_the_reason_in_the_log(folder: Path) -> None:
    bot, _ = _bot(folder, ['{"bash": "ls /app"}', '{"bash": "wc -l /app/report.txt"}', '{"bash": "true"}'])
    out = bot.run("Never finish.", timeout=60, max_iterations=2)
    assert out["status"] is False and out["result"] is None
    assert "step limit (2)" in out["error"] and out["log"][0].startswith("reader: max_steps after 2 turn(s)")


def test_a_read_only_bot_cannot_write_its_folder(folder: Path) -> None:
    bot, _ = _bot(
        folder,
        ['{"bash": "echo x > /app/report.txt"}', '{"write": "/app/new.txt", "content": "x"}', '{"done": "tried"}'],
    )
    out = bot.run("Overwrite the report.", timeout=60, max_iterations=5)
    assert out["status"] is True
    assert "Read-only file system" in "\n".join(out["log"])
    assert sorted(p.name for p in folder.iterdir()) == ["report.txt"]
    assert (folder / "report.txt").read_text() == "The answer is 42.\n"


def test_bad_input_is_a_false_status_with_one_sentence(folder: Path) -> None:
    bot, _ = _bot(folder, ['{"done": "x"}'])
    assert bot.run("  ", timeout=10)["error"] == "the task is empty; say what the bot should do"
    gone = _bot(folder / "missing", ['{"done": "x"}'])[0].run("Read.", timeout=10)
    assert gone["status"] is False and "does not exist" in gone["error"]


def test_a_given_environment_is_used_and_kept(folder: Path) -> None:
    s = _base_settings(model={"intro": False})
    with Environment(folder, Permission.READ_WRITE, settings=s) as env:
        llm, _ = _llm(['{"bash": "echo made > /app/made.txt"}', '{"done": "made it"}'])
        bot = Bot("writer", BotType.WRITING, Permission.READ_WRITE, llm=llm, environment=env, settings=s)
        assert bot.run("Make a file.", timeout=60, max_iterations=3)["status"] is True
        assert env.execute("cat /app/made.txt")["output"] == "made\n"  # still running after the run
        ro_bot = Bot("r", BotType.READING, Permission.READ_ONLY, llm=llm, environment=env, settings=s)
        assert "read-only" not in ro_bot.system_prompt([])  # the environment's permission is the one in force
    assert (folder / "made.txt").read_text() == "made\n"


def test_each_type_has_its_own_prompt_and_browsing_gets_network_and_a_browser(folder: Path) -> None:
    s = _base_settings(sandbox={"profile": "locked"})
    prompts = {t: Bot("b", t, settings=s, llm=_llm(["[]"])[0]).system_prompt([]) for t in BotType}
    assert len(set(prompts.values())) == 4
    browsing = Bot("b", BotType.BROWSING, settings=s, llm=_llm(["[]"])[0])
    assert browsing.tools == (BROWSER,) and browsing.profile == "standard"
    assert "lynx -dump" in browsing.system_prompt(browsing.tools)
    assert Bot("b", BotType.READING, settings=s, llm=_llm(["[]"])[0]).profile == "locked"
    custom = Bot("b", BotType.CUSTOM, system_prompt="You count sheep.", settings=s, llm=_llm(["[]"])[0])
    assert "Your role: You count sheep." in custom.system_prompt([])
    with pytest.raises(SandshellError, match="lacks its tools"):
        Bot("b", BotType.BROWSING, environment=Environment(folder, settings=s), settings=s)


@pytest.mark.slow
def test_a_browsing_bot_reads_a_page_with_its_text_browser(folder: Path) -> None:
    """The browser is installed from Debian's packages at the first start (then cached)."""
    (folder / "page.html").write_text("<html><body><h1>Opening hours</h1><p>Open 9 to 5.</p></body></html>")
    s = _base_settings(model={"intro": False})
    llm, _ = _llm(['{"bash": "lynx -dump -nolist file:///app/page.html"}', '{"done": "open 9 to 5"}'])
    out = Bot("web", BotType.BROWSING, llm=llm, folder_to_mount=folder, settings=s).run("Hours?", timeout=600)
    assert out["status"] is True, out["error"]
    assert any("Open 9 to 5." in line for line in out["log"]) and any(
        "OPENING HOURS" in ln.upper() for ln in out["log"]
    )


@pytest.mark.model
def test_a_bot_runs_on_the_real_default_model(folder: Path) -> None:
    s = _model_settings(LLAMA_SEED="3", LLAMA_MAX_TOKENS="128")
    tool = ToolDefinition("true", "python3 --version", "python3 runs Python scripts.", name="python3")
    bot = Bot(
        "reader", BotType.READING, Permission.READ_ONLY, folder_to_mount=folder, settings=s, additional_tools=[tool]
    )
    out = bot.run("What does /app/report.txt say?", timeout=240, max_iterations=3)
    assert out["status"] is (out["error"] is None) and out["log"][0].startswith("reader: ")
    assert any(line.startswith("model: [") for line in out["log"])  # the model answered with actions
    assert out["status"] or "step limit (3)" in out["error"] or "repeated" in out["error"], out["error"]
