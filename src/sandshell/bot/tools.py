"""Tools a bot's environment gets: installed into an image of their own, cached by the tools' hash.

An environment with tools starts from `<SANDSHELL_IMAGE>-tools-<hash>:<context hash>`: the
sandbox image plus one layer per tool's installation command. The first start builds it; later
starts find it and start as quickly as without tools. It is built with `docker build` (FROM the
sandbox image, one RUN a tool) rather than `docker commit` of a session's container: a commit
always keeps the container's labels (the engine merges them into the image whatever config is
given), so the image would carry `sandshell.session`, and every container made from it by hand
would look like a session to the reaper. A build's image carries only `sandshell.image`.
After the environment starts, each tool's verification command runs in the sandbox.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandshell.config import SandboxSettings
from sandshell.errors import SandshellError
from sandshell.sandbox.image import LABEL, context_hash, ensure_image

log = logging.getLogger(__name__)

MAX_COMMAND = 16 * 1024  # characters of one installation or verification command
MAX_USAGE = 4 * 1024  # characters of one tool's usage instructions (they go into the prompt)
MAX_TOOLS = 16
INSTALL_SECONDS = 900.0  # the most one build of a tool image may take
LOG_TAIL = 12  # lines of the failed step's output quoted in an error
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ToolError(SandshellError):
    """A tool could not be defined, installed or verified."""


@dataclass(frozen=True)
class ToolDefinition:
    """A tool: how to install it (as root, with network), how to check it works, how to use it."""

    installation_command: str
    verification_command: str
    usage_instructions: str
    name: str = ""

    def __post_init__(self) -> None:
        label = self.label
        for what, text, most in (
            ("installation_command", self.installation_command, MAX_COMMAND),
            ("verification_command", self.verification_command, MAX_COMMAND),
            ("usage_instructions", self.usage_instructions, MAX_USAGE),
        ):
            if not isinstance(text, str) or not text.strip():
                raise ToolError(f"{label}: {what} must be a non-empty string")
            if len(text) > most or "\0" in text:
                raise ToolError(f"{label}: {what} must be at most {most:,} characters, without NUL bytes")

    @property
    def label(self) -> str:
        return (
            f"the tool {self.name!r}" if self.name else f"the tool installed by {_short(self.installation_command)!r}"
        )


def tools_hash(tools: Sequence[ToolDefinition]) -> str:
    """What the tool image depends on: the installation commands, in order."""
    h = hashlib.sha256()
    for tool in tools:
        h.update(tool.installation_command.encode() + b"\0")
    return h.hexdigest()[:12]


def tool_image_repo(settings: SandboxSettings, tools: Sequence[ToolDefinition]) -> str:
    """The repository of the tool image; its tag is the sandbox image's (a hash of what builds it)."""
    return f"{settings.image}-tools-{tools_hash(tools)}"


def cluster_tool_image(settings: SandboxSettings, tools: Sequence[ToolDefinition]) -> str:
    """The tool image as a cluster pulls it: SANDSHELL_KUBE_IMAGE's repository with the tools' suffix,
    and its tag (`docker tag` and `docker push` the locally built tool image there)."""
    repo, _, tag = settings.kube_image.rpartition(":")
    if not repo or "/" in tag:  # no tag given
        repo, tag = settings.kube_image, "latest"
    return f"{repo}-tools-{tools_hash(tools)}:{tag}"


def usage_prompt(tools: Sequence[ToolDefinition]) -> str:
    """The tools' usage, as a section of the system prompt ('' without tools)."""
    if not tools:
        return ""
    lines = [f"- {(t.name + ': ') if t.name else ''}{t.usage_instructions.strip()}" for t in tools]
    return "Tools installed for you:\n" + "\n".join(lines)


def dockerfile(base: str, tools: Sequence[ToolDefinition]) -> str:
    """FROM the sandbox image, one RUN per tool (exec form: the command reaches bash unchanged)."""
    lines = [f"FROM {base}", "USER root"]
    for tool in tools:
        lines.append("RUN " + json.dumps(["bash", "-c", "set -e\n" + tool.installation_command]))
    return "\n".join(lines) + "\n"


def ensure_tool_image(
    client: docker.DockerClient, settings: SandboxSettings, tools: Sequence[ToolDefinition]
) -> tuple[str, bool]:
    """The tool image's repository (a settings `image` value) and whether it was built now."""
    if len(tools) > MAX_TOOLS:
        raise ToolError(f"at most {MAX_TOOLS} tools an environment; this one has {len(tools)}")
    repo = tool_image_repo(settings, tools)
    tag = f"{repo}:{context_hash()}"
    try:
        client.images.get(tag)
        log.info("tool image %s found: no installation", tag)
        return repo, False
    except docker.errors.ImageNotFound:
        pass
    base = ensure_image(client, settings, log.info)
    log_file = settings.path(f".cache/logs/tools-{tools_hash(tools)}.log")
    log.info("building the tool image %s on %s (log: %s)", tag, base, log_file)
    start = time.monotonic()
    _build(client, settings, dockerfile(base, tools), tag, tools, log_file)
    log.info("tool image %s built in %.1fs", tag, time.monotonic() - start)
    return repo, True


def _build(
    client: docker.DockerClient,
    settings: SandboxSettings,
    text: str,
    tag: str,
    tools: Sequence[ToolDefinition],
    log_file: Path,
) -> None:
    memory = docker.utils.parse_bytes(settings.memory)
    kwargs: dict[str, Any] = {"labels": {LABEL: f"tools-{tag.rpartition(':')[0]}"}, "rm": True, "forcerm": True}
    kwargs["container_limits"] = {"memory": memory, "memswap": memory}
    lines: list[str] = []
    step, since, error, code = 0, 0, "", None
    deadline = time.monotonic() + INSTALL_SECONDS
    try:
        stream = client.api.build(
            fileobj=io.BytesIO(text.encode()), tag=tag, decode=True, timeout=INSTALL_SECONDS, **kwargs
        )
        for item in stream:
            chunk = ANSI.sub("", str(item.get("stream", "")))
            if chunk.startswith("Step "):
                step, since = step + 1, len(lines)
            lines.extend(ln for ln in chunk.splitlines() if ln.strip())
            if len(lines) > 4000:  # bounded: the end is what matters
                del lines[:2000]
                since = 0
            if item.get("error"):
                error, code = str(item["error"]), (item.get("errorDetail") or {}).get("code")
                break
            if time.monotonic() > deadline:
                error = f"it took longer than {INSTALL_SECONDS:.0f}s"
                break
    except (docker.errors.APIError, docker.errors.BuildError) as e:
        error = str(e).splitlines()[0][:300]
    except OSError as e:  # a read timeout of the engine's answer
        error = f"the engine stopped answering ({e})"
    _write(log_file, lines)
    if error:
        which = tools[step - 3].label if 3 <= step < 3 + len(tools) else "a tool"
        said = [ln for ln in lines[since + 1 :] if not ln.startswith((" ---> ", "Removing intermediate"))]
        why = f"exit {code}" if isinstance(code, int) else " ".join(error.split())[:300]
        tail = " | ".join(said[-LOG_TAIL:])[-800:] or "no output"
        raise ToolError(f"installing {which} failed ({why}); its output ends: {tail}; full log: {log_file}")


def _write(path: Path, lines: list[str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError as e:
        log.warning("cannot write the tool build log %s: %s", path, e)


def _short(text: str, width: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


__all__ = ["ToolDefinition", "ToolError", "ensure_tool_image", "tool_image_repo", "tools_hash", "usage_prompt"]
