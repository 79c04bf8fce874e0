"""The workspace through the engine's API, for an engine that shares no filesystem with the host.

In: the host folder is packed (links stored as links, never followed; no set-id bits) and put
into the container's /app before it starts. Back (rw mode): /app is read out of the container
as a tar, bounded, unpacked by untar.py (written through directory descriptors, never through a
link; nothing outside, no devices, no set-id bits; tarfile's own filters are not relied on) into
a folder beside the workspace, then mirrored into the workspace entry by entry without
following any link: the container's copy is the truth, so files the model removed are removed.
A tar that cannot be read leaves the workspace as it was.
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
from pathlib import Path
from typing import IO, Any

import docker.errors

from sandshell.config import SandboxSettings
from sandshell.errors import SandboxError
from sandshell.sandbox import delta, hosttree, untar
from sandshell.sandbox.engine import copies_back
from sandshell.sandbox.untar import Pulled, one_line

CHUNK = 1 << 20
TAR_SLACK = 64 * 1024 * 1024  # a tar's headers and padding on top of the files' bytes


def pack(folder: Path, user: tuple[int, int] | None = None, limit: int = 0) -> IO[bytes]:
    """The folder's contents as a tar in a temporary file (rewound), owned by `user` if given; at most
    `limit` bytes of files (apparent size), else SandboxError before anything is sent."""

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if user is not None:
            info.uid, info.gid = user
        info.mode &= ~0o6000  # no set-id bits go in either
        return info

    out = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it)
    holes = _Holes(out)
    try:
        with tarfile.open(fileobj=holes, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            hosttree.pack(tar, folder, hosttree.Bounds(bytes=limit), change=own)
        out.truncate(holes.pos)
    except hosttree.TooBig as e:
        out.close()
        raise SandboxError(f"the workspace {folder} cannot be copied in: {e}") from None
    except OSError as e:
        out.close()
        raise SandboxError(f"the workspace {folder} cannot be copied in: {e.strerror or e}") from None
    out.seek(0)
    return out


class _Holes:
    """A file written with a hole for every block of zeros (a sparse file's, packed): the temporary
    tar takes on the host the blocks the workspace takes."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.pos = out, out.tell()

    def write(self, data: bytes) -> int:
        if len(data) >= 4096 and data.count(0) == len(data):
            self.out.seek(len(data), os.SEEK_CUR)
        else:
            self.out.write(data)
        self.pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self.pos


def pull(container: Any, workspace: Path, limit: int) -> Pulled:
    """Copy the container's /app back into `workspace` (see the module's doc). `limit` bounds the tar (0: none)."""
    with tempfile.TemporaryFile() as tar_file:
        _fetch(container, tar_file, limit)
        tar_file.seek(0)
        return unpack_into(tar_file, workspace)


def unpack_into(tar_file: IO[bytes], workspace: Path) -> Pulled:
    """Make `workspace` hold what the tar (the container's /app, the model's; entries app/...) holds:
    unpacked by untar.py into a folder beside it, then mirrored in without following any link."""
    staging = workspace.parent / f".{workspace.name}.sync-{secrets.token_hex(4)}"
    staging.mkdir(mode=0o700)
    try:
        try:
            pulled = untar.unpack(tar_file, staging, _owner(workspace))
        except untar.TooMany:
            raise SandboxError(
                f"/app holds more than {untar.MAX_ENTRIES} entries; not copied back (the workspace is as before)"
            ) from None
        except (tarfile.TarError, OSError) as e:
            raise SandboxError(f"the copy of /app could not be unpacked ({e}); the workspace is as before") from None
        _mirror(staging, workspace)
        return pulled
    finally:
        hosttree.remove(staging.parent, staging.name)


def _fetch(container: Any, out: IO[bytes], limit: int, path: str = "/app") -> None:
    try:
        stream, _stat = container.get_archive(path, chunk_size=CHUNK)
        size = 0
        for chunk in stream:
            size += len(chunk)
            if limit and size > limit + TAR_SLACK:
                raise SandboxError(
                    f"/app holds more than {limit + TAR_SLACK} bytes; not copied back (the workspace is as before)"
                )
            if chunk.count(0) == len(chunk):  # a sparse file's holes, which the engine writes out: holes here too
                out.seek(len(chunk), os.SEEK_CUR)
            else:
                out.write(chunk)
        out.truncate()
    except docker.errors.NotFound:
        raise SandboxError("the sandbox container is gone; /app could not be copied back") from None
    except docker.errors.APIError as e:
        raise SandboxError(f"cannot copy /app back from the sandbox: {e.explanation or e}") from None


def _owner(workspace: Path) -> tuple[int, int] | None:
    """Files end up owned by the workspace's owner (when we may give them away)."""
    st = workspace.stat()
    if os.geteuid() != 0 or (st.st_uid, st.st_gid) == (0, 0):
        return None
    return st.st_uid, st.st_gid


def _mirror(new: Path, target: Path) -> None:
    """Make `target` hold what `new` holds, moving entries over; never follows a link in either."""
    incoming = {e.name for e in os.scandir(new)}
    for entry in os.scandir(target):
        if entry.name not in incoming:
            _remove(Path(entry.path))
    for name in sorted(incoming):
        src, dst = new / name, target / name
        src_dir, dst_dir = src.is_dir() and not src.is_symlink(), dst.is_dir() and not dst.is_symlink()
        if src_dir and dst_dir:
            _mirror(src, dst)
            shutil.copymode(src, dst, follow_symlinks=False)
            continue
        if src_dir or dst_dir:  # a folder for a file or the other way: the old one goes first
            _remove(dst)
        os.rename(src, dst)  # a file or link over a file or link (never followed): replaced in one step


def _remove(path: Path) -> None:
    hosttree.remove(path.parent, path.name)  # by descriptor, never through a link, however deep


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
    once SANDSHELL_SYNC_SECONDS have passed since the last copy. The end copies everything; the
    others copy only what changed since the last copy or the start when they can (delta.py),
    everything otherwise."""

    def __init__(
        self, workspace: Path, settings: SandboxSettings, log: Callable[[str], None], lister: Callable[[], bytes | None]
    ) -> None:
        """`lister` asks the agent for /app's listing (None when it cannot: the full copy follows)."""
        self.workspace, self.settings, self.log, self.lister = workspace, settings, log, lister
        self.last = time.monotonic()
        self.listing: dict[str, str] | None = None  # /app as listed before the last copy, if nothing was refused

    def begin(self) -> None:
        """A new container holds the workspace as it is here: its listing is the first to compare
        with, so even the first copy back is only what changed. The copy in is the last copy: the
        interval counts from here (a start that took longer than it, on a loaded engine, copied the
        untouched /app back after the first action)."""
        self.listing = delta.parse(self.lister()) if copies_back(self.settings) else None
        self.last = time.monotonic()

    def due(self, container: Any) -> None:
        every = self.settings.sync_seconds
        if every and time.monotonic() - self.last > every:
            self.now(container)

    def now(self, container: Any, quiet: bool = True, full: bool = False) -> str:
        """Copy back now if this session copies back; returns what was said ("" when it does not)."""
        if container is None or not copies_back(self.settings):
            return ""
        self.last = time.monotonic()
        if not full and self.listing is not None and (said := self._changes(container)):
            if not quiet:
                self.log(said)
            return said
        # Before the archive (later changes show next time); not at the end, where the channel is closed
        # (a command's reader may hold it until then) and _fetch's own bound holds.
        listing = None if full else delta.parse(self.lister())
        self.listing = None
        limit = self.settings.workspace_limit
        if listing is not None and limit and (size := delta.size(listing)) > limit:
            self.log(
                said := f"/app was not copied back: its files hold {size} bytes (sparse files counted at their "
                f"full size), more than SANDSHELL_WORKSPACE_LIMIT ({limit}); the workspace is as before"
            )
            return said
        try:
            got = pull(container, self.workspace, self.settings.workspace_limit)
        except (SandboxError, OSError) as e:
            self.log(said := f"/app was not copied back: {e}")
            return said
        except Exception as e:  # what /app holds is the model's: nothing in it may end the session
            why = one_line(f"{type(e).__name__}: {str(e)[:200]}")
            self.log(said := f"/app was not copied back ({why}); the workspace may be partly updated")
            return said
        self.listing = listing if not got.refused_count else None
        said = f"/app copied back to {self.workspace}: {got.files} files, {got.size} bytes"
        if got.refused_count:
            said += f"; {got.refused_count} refused ({', '.join(sorted(got.why))}): {', '.join(got.refused)}"
        if got.refused or not quiet:
            self.log(said)
        return said

    def _changes(self, container: Any) -> str:
        """Copy only what changed since the last copy; "" when everything must be copied instead."""
        before, now = self.listing, delta.parse(self.lister())
        if before is None or now is None:
            return ""
        try:
            files, size, removed = delta.apply(
                container, self.workspace, before, now, self.settings.workspace_limit, _fetch
            )
        except Exception:  # what /app holds is the model's: any surprise means the full copy, which
            return ""  # follows and is the truth
        self.listing = now
        return (
            f"/app copied back to {self.workspace}: {files} changed files, {size} bytes, {removed} removed "
            "(only what changed since the last copy)"
        )
