"""Shared fixtures: real Docker, one sandbox per module where tests do not break it.

The suite never reads the developer's `.env` or settings, and never writes into the checkout:
SANDSHELL_HOME points at a fresh temporary folder for this process and its children.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import hypothesis
import pytest
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

from sandshell import config
from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.model import llama
from sandshell.sandbox import engine
from sandshell.sandbox.sandbox import Sandbox

HOME = tempfile.mkdtemp(prefix="sandshell-test-home-")
for _name in [k for k in os.environ if k.startswith(("LLAMA_", "SANDSHELL_"))]:
    del os.environ[_name]
os.environ["SANDSHELL_HOME"] = HOME
# hypothesis keeps examples and caches under .hypothesis/ in the working folder: not in the checkout
set_hypothesis_home_dir(os.path.join(HOME, "hypothesis"))
hypothesis.settings.register_profile(
    "sandshell", database=DirectoryBasedExampleDatabase(os.path.join(HOME, "hypothesis", "examples"))
)
hypothesis.settings.load_profile("sandshell")


def changed(s: Settings, **sections: dict[str, Any]) -> Settings:
    """`s` with fields changed section by section: `changed(s, sandbox={"exit_timeout": 3.0})`."""
    return s.replace(**{name: getattr(s, name).replace(**fields) for name, fields in sections.items()})


def _base_settings(**sections: dict[str, Any]) -> Settings:
    return changed(config.load(env_file=None, environ={"SANDSHELL_HOME": HOME}), **sections)


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    # In CI a missing engine is a failure, not a skip: engine.client() raises.
    return engine.client()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture
def settings() -> Settings:
    return _base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5})


@pytest.fixture(scope="module")
def shared_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("shared") / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture(scope="module")
def sb(shared_workspace: Path) -> Iterator[Sandbox]:
    """A sandbox shared by a module's tests (each test must leave it usable)."""
    with Sandbox(
        workspace=shared_workspace, settings=_base_settings(sandbox={"exit_timeout": 3.0, "kill_grace": 0.5}).sandbox
    ) as box:
        yield box


NEEDS = ("docker", "model", "network", "browser", "terminal")  # what a test may need beyond Python
NO_ENGINE = "unix:///nonexistent/sandshell-tests/no-engine-for-unmarked-tests.sock"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs none of NEEDS is in the unit tier (`pytest -m unit`)."""
    for item in items:
        if not any(item.get_closest_marker(need) for need in NEEDS):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def only_marked_tests_reach_an_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked `docker` gets no engine and one not marked `model` no model file, so the
    unit tier stays honest on a machine with neither."""
    if request.node.get_closest_marker("docker") is None:
        monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
        monkeypatch.delenv("SANDSHELL_DOCKER_HOST", raising=False)
    if request.node.get_closest_marker("model") is None:
        monkeypatch.setattr(llama, "default_model_path", _no_model)


def _no_model() -> Path:
    raise SandshellError("this test is not marked `model`, so it gets no model file")


@pytest.fixture(scope="session", autouse=True)
def no_leftover_containers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a run with Docker tests, no container labelled sandshell.session may remain."""
    if not any(item.get_closest_marker("docker") for item in request.session.items):
        yield
        return
    docker_client: docker.DockerClient = request.getfixturevalue("docker_client")
    yield
    left = [
        c
        for c in docker_client.api.containers(all=True, filters={"label": engine.LABEL})
        # ours (made in this process), or orphaned by a process a test started; another live
        # session on this machine is none of the suite's business
        if (pid := (c.get("Labels") or {}).get(engine.PID_LABEL, "")) == str(os.getpid()) or not _alive(pid)
    ]
    names = [(c.get("Names") or [c["Id"]])[0] for c in left]
    for c in left:
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.api.remove_container(c["Id"], force=True)
    # a standard session's own network goes with it: the engine is left with none of ours
    networks = docker_client.api.networks(filters={"label": f"{engine.PID_LABEL}={os.getpid()}"}) or []
    for n in networks:
        with contextlib.suppress(docker.errors.APIError):
            docker_client.api.remove_network(n["Id"])
    names += [n["Name"] for n in networks]
    assert not names, f"containers or networks left behind: {names}"


REPO = Path(__file__).resolve().parents[1]
OURS = (".cache/", ".venv/", "build/", ".mypy_cache/", ".ruff_cache/")  # made by ./test.sh before pytest


def _checkout() -> set[str]:
    """The checkout's changed, new and ignored paths, leaving out caches that tools keep."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "-z", "--ignored", "--untracked-files=all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    paths = {entry[3:] for entry in out.split("\0") if entry}
    return {p for p in paths if not p.startswith(OURS) and "__pycache__/" not in p and ".egg-info/" not in p}


@pytest.fixture(scope="session", autouse=True)
def the_checkout_is_left_as_it_was() -> Iterator[None]:
    """Tests never write into the checkout (no .env, no sessions, no workspace files)."""
    before = _checkout()
    yield
    assert _checkout() == before, f"tests wrote into the checkout: {sorted(_checkout() ^ before)}"


def _alive(pid: str) -> bool:
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def pytest_report_header() -> str:
    return f"docker: {shutil.which('docker')}, CI={os.environ.get('CI', '')}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
