"""The workspace through the engine's API, for an engine that shares no filesystem with the host.

In: the host folder is packed (links stored as links, never followed; no set-id bits) and put
into the container's /app before it starts. Back (rw mode): /app is read out of the container
as a tar, bounded, unpacked with the `data` filter (no absolute paths, nothing outside, no
devices, no set-id bits) into a folder beside the workspace, then mirrored into the workspace
entry by entry without following any link: the container's copy is the truth, so files the
model removed are removed. A tar that cannot be read leaves the workspace as it was.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker.errors

from sandshell.config import Settings
from sandshell.errors import SandboxError
from sandshell.sandbox.engine import copies_back

CHUNK = 1 << 20
TAR_SLACK = 64 * 1024 * 1024  # a tar's headers and padding on top of the files' bytes
MAX_ENTRIES = 1_000_000  # empty files cost no bytes on disk: ~0.5 ms and (held) ~700 bytes each to unpack
MAX_DEPTH = 200  # folders in folders: deeper ones are refused (Python's recursion limit is 1000)


def pack(folder: Path, user: tuple[int, int] | None = None) -> IO[bytes]:
    """The folder's contents as a tar in a temporary file (rewound), owned by `user` if given."""

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if user is not None:
            info.uid, info.gid = user
        info.mode &= ~0o6000  # no set-id bits go in either
        return info

    out = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it)
    with tarfile.open(fileobj=out, mode="w") as tar:
        for entry in sorted(folder.iterdir()):
            tar.add(entry, arcname=entry.name, filter=own)
    out.seek(0)
    return out


@dataclass
class Pulled:
    """What one copy back brought: files and bytes, and entries refused by the filter."""

    files: int = 0
    size: int = 0
    refused: list[str] = field(default_factory=list)  # the first few, each on one line
    refused_count: int = 0
    why: set[str] = field(default_factory=set)

    def refuse(self, name: str, why: str) -> None:
        self.refused_count += 1
        self.why.add(why)
        if len(self.refused) < 5:
            self.refused.append(_one_line(name[:200]))


def _one_line(text: str) -> str:
    """Control characters and undecodable bytes (surrogates) written as escapes: a name cannot fake a log line."""
    return text.encode("unicode_escape", "backslashreplace").decode("ascii")


def pull(container: Any, workspace: Path, limit: int) -> Pulled:
    """Copy the container's /app back into `workspace` (see the module's doc). `limit` bounds the tar (0: none)."""
    with tempfile.TemporaryFile() as tar_file:
        _fetch(container, tar_file, limit)
        tar_file.seek(0)
        staging = workspace.parent / f".{workspace.name}.sync-{secrets.token_hex(4)}"
        staging.mkdir(mode=0o700)
        try:
            pulled = _unpack(tar_file, staging)
            _drop_links_out(staging, pulled)
            _own_like(staging, workspace)
            _mirror(staging, workspace)
            return pulled
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _fetch(container: Any, out: IO[bytes], limit: int) -> None:
    try:
        stream, _stat = container.get_archive("/app", chunk_size=CHUNK)
        size = 0
        for chunk in stream:
            size += len(chunk)
            if limit and size > limit + TAR_SLACK:
                raise SandboxError(
                    f"/app holds more than {limit + TAR_SLACK} bytes; not copied back (the workspace is as before)"
                )
            out.write(chunk)
    except docker.errors.NotFound:
        raise SandboxError("the sandbox container is gone; /app could not be copied back") from None
    except docker.errors.APIError as e:
        raise SandboxError(f"cannot copy /app back from the sandbox: {e.explanation or e}") from None


def _unpack(tar_file: IO[bytes], staging: Path) -> Pulled:
    pulled = Pulled()
    files: set[str] = set()  # regular files unpacked so far: the only things a hard link may name

    def keep(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        name = member.name.partition("/")[2]  # the archive's entries are app/...
        if not name:
            return None
        if name.count("/") >= MAX_DEPTH:  # the mirror and shutil.rmtree recurse once a level
            pulled.refuse(name, "too deep")
            return None
        member = member.replace(name=name, deep=False)
        if member.islnk():
            # a second name of something refused (a FIFO, a link out): tarfile would look the first
            # name up among the members, not find it under its stripped name and raise KeyError
            linkname = member.linkname.partition("/")[2]
            if linkname not in files:
                pulled.refuse(name, "links out of it, devices")
                return None
            member = member.replace(linkname=linkname, deep=False)
        try:
            member = tarfile.data_filter(member, dest)
        except tarfile.FilterError:
            pulled.refuse(name, "links out of it, devices")
            return None
        if member.isfile():
            files.add(name)
            pulled.files += 1
            pulled.size += member.size
        return member

    try:
        with tarfile.open(fileobj=tar_file, mode="r:") as tar:
            count = 0
            while (member := tar.next()) is not None:
                count += 1
                if count > MAX_ENTRIES:
                    raise SandboxError(
                        f"/app holds more than {MAX_ENTRIES} entries; not copied back (the workspace is as before)"
                    )
                tar.extract(member, staging, filter=keep)
                tar.members.clear()  # type: ignore[attr-defined]  # else every member read is kept (~700 bytes)
    except (tarfile.TarError, OSError) as e:
        raise SandboxError(f"the copy of /app could not be unpacked ({e}); the workspace is as before") from None
    return pulled


def _drop_links_out(staging: Path, pulled: Pulled) -> None:
    """Remove the links that lead out of the finished copy. The filter checks each link against the
    tree unpacked so far, so links can lead out together (`a -> b/..`, then `b -> .`); the mirror
    makes the workspace hold exactly this tree, so inside here is inside there."""
    root = os.path.realpath(staging)
    out = []
    for folder, dirs, files in os.walk(staging):  # never into a link; depth bounded by MAX_DEPTH
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path) and os.path.commonpath([os.path.realpath(path), root]) != root:
                out.append(path)
    for path in out:  # after the walk: a link removed first would change where the others lead
        os.unlink(path)
        pulled.refuse(os.path.relpath(path, staging), "links out of it, devices")


def _own_like(staging: Path, workspace: Path) -> None:
    """Files end up owned by the workspace's owner (when we may give them away)."""
    st = workspace.stat()
    if os.geteuid() != 0 or (st.st_uid, st.st_gid) == (0, 0):
        return
    for root, dirs, files in os.walk(staging):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), st.st_uid, st.st_gid)


def _mirror(new: Path, target: Path) -> None:
    """Make `target` hold what `new` holds, moving entries over; never follows a link in either."""
    incoming = {e.name for e in os.scandir(new)}
    for entry in os.scandir(target):
        if entry.name not in incoming:
            _remove(Path(entry.path))
    for name in sorted(incoming):
        src, dst = new / name, target / name
        if src.is_dir() and not src.is_symlink() and dst.is_dir() and not dst.is_symlink():
            _mirror(src, dst)
            shutil.copymode(src, dst, follow_symlinks=False)
            continue
        if dst.is_symlink() or dst.exists():
            _remove(dst)
        os.rename(src, dst)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def fill_volume(client: Any, image: str, volume: str, data: IO[bytes], labels: dict[str, str]) -> None:
    """Put `data` (a tar) into a named volume through a container that is created and never started:
    a read-only mount cannot be written through the archive API, so the ro workspace goes in this way."""
    loader = client.containers.create(
        image,
        command=["true"],
        volumes={volume: {"bind": "/app", "mode": "rw"}},
        labels=labels,  # a session's: the reaper removes it if we die before it is gone
        network_disabled=True,
    )
    try:
        loader.put_archive("/app", data)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            loader.remove(force=True)


class Sync:
    """When /app comes back (archive transfer in rw mode): at the end, when asked, and after an action
    once SANDSHELL_SYNC_SECONDS have passed since the last copy."""

    def __init__(self, workspace: Path, settings: Settings, log: Callable[[str], None]) -> None:
        self.workspace, self.settings, self.log = workspace, settings, log
        self.last = time.monotonic()

    def due(self, container: Any) -> None:
        every = self.settings.sync_seconds
        if every and time.monotonic() - self.last > every:
            self.now(container)

    def now(self, container: Any, quiet: bool = True) -> str:
        """Copy back now if this session copies back; returns what was said ("" when it does not)."""
        if container is None or not copies_back(self.settings):
            return ""
        self.last = time.monotonic()
        try:
            got = pull(container, self.workspace, self.settings.workspace_limit)
        except (SandboxError, OSError) as e:
            self.log(said := f"/app was not copied back: {e}")
            return said
        except Exception as e:  # what /app holds is the model's: nothing in it may end the session
            why = _one_line(f"{type(e).__name__}: {str(e)[:200]}")
            self.log(said := f"/app was not copied back ({why}); the workspace may be partly updated")
            return said
        said = f"/app copied back to {self.workspace}: {got.files} files, {got.size} bytes"
        if got.refused_count:
            said += f"; {got.refused_count} refused ({', '.join(sorted(got.why))}): {', '.join(got.refused)}"
        if got.refused or not quiet:
            self.log(said)
        return said
