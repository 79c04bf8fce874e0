"""No host folder but the workspace is writable from inside: the debugging transports bound a
socket folder into the container that the model could fill past every limit (271 MB against
50 MB limits, no notice). They are gone; the channel is the agent's stdin and stdout."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandshell import config
from sandshell.errors import SettingsError
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import HOME


@pytest.mark.parametrize("name", ["SANDSHELL_TRANSPORT", "SANDSHELL_RUNTIME_DIR"])
def test_the_socket_transports_cannot_be_asked_for(name: str) -> None:
    with pytest.raises(SettingsError, match=f"{name} is not a setting sandshell knows"):
        config.load(env_file=None, environ={"SANDSHELL_HOME": HOME, name: "unix"})


@pytest.mark.docker
@pytest.mark.parametrize("mode", ["rw", "copy"])
def test_the_only_host_folder_bound_in_is_the_workspace(workspace: Path, mode: str) -> None:
    settings = config.load(env_file=None, environ={"SANDSHELL_HOME": HOME})
    settings = settings.replace(sandbox=settings.sandbox.replace(workspace_mode=mode))
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        sb.container.reload()
        binds = [m for m in sb.container.attrs["Mounts"] if m["Type"] == "bind"]
        assert [m["Source"] for m in binds] == ([str(workspace.resolve())] if mode == "rw" else []), binds
        assert not sb.container.attrs["HostConfig"].get("PortBindings"), sb.container.attrs["HostConfig"]
        r = sb.execute("grep -c ' /run/sandshell ' /proc/self/mountinfo; ls -A /run/sandshell 2>&1 | head -1")
        assert r.output.startswith("0\n"), r  # no socket folder, nothing listening
