"""The agent's command path compiled with mypyc when the image is built (`image.compile_agent`): the
default sandbox runs it, SANDSHELL_AGENT_CODE=source runs the Python source of the same image, and
a compile that fails leaves the image building and the agent whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandshell.sandbox.image import NATIVE, compile_agent, copy_context
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]


def test_the_default_sandbox_runs_the_compiled_agent(sb: Sandbox) -> None:
    """A compile that failed would leave the image running the sources without a word but a log
    line: the default sandbox must say its agent is compiled."""
    assert sb.hello.get("code") == "compiled", sb.hello


def test_the_source_of_the_same_image_runs_when_asked(workspace: Path) -> None:
    settings = _base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5, "agent_code": "source"})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        assert sb.hello.get("code") == "source", sb.hello
        r = sb.execute("cd /etc; export KEPT=1; exit 3")
        assert r.return_code == 3 and r.restarted and r.cwd == "/etc", r
        r = sb.execute("echo $KEPT; pwd")
        assert r.output == "1\n/etc\n" and r.return_code == 0, r


def test_both_agents_tell_the_same_results(workspace: Path, tmp_path: Path) -> None:
    """The compiled agent and its source, side by side, on what a session does most (output on both
    streams, a syntax error, a timeout, an exit, a file written and read): the same results."""
    commands = ["echo out; echo err >&2", "if then", "sleep 5", "cd /tmp && exit 7", "pwd", "printf 'a\\0b'"]
    results = []
    for code, ws in (("compiled", workspace), ("source", tmp_path / "other")):
        ws.mkdir(exist_ok=True)
        with Sandbox(
            workspace=ws,
            settings=_base_settings(sandbox={"exit_timeout": 1.0, "kill_grace": 0.3, "agent_code": code}).sandbox,
        ) as sb:
            assert sb.hello.get("code") == code, sb.hello
            seen = []
            for c in commands:
                r = sb.execute(c)
                seen.append((r.return_code, r.output, r.cwd, r.timed_out, r.restarted, r.syntax_error, r.error))
            sb.write_file("/app/f.txt", "é\n")
            seen.append((sb.read_file("/app/f.txt").content,))
            results.append(seen)
    assert results[0] == results[1], results


def test_a_compile_that_fails_leaves_the_sources_and_says_so(tmp_path: Path) -> None:
    """A module mypyc cannot compile (here: a type error in one): one log line, no extension module
    and no `compiled/` folder. (A type error stops the build before anything is made: the removal
    of a partial set, after a C compiler's failure, is not exercised here.)"""
    context = tmp_path / "context"
    copy_context(context)
    broken = context / "sandshell_agent" / f"{NATIVE[-1]}.py"
    broken.write_text(broken.read_text() + "\n\ndef _wrong() -> int:\n    return 'not an int'\n")
    said: list[str] = []
    assert not compile_agent(context, said.append)
    assert len(said) == 1 and "could not compile the agent" in said[0] and "runs it from its sources" in said[0], said
    assert not list((context / "sandshell_agent").rglob("*.so"))
    assert not (context / "sandshell_agent" / "compiled").exists() and not (context / "build").exists()
