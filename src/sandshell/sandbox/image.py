"""The sandbox image: built from `container/` and the agent, tagged by a hash of both, on an offline-able base."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandshell.config import SandboxSettings
from sandshell.errors import DockerUnavailable, ImageError
from sandshell.resources import agent_dir, command, container_dir
from sandshell.sandbox.engine import is_local, local_client

PULL_CANDIDATE = "python:3.12-slim-bookworm"
LOOP_SOURCE = "bashloop.c"  # in the agent's folder; compiled into the build context, never the checkout
# Images carry their own key: a container inherits its image's labels, and one made from the
# image by hand must not look like a session to the reaper, which keys on sandshell.session.
LABEL = "sandshell.image"
# The agent's modules on a command's path, compiled with mypyc (chmods, sysfilter and the others are
# started once, or run off the path in threads; mypyc also fails on their ctypes).
NATIVE = (
    "channel",
    "command",
    "execstate",
    "files",
    "frames",
    "outbox",
    "pace",
    "poller",
    "procs",
    "execution",
    "server",
    "settings",
    "shell",
    "status",
    "stdio",
    "watchdog",
)
NATIVE_GROUP = "native"  # their shared runtime: sandshell_agent/native__mypyc.*.so

Log = Callable[[str], None]


def _digest(paths: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _sources(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".so"]


def context_hash() -> str:
    """A hash of everything the image is built from (the Dockerfile, the base bootstrap and the agent)."""
    h = hashlib.sha256()
    for folder in (container_dir(), agent_dir()):
        h.update(_digest(_sources(folder), folder.parent).encode())
    return h.hexdigest()[:12]


def copy_context(context: Path) -> None:
    """Lay out the image's build context in `context` (a new folder): container/ and the agent beside it."""
    skip = shutil.ignore_patterns("__pycache__", "*.so", "compiled")
    shutil.copytree(container_dir(), context, ignore=skip)
    shutil.copytree(agent_dir(), context / "sandshell_agent", ignore=skip)


def bootstrap_tag() -> str:
    folder = container_dir()
    return f"sandshell-base:{_digest([folder / 'bootstrap-base.sh'], folder)}"


def _exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def _try_pull(client: docker.DockerClient, ref: str, log: Log) -> bool:
    log(f"pulling {ref}...")
    try:
        client.images.pull(ref)
        return True
    except docker.errors.APIError as e:
        log(f"cannot pull {ref}: {str(e).splitlines()[0][:160]}")
        return False


def bootstrap_base(tag: str, log: Log, log_file: Path) -> None:
    """Build a Debian base image with debootstrap (needs root and Debian's mirror only)."""
    if os.geteuid() != 0:
        raise ImageError(
            f"no base image is available and building one needs root: run `sudo {command('prepare')}` once, "
            "or set SANDSHELL_BASE_IMAGE to an image you have"
        )
    log(f"building the base image {tag} with debootstrap (about 2-4 minutes, once); log: {log_file}")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_file, "ab") as out:
        script = container_dir() / "bootstrap-base.sh"
        proc = subprocess.Popen(["bash", str(script), tag, "base"], stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                log(f"  ...still building the base image ({time.monotonic() - start:.0f}s): {_last_line(log_file)}")
    if proc.returncode != 0:
        raise ImageError(f"building the base image failed (exit {proc.returncode}); see {log_file}")


def _last_line(path: Path) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 400))
        lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:90] if lines else ""


def resolve_base(client: docker.DockerClient, settings: SandboxSettings, log: Log, log_file: Path) -> str:
    """The base image to build on: the configured one, or (auto) a local bootstrap, a pull, or a new bootstrap."""
    wanted = settings.base_image
    if wanted != "auto":
        if _exists(client, wanted) or _try_pull(client, wanted, log):
            return wanted
        raise ImageError(
            f"base image {wanted} is not here and cannot be pulled; set SANDSHELL_BASE_IMAGE=auto to build one locally"
        )
    local = bootstrap_tag()
    if _exists(client, local):
        return local
    if _try_pull(client, PULL_CANDIDATE, log):
        return PULL_CANDIDATE
    bootstrap_base(local, log, log_file)
    return local


def ensure_image(client: docker.DockerClient, settings: SandboxSettings, log: Log = lambda _m: None) -> str:
    """Return the tag of an up-to-date sandbox image, building it (and its base) if needed. A remote
    engine gets the image built here, streamed to it (`docker save | docker load`)."""
    tag = f"{settings.image}:{context_hash()}"
    if _exists(client, tag):
        return tag
    if not is_local(settings):
        return _load_from_local(client, tag, settings, log)
    return _build(client, tag, settings, log)


def _load_from_local(remote: docker.DockerClient, tag: str, settings: SandboxSettings, log: Log) -> str:
    try:
        local = local_client(settings)
    except DockerUnavailable as e:
        raise ImageError(
            f"the engine at {settings.docker_host or os.environ.get('DOCKER_HOST')} lacks the sandbox image {tag}, "
            f"and no engine here can build it ({e}): start Docker on this machine (or set DOCKER_HOST / a docker "
            "context to one) and run again, or load the image there yourself (docker save | docker load)"
        ) from None
    try:
        if not _exists(local, tag):
            _build(local, tag, settings, log)
        log(f"sending the sandbox image {tag} to the remote engine...")
        start = time.monotonic()
        for item in remote.api.load_image(local.api.get_image(tag)):  # streamed: never whole in memory
            if isinstance(item, dict) and item.get("error"):
                raise ImageError(f"the remote engine refused the sandbox image: {item['error']}")
        log(f"sandbox image {tag} loaded there in {time.monotonic() - start:.0f}s")
    except docker.errors.APIError as e:
        raise ImageError(f"cannot send the sandbox image to the remote engine: {e.explanation or e}") from None
    finally:
        local.close()
    if not _exists(remote, tag):
        raise ImageError(f"the remote engine did not keep the sandbox image {tag} it was sent")
    return tag


def compile_loop(folder: Path, log: Log) -> bool:
    """Build the shell's command loop (`bashloop.c`, a bash builtin) next to the agent in `folder`,
    a copy of the build context. Without a C compiler the image still builds: its agent then runs
    commands through bash functions alone (`SANDSHELL_SHELL_LOOP`), about twice as slow a round trip."""
    source = folder / "sandshell_agent" / LOOP_SOURCE
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log("no C compiler here (cc): the sandbox runs commands without its compiled loop; install gcc for it")
        return False
    # No stack protector or fortified calls: the library must load under the oldest glibc an image may have.
    flags = ["-shared", "-fPIC", "-O2", "-fno-stack-protector", "-U_FORTIFY_SOURCE", "-Wall"]
    out = source.with_suffix(".so")
    try:
        done = subprocess.run([compiler, *flags, "-o", str(out), str(source)], capture_output=True, text=True)
        why = (done.stderr.strip()[-300:] or f"exit status {done.returncode}") if done.returncode else ""
    except OSError as e:  # CC names no program
        why = f"{compiler}: {e.strerror}"
    if why:
        log(f"could not compile the shell's loop ({why}); the sandbox runs commands without it")
        out.unlink(missing_ok=True)
        return False
    return True


def compile_agent(folder: Path, log: Log) -> bool:
    """Compile the agent's command path (`NATIVE`) with mypyc (part of mypy) into extension modules
    in `sandshell_agent/compiled/` of `folder`, a copy of the build context. Built for this Python
    (its headers; the image's must be the same version, as on Debian bookworm's): an image with
    another python3 ignores them (their names say the version) and runs the sources, as it does
    where this fails, where the image cannot import them (the Dockerfile tries), and when the host
    sets SANDSHELL_AGENT_CODE=source. Compiled code differs from CPython's where a value the type
    checker narrowed is read again after a call changed it (a TypeError; warn_unreachable flags
    the re-tests, not every read) and in a slice of anything but a list, tuple, str or bytes, whose
    bounds mypyc evaluates twice (keep calls out of them): the tests run against the compiled agent."""
    script = (
        "import sys; from setuptools import setup; from mypyc.build import mypycify; "
        "mods = [f'sandshell_agent/{m}.py' for m in sys.argv[1:]]; "
        "sys.argv = ['setup', 'build_ext', '--inplace', '-q']; "
        "setup(name='sandshell_agent', script_args=sys.argv[1:], "
        "ext_modules=mypycify(mods, group_name='sandshell_agent.GROUP', opt_level='3', debug_level='0'))"
    ).replace("GROUP", NATIVE_GROUP)
    start, why = time.monotonic(), ""
    try:
        run = [sys.executable, "-c", script, *NATIVE]
        done = subprocess.run(run, cwd=folder, capture_output=True, text=True, timeout=900)
        if done.returncode:
            errors = [ln for ln in (done.stderr + done.stdout).splitlines() if "error" in ln.lower()]
            why = errors[-1] if errors else done.stderr.strip()[-300:] or f"exit status {done.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        why = str(e)
    for made in ("build", ".mypy_cache"):  # (its C sources, objects and type cache: not for the image)
        shutil.rmtree(folder / made, ignore_errors=True)
    agent, loop = folder / "sandshell_agent", Path(LOOP_SOURCE).with_suffix(".so").name
    built = [lib for lib in agent.glob("*.so") if lib.name != loop]
    if not why and len(built) != len(NATIVE) + 1:  # (a module each and their shared runtime)
        why = f"it made {len(built)} modules where {len(NATIVE) + 1} were expected"
    if why:
        log(f"could not compile the agent ({why[:300]}); the sandbox runs it from its sources")
        for lib in built:
            lib.unlink()
        return False
    (agent / "compiled").mkdir(exist_ok=True)  # found first by the package (its __init__), unless told otherwise
    for lib in built:
        lib.rename(agent / "compiled" / lib.name)
    log(f"compiled the agent's command path in {time.monotonic() - start:.0f}s")
    return True


def _build(client: docker.DockerClient, tag: str, settings: SandboxSettings, log: Log) -> str:
    log_file = settings.path(".cache/logs/image-build.log")
    base = resolve_base(client, settings, log, log_file)
    log(f"building the sandbox image {tag} on {base}...")
    with tempfile.TemporaryDirectory(prefix="sandshell-image-") as tmp:
        context = Path(tmp) / "context"
        copy_context(context)
        compile_loop(context, log)
        compile_agent(context, log)
        _build_in(client, context, tag, base, log_file)
    return tag


def _build_in(client: docker.DockerClient, context: Path, tag: str, base: str, log_file: Path) -> None:
    try:
        _, lines = client.images.build(
            path=str(context),
            tag=tag,
            buildargs={"BASE": base},
            labels={LABEL: "image"},
            rm=True,
            forcerm=True,
        )
        _write_build_log(log_file, lines)
    except docker.errors.BuildError as e:
        _write_build_log(log_file, e.build_log)
        raise ImageError(f"building the sandbox image failed: {e.msg}; see {log_file}") from None
    except docker.errors.APIError as e:
        raise ImageError(f"building the sandbox image failed: {e.explanation or e}") from None


def _write_build_log(path: Path, lines: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for item in lines:
            if isinstance(item, dict) and "stream" in item:
                f.write(str(item["stream"]))
