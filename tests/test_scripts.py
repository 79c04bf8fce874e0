"""start.sh and reset.sh as scripts, and a host process killed mid-command (the terminal UI: tui/test_terminal.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import docker
import pytest

from sandshell.sandbox import engine

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[1]


def env_for(tmp_path: Path, workspace: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "SANDSHELL_"))}
    env.update(
        SANDSHELL_HOME=str(tmp_path / "home"),  # start.sh makes its .env here, never in the checkout
        SANDSHELL_WORKSPACE=str(workspace),
        SANDSHELL_SESSIONS_DIR=str(tmp_path / "sessions"),
        TERM="xterm-256color",
    )
    env.update(extra)
    return env


def test_start_sh_without_a_terminal_says_so(tmp_path: Path, workspace: Path) -> None:
    proc = subprocess.run(
        ["./start.sh"],
        cwd=REPO,
        env=env_for(tmp_path, workspace),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "needs a terminal" in proc.stderr


def test_reset_sh_archives_then_lays_out_starter_files(tmp_path: Path, workspace: Path) -> None:
    (workspace / "notes.md").write_text("precious")
    (workspace / "deep").mkdir()
    (workspace / "deep" / "f").write_text("x")
    (workspace / "link").symlink_to("/etc/passwd")
    proc = subprocess.run(
        ["./reset.sh", "--yes"], cwd=REPO, env=env_for(tmp_path, workspace), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in workspace.iterdir()) == ["config.json", "goal", "system.md"]
    assert json.loads((workspace / "config.json").read_text())["temperature"] == 0.7
    archives = list((tmp_path / "workspace-archive").glob("workspace-*.tar.gz"))
    assert len(archives) == 1 and str(archives[0]) in proc.stderr
    with tarfile.open(archives[0]) as tar:
        names = tar.getnames()
        assert tar.extractfile("workspace/notes.md").read() == b"precious"  # type: ignore[union-attr]
        assert tar.getmember("workspace/link").issym()  # kept as a link, /etc/passwd not copied
    assert "workspace/deep/f" in names


def test_reset_without_yes_and_without_a_terminal_changes_nothing(tmp_path: Path, workspace: Path) -> None:
    (workspace / "keep").write_text("k")
    proc = subprocess.run(
        ["./reset.sh"],
        cwd=REPO,
        env=env_for(tmp_path, workspace),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "--yes" in proc.stderr and (workspace / "keep").exists()


def test_kill_9_mid_command_leaves_a_readable_log_and_the_next_start_reaps(
    tmp_path: Path, workspace: Path, docker_client: docker.DockerClient
) -> None:
    (workspace / "data").write_text("intact")
    script = tmp_path / "a.jsonl"
    script.write_text('{"bash": "echo started; sleep 60", "timeout": 90}\n{"done": "never"}\n')
    env = env_for(tmp_path, workspace, LLAMA_INTRO="false")
    cli = [sys.executable, "-m", "sandshell.cli"]
    proc = subprocess.Popen(
        [*cli, "--headless", "--goal", "g", "--script", str(script)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    log = None
    while time.monotonic() < deadline:
        logs = list((tmp_path / "sessions").glob("*/events.jsonl"))
        if logs and '"OutputChunk"' in logs[0].read_text():
            log = logs[0]
            break
        time.sleep(0.1)
    assert log is not None, "the command never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["type"] for r in records][-2:] == ["ActionStarted", "OutputChunk"]
    mine = {"label": f"{engine.LABEL}={log.parent.name}"}  # this session's container, not another's
    assert docker_client.containers.list(all=True, sparse=True, filters=mine), (
        "the orphan should be there before the next start"
    )
    prepared = subprocess.run(
        [sys.executable, "-m", "sandshell.cli", "prepare"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert prepared.returncode == 0, prepared.stderr
    assert f"removed leftover container sandshell-{log.parent.name}" in prepared.stderr
    assert not docker_client.containers.list(all=True, sparse=True, filters=mine)
    assert (workspace / "data").read_text() == "intact"


def test_start_sh_without_docker_says_so(tmp_path: Path, workspace: Path) -> None:
    import shutil

    tools = tmp_path / "bin"  # a PATH with what start.sh needs before its Docker check, and no docker
    tools.mkdir()
    for tool in ("bash", "dirname"):
        (tools / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    env = env_for(tmp_path, workspace)
    env["PATH"] = str(tools)
    proc = subprocess.run(
        ["./start.sh", "--headless", "--goal", "x"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Docker is not installed" in proc.stderr


def test_a_headless_start_with_a_missing_model_says_it_once_and_prints_its_json(
    tmp_path: Path, workspace: Path
) -> None:
    """A headless run whose set-up finds an error says it once on stderr and still prints its JSON on
    stdout."""
    env = env_for(tmp_path, workspace, LLAMA_MODEL_PATH="/nope/m.gguf")
    proc = subprocess.run(
        ["./start.sh", "--headless", "--goal", "x"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("the model file /nope/m.gguf does not exist") == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "error" and "/nope/m.gguf" in result["error"]
    env = env_for(tmp_path, workspace, LLAMA_EXIT_TIMEOUT="soon")  # a bad setting: the same
    proc = subprocess.run(
        ["./start.sh", "--headless", "--goal", "x"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("LLAMA_EXIT_TIMEOUT='soon' is not a valid float") == 1, proc.stderr
    assert json.loads(proc.stdout)["status"] == "error"


def test_start_sh_help_is_only_help(tmp_path: Path, workspace: Path) -> None:
    """`./start.sh --help` prints help alone: no set-up check first, none of its lines."""
    for argv in (["--help"], ["eval", "--help"]):
        proc = subprocess.run(
            ["./start.sh", *argv],
            cwd=REPO,
            env=env_for(tmp_path, workspace),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0 and proc.stdout.startswith("usage:") and not proc.stderr, proc.stderr
