"""The README's Python, run as printed, from a fresh SANDSHELL_HOME after the README's set-up."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)


@pytest.mark.docker
@pytest.mark.model
@pytest.mark.slow
def test_the_from_python_snippet_runs_as_printed_from_a_fresh_home(tmp_path: Path) -> None:
    """`sandshell prepare`, then the snippet from another folder: its relative workspace is the home's."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "SANDSHELL_"))}
    env["SANDSHELL_HOME"] = str(home)
    prepared = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", "prepare"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    (snippet,) = [b for b in python_blocks() if "from sandshell.runner import run_task" in b]
    ran = subprocess.run(
        [sys.executable, "-c", snippet], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (home / "workspace" / "notes.md").read_text() == "hi"  # the home's workspace, as printed
    assert not (elsewhere / "workspace").exists()
    sessions = list((home / "sessions").iterdir())
    assert len(sessions) == 1  # run_task's recording, in the home too
