"""The disk watchdog's measure on a real folder tree: what inotify tells it, what it must find without
inotify, and that a quick measure after any change agrees with measuring everything afresh."""

from __future__ import annotations

import ctypes
import mmap
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sandshell_agent import diskentry, disktree, inotify, openfiles
from sandshell_agent.disktree import Tree


def fresh(root: Path) -> int:
    return Tree(str(root), watch=False).measure()


def test_a_quick_measure_sees_a_file_grow_and_a_set_id_bit_at_once(tmp_path: Path) -> None:
    """Neither changes the folder's mtime: before inotify only a full measure, seconds later, saw them."""
    (tmp_path / "a").mkdir()
    f = tmp_path / "a" / "f"
    f.write_bytes(b"x" * 4096)
    tree = Tree(str(tmp_path), strip_setid=True)
    assert tree.watches.active, "inotify is available on this kernel"
    tree.measure()
    assert tree.complete
    with f.open("ab") as out:
        out.write(b"y" * 1_000_000)
    assert tree.measure(full=False) == fresh(tmp_path) >= 1_000_000
    f.chmod(0o4755)
    tree.measure(full=False)
    assert not f.stat().st_mode & stat.S_ISUID


def test_nothing_changed_means_nothing_scanned(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"d{i}").mkdir()
    tree = Tree(str(tmp_path))
    total = tree.measure()
    scans: list[str] = []
    real = tree._scan
    tree._scan = lambda path, dev: (scans.append(path), real(path, dev))[1]  # type: ignore[method-assign]
    assert tree.measure(full=False) == total and scans == []
    (tmp_path / "d7" / "new").write_bytes(b"z" * 8192)
    assert tree.measure(full=False) == total + 8192
    assert scans == [str(tmp_path / "d7")]  # the one folder that changed


def test_a_quick_measure_agrees_with_a_fresh_one_through_any_changes(tmp_path: Path) -> None:
    """Files made, grown, removed; folders made, renamed, moved inside others, replaced, swapped, removed."""
    rng = random.Random(7)
    tree = Tree(str(tmp_path))
    tree.measure()
    folders = [tmp_path]
    for step in range(300):
        folders = [p for p in folders if p.is_dir()] or [tmp_path]
        where = rng.choice(folders)
        op = rng.randrange(7)
        if op == 0:
            (where / f"f{step}").write_bytes(b"x" * rng.randrange(1, 20_000))
        elif op == 1:
            new = where / f"d{step}"
            new.mkdir()
            folders.append(new)
        elif op == 2 and where != tmp_path:
            target = rng.choice(folders)
            if not str(target).startswith(str(where)):
                where.rename(target / f"m{step}")
                folders.append(target / f"m{step}")
        elif op == 3 and where != tmp_path:
            shutil.rmtree(where)
            if rng.random() < 0.5:
                where.mkdir()  # the same path, a new folder
        elif op == 4:
            files = [p for p in where.iterdir() if p.is_file()]
            if files:
                with rng.choice(files).open("ab") as out:
                    out.write(b"y" * rng.randrange(1, 50_000))
        elif op == 5:
            for p in [p for p in where.iterdir() if p.is_file()][:2]:
                p.unlink()
        elif op == 6 and where != tmp_path:  # two folders trade places: each path now names the other
            other = rng.choice(folders)
            related = {str(where), str(other)} & {str(p) for p in (*where.parents, *other.parents)}
            if other not in (tmp_path, where) and not related:
                where.rename(tmp_path / "swap")
                other.rename(where)
                (tmp_path / "swap").rename(other)
        assert tree.measure(full=False) == fresh(tmp_path), f"step {step}, op {op}"
    assert tree.complete


def test_two_folders_that_trade_places_are_measured_as_what_they_now_hold(tmp_path: Path) -> None:
    """Each path keeps a watch, but on the other folder: a change in one must not be taken for the other."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f").write_bytes(b"x" * 10_000)
    (b / "f").write_bytes(b"x" * 300_000)
    tree = Tree(str(tmp_path))
    tree.measure()
    a.rename(tmp_path / "t")
    b.rename(a)
    (tmp_path / "t").rename(b)
    (a / "g").write_bytes(b"y" * 50_000)
    assert tree.measure(full=False) == fresh(tmp_path)


def test_folders_past_the_watch_share_are_checked_by_their_mtime(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    tree = Tree(str(tmp_path))
    tree.watches.limit = 2  # as if the host's watches were nearly all taken
    tree.measure()
    assert not tree.complete and len(tree.watches.by_wd) == 2
    (deep / "f").write_bytes(b"x" * 100_000)
    assert tree.measure(full=False) == fresh(tmp_path) >= 100_000


def test_a_tree_without_inotify_still_measures(tmp_path: Path) -> None:
    tree = Tree(str(tmp_path), watch=False)
    tree.measure()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 100_000)
    assert not tree.watches.active and not tree.complete
    assert tree.measure(full=False) >= 100_000


def test_lost_events_mean_a_full_measure(tmp_path: Path) -> None:
    """A write through mmap raises no event; when the kernel's queue overflows, the next quick measure
    measures everything, so it is found."""
    (tmp_path / "m").mkdir()
    sparse = tmp_path / "m" / "sparse"
    size = 4 << 20
    with sparse.open("wb") as out:
        out.truncate(size)
    tree = Tree(str(tmp_path))
    before = tree.measure()
    fd = os.open(sparse, os.O_RDWR)
    try:
        with mmap.mmap(fd, size) as m:
            m[:] = b"w" * size
            m.flush()
    finally:
        os.close(fd)
    tree.watches.changed()  # the open and close raised events: take them, as a quick measure would
    assert tree.measure(full=False) == before  # the write itself said nothing
    queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    burst = tmp_path / "burst"
    burst.mkdir()
    tree.measure(full=False)  # watch the new folder
    for i in range(queued // 2 + 100):  # a create and a close-write each
        (burst / str(i)).touch()
    assert tree.measure(full=False) == fresh(tmp_path) >= before + size


def test_the_share_is_a_sixteenth_of_the_users_watches_at_most_the_cap() -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    assert inotify.share() == min(inotify.CAP, limit // 16)


def test_a_slow_folder_kept_changing_does_not_hold_up_the_others(tmp_path: Path) -> None:
    """A folder of 300,000 files touched every 20 ms would make every quick measure rescan it (a
    second), the next come ten seconds later, and a writer elsewhere take 4.7 GB. A slow folder is
    scanned again only after ten times its scan; meanwhile what inotify names in it is looked at."""
    big, other = tmp_path / "big", tmp_path / "other"
    big.mkdir()
    other.mkdir()
    for i in range(20_000):
        (big / str(i)).touch()
    tree = Tree(str(tmp_path))
    tree.measure()
    assert str(big) in tree.slow, tree.slow  # 20,000 entries take more than SLOW_SCAN here
    scans: list[str] = []
    real = tree._scan
    tree._scan = lambda path, dev: (scans.append(path), real(path, dev))[1]  # type: ignore[method-assign]
    (big / "0").write_bytes(b"x" * 100_000)  # a file grows in the slow folder
    (other / "f").write_bytes(b"y" * 200_000)  # and one elsewhere
    assert tree.measure(full=False) >= fresh(tmp_path)  # nothing missed (a named file counts on top)
    assert scans == [str(other)], scans  # the slow folder was not scanned again
    (big / "sub").mkdir()  # a new folder in it is walked all the same
    (big / "sub" / "g").write_bytes(b"z" * 300_000)
    assert tree.measure(full=False) >= fresh(tmp_path)
    assert tree.measure(full=True) == fresh(tmp_path)  # a full measure settles the count


def test_mapping_lines_are_read_as_the_kernel_writes_them() -> None:
    """Names with spaces, deleted files, anonymous mappings and lines that are not the kernel's."""
    line = "7f2691800000-7f2695800000 rw-s 00001000 00:33 803945                     /root/a b (deleted)\n"
    m = openfiles.mapping(line)
    assert m == openfiles.Mapping(os.makedev(0, 0x33), 803945, 0x1000 + 0x4000000, "/root/a b (deleted)", True)
    lib = openfiles.mapping("7f26-7f27 r--p 00000000 fd:01 12  /usr/lib/x.so\n")
    assert lib is not None and not lib.shared_writable and lib.path == "/usr/lib/x.so"
    anonymous = ("7f26-7f27 rw-p 00000000 00:00 0 ", "7f26-7f27 rw-s 0 00:01 0 [heap]")
    for junk in (*anonymous, "", "x y", "zz-b rw-s 0 0:0 1 /f", "1-2 rw-s 0 00:01 1"):
        assert openfiles.mapping(junk) is None


def test_a_look_counts_a_deleted_file_only_a_mapping_holds_and_flushes_a_mapped_one(tmp_path: Path) -> None:
    dev = tmp_path.stat().st_dev
    gone, kept = tmp_path / "gone", tmp_path / "kept"
    with gone.open("wb+") as f:
        f.truncate(1 << 20)
        held = mmap.mmap(f.fileno(), 1 << 20)  # (Python's mmap keeps a descriptor too: counted either way)
    before = openfiles.look(dev).held
    gone.unlink()
    with kept.open("wb+") as f:
        f.truncate(1 << 20)
        mapped = mmap.mmap(f.fileno(), 1 << 20)
    try:
        held[:] = b"x" * (1 << 20)
        mapped[:] = b"y" * (1 << 20)
        seen = openfiles.look(dev)
        assert seen.held - before >= 1 << 20
        assert str(kept) in seen.written and str(gone) not in seen.written
    finally:
        held.close()
        mapped.close()


def test_a_file_mapped_in_a_folder_whose_name_has_a_newline_is_reported_at_its_real_path(tmp_path: Path) -> None:
    """/proc/PID/maps shows a newline in a name as \\012: the path the measure is told to look at again
    must be the real one, or the file's growth waits for a full measure (under load: past 20 s)."""
    folder = tmp_path / "new\nline"
    folder.mkdir()
    kept = folder / "m"
    with kept.open("wb+") as f:
        f.truncate(1 << 20)
        mapped = mmap.mmap(f.fileno(), 1 << 20)
    try:
        mapped[:] = b"y" * (1 << 20)
        seen = openfiles.look(tmp_path.stat().st_dev)
        assert str(kept) in seen.written, seen.written
    finally:
        mapped.close()


def test_a_mapped_file_replaced_by_a_fifo_or_a_link_is_not_opened(tmp_path: Path) -> None:
    """The model may put anything where a mapped file was: nothing is followed or opened blocking."""
    real = tmp_path / "real"
    real.write_bytes(b"x")
    ino = real.stat().st_ino
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(real)
    dev = tmp_path.stat().st_dev
    assert openfiles._flush(str(real), dev, ino) == str(real)
    assert openfiles._flush(str(tmp_path / "link"), dev, ino) is None
    assert openfiles._flush(str(tmp_path / "fifo"), dev, (tmp_path / "fifo").stat().st_ino) is None
    assert openfiles._flush(str(real), dev, ino + 1) is None  # another file now has the name


def test_processes_past_a_looks_bounds_are_reached_by_the_next_looks(tmp_path: Path) -> None:
    """A process with descriptors or mappings by the ten thousand must not hide the others for good:
    with bounds that let one look read one descriptor, each look begins where the last one stopped."""
    held = tmp_path / "held"
    held.write_bytes(b"x" * (1 << 20))
    with held.open("rb") as f:
        child = subprocess.Popen(["sleep", "60"], stdin=f)  # the deleted file is its first descriptor
    held.unlink()
    try:
        start, dev, looks = 0, tmp_path.stat().st_dev, len(os.listdir("/proc")) + 10
        for _ in range(looks):
            seen = openfiles.look(dev, start, fds=1)
            if seen.held >= 1 << 20:
                break
            start = seen.stopped_at
        else:
            raise AssertionError(f"{looks} looks never reached process {child.pid}")
    finally:
        child.kill()
        child.wait()


HOLDER = """
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(sys.argv[1], os.O_RDONLY)
assert libc.mmap(None, 1 << 20, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0) not in (None, 2**64 - 1)
os.close(fd)
os.unlink(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
"""


def _mmap_shared(size: int, fd: int) -> tuple[ctypes.CDLL, int]:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    return libc, addr


def test_a_deleted_file_only_mapped_counts_at_most_the_cap(tmp_path: Path) -> None:
    """A mapping may reach far past its file's end: 1 TiB of a one-page file, deleted, with no
    descriptor left. Its blocks cannot be read, so it counts at the bytes mapped, but at most `cap`
    (the area's limit), so the notice never says the area 'grew' to 1 TiB."""
    phantom = tmp_path / "phantom"
    phantom.write_bytes(b"p" * 4096)
    dev, cap, size = tmp_path.stat().st_dev, 16 << 20, 1 << 40
    before = openfiles.look(dev, cap=cap).held
    fd = os.open(phantom, os.O_RDONLY)
    libc, addr = _mmap_shared(size, fd)
    os.close(fd)
    phantom.unlink()
    try:
        assert openfiles.look(dev).held - before >= size  # uncapped: the whole mapping
        grew = openfiles.look(dev, cap=cap).held - before
        assert cap <= grew < 2 * cap, f"a 1 TiB phantom counted {grew:,} bytes with a cap of {cap:,}"
    finally:
        libc.munmap(addr, size)


def test_a_look_reads_a_bounded_text_of_mappings_and_still_reaches_every_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process may have 65,530 mappings, each named by a path of 4,096 bytes: a look reads at most
    MAP_BYTES of that text (here made small), and the next looks go on past it to the others."""
    deep = tmp_path
    while len(str(deep)) < 3800:
        deep = deep / ("d" * 200)
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"x" * 4096)
    hoarder = subprocess.Popen(  # ~1.6 MB of maps text: 400 mappings that cannot merge (same offset)
        [
            sys.executable,
            "-c",
            "import mmap, sys; f = open(sys.argv[1], 'rb');"
            " m = [mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ) for _ in range(400)];"
            " print('ready', flush=True); sys.stdin.read()",
            str(deep / "f"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    gone = tmp_path / "gone"
    gone.write_bytes(b"g" * (1 << 20))
    holder = subprocess.Popen(  # a deleted file it holds by a mapping alone
        [sys.executable, "-c", HOLDER, str(gone)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert hoarder.stdout is not None and hoarder.stdout.readline() == "ready\n"
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        most = 64 * 1024
        monkeypatch.setattr(openfiles, "MAP_BYTES", most)
        reads: list[int] = []
        real = openfiles._mappings
        monkeypatch.setattr(openfiles, "_mappings", lambda *a: (reads.append(real(*a)), reads[-1])[1])
        dev, start, looks = tmp_path.stat().st_dev, 0, 4 * len(os.listdir("/proc")) + 40
        for _ in range(looks):
            reads.clear()
            seen = openfiles.look(dev, start)
            assert sum(reads) <= most + 4096 + 100, f"one look read {sum(reads):,} bytes of maps text"
            if seen.held >= 1 << 20:
                break
            start = seen.stopped_at
        else:
            raise AssertionError(f"{looks} looks never reached process {holder.pid} past the hoarder")
    finally:
        for p in (hoarder, holder):
            p.kill()
            p.wait()


def test_the_flushes_take_turns_round_every_mapped_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five files written through mappings, two flushes a look: each look goes on where the last one
    stopped, round the end of the list and on, so no file is flushed twice before every other once."""
    monkeypatch.setattr(openfiles, "FLUSHES", 2)
    maps = []
    for i in range(5):
        with (tmp_path / f"w{i}").open("wb+") as f:
            f.truncate(4096)
            maps.append(mmap.mmap(f.fileno(), 4096))
    try:
        dev, flush_from, order = tmp_path.stat().st_dev, 0, []
        for _ in range(10):
            seen = openfiles.look(dev, flush_from=flush_from)
            order += [Path(p).name for p in seen.written if p.startswith(str(tmp_path))]
            flush_from = seen.flush_from
        counts = {name: order.count(name) for name in sorted(set(order))}
        assert len(counts) == 5 and max(counts.values()) - min(counts.values()) <= 1, f"flushed in turn: {order}"
    finally:
        for m in maps:
            m.close()


def test_a_file_of_many_links_counts_once_wherever_its_links_are(tmp_path: Path) -> None:
    """Write P/F, link it as P/sub/F while P changes too (both folders scanned in one quick measure:
    F counted once, in P), then unlink P/F: P/sub is not scanned again (nothing happened in it), so
    F would count nowhere (repeated, 840 MiB past 47.7 MiB until the next full measure). Every
    folder keeps its files of many links, counted once."""
    sub = tmp_path / "sub"
    sub.mkdir()
    tree = Tree(str(tmp_path))
    tree.measure()
    for i in range(3):
        f = tmp_path / f"f{i}"
        f.write_bytes(b"x" * 1_000_000)
        tree.measure(full=False)
        os.link(f, sub / f.name)
        (tmp_path / "touched").write_bytes(b"")
        tree.measure(full=False)
        f.unlink()
        assert tree.measure(full=False) == fresh(tmp_path) >= (i + 1) * 1_000_000


def linked_twice(folder: Path, n: int) -> None:
    """Files F0..F(n-1) of one page in `folder`, each linked again as sub/Fj."""
    (folder / "sub").mkdir()
    for j in range(n):
        (folder / f"F{j}").write_bytes(b"x" * 4096)
        os.link(folder / f"F{j}", folder / "sub" / f"F{j}")


def test_a_file_of_many_links_grown_through_one_counts_at_its_size_now(tmp_path: Path) -> None:
    """Files linked as P/Fj and P/sub/Fj, then grown through P/Fj (appended, or held open, unlinked
    and written): only P changes, and P/sub's scan, made later in the walk, must not keep each
    file's old size, 4 KiB (2.3 GiB past a 95.4 MiB limit until the next full measure)."""
    linked_twice(tmp_path, 3)
    tree = Tree(str(tmp_path))
    tree.measure()
    with (tmp_path / "F0").open("ab") as f:  # grown through one name
        f.write(b"y" * 3_000_000)
    assert tree.measure(full=False) == fresh(tmp_path) >= 3_000_000
    with (tmp_path / "F1").open("ab") as f:  # held open, its first name unlinked, then grown
        (tmp_path / "F1").unlink()
        tree.measure(full=False)
        f.write(b"z" * 3_000_000)
        f.flush()
        assert tree.measure(full=False) == fresh(tmp_path) >= 6_000_000


def test_files_of_many_links_are_looked_up_in_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A measure looks up at most LINKS_EACH of them (here 2 of 6): the next ones go on with the rest."""
    monkeypatch.setattr(disktree, "LINKS_EACH", 2)
    linked_twice(tmp_path, 6)
    tree = Tree(str(tmp_path))
    tree.measure()
    held = [(tmp_path / f"F{j}").open("ab") for j in range(6)]
    try:
        for j in range(6):  # their first names gone: only the looked-up sizes are new
            (tmp_path / f"F{j}").unlink()
        tree.measure(full=False)
        for f in held:
            f.write(b"y" * 1_000_000)
            f.flush()
        for _ in range(3):
            grown = tree.measure(full=False)
        assert grown == fresh(tmp_path) >= 6_000_000
    finally:
        for f in held:
            f.close()


def test_a_fresh_scan_of_a_file_of_many_links_beats_an_older_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files of many links, all looked up; then each grown through a name in a folder scanned at once:
    the scan's size counts, not the last lookup's (which an older turn made)."""
    monkeypatch.setattr(disktree, "LINKS_EACH", 2)
    linked_twice(tmp_path, 6)
    tree = Tree(str(tmp_path))
    tree.measure()
    for _ in range(3):
        tree.measure(full=False)
    for j in range(6):
        with (tmp_path / f"F{j}").open("ab") as f:
            f.write(b"y" * 1_000_000)
    assert tree.measure(full=False) == fresh(tmp_path) >= 6_000_000


def test_the_images_files_count_nothing_until_they_change_then_in_full(tmp_path: Path) -> None:
    """Deleting one of the image's files frees nothing on the host (its layer keeps it): it must not
    make room. Changing one (a rewrite in place, a chmod) copies it up whole: it counts in full, where
    counting only its growth would let a rewrite of the same size count nothing."""
    for name in ("rewritten", "chmodded", "deleted", "kept"):
        (tmp_path / name).write_bytes(b"i" * 1_000_000)
    tree = Tree(str(tmp_path), image=diskentry.inodes(str(tmp_path)))
    start = tree.measure()
    assert start < 1_000_000  # the image's own files count nothing
    (tmp_path / "deleted").unlink()
    assert tree.measure(full=False) <= start + 4096  # and deleting one makes no room (its folder changed: a block)
    time.sleep(0.01)  # (a ctime of its own)
    with (tmp_path / "rewritten").open("r+b") as f:
        f.write(b"j" * 1_000_000)
    (tmp_path / "chmodded").chmod(0o600)
    assert tree.measure(full=False) == tree.measure(full=True) >= start + 2_000_000


UNREADABLE = """
import os, sys
from sandshell_agent.disktree import Tree
root = sys.argv[1]
tree = Tree(root)
tree.measure()  # the folder made 0300 is given its reading back, and must be watched from then on
with open(os.path.join(root, "h", "f"), "ab") as f:  # an append leaves the folder's mtime alone
    f.write(b"x" * 2_000_000)
print(tree.measure(full=False), Tree(root, watch=False).measure())
"""


def test_a_folder_given_its_reading_back_is_watched_at_once(tmp_path: Path) -> None:
    """As the locked profile's agent does (no capability, the model's uid): a folder the model made
    0300 is scanned once its owner's reading is back, and watched too, so a quick measure sees a file
    in it grow (unwatched, appends would go unseen until a full measure)."""
    python = shutil.which("python3", path="/usr/bin:/bin")  # (the venv's may be in root's home, closed to others)
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root and a system python3, to run the measure as another user")
    root = Path(tempfile.mkdtemp(prefix="unreadable-", dir="/tmp"))
    try:
        (root / "h").mkdir()
        (root / "h" / "f").write_bytes(b"x" * 4096)
        for path in (root, root / "h", root / "h" / "f"):
            os.chown(path, 65534, 65534)
        (root / "h").chmod(0o300)
        env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "PATH": "/usr/bin:/bin"}
        done = subprocess.run(
            [python, "-c", UNREADABLE, str(root)],
            user=65534,
            group=65534,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        quick, whole = map(int, done.stdout.split())
        assert quick == whole >= 2_000_000, done.stdout
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_every_file_counts_at_least_a_block(tmp_path: Path) -> None:
    """Empty files take no block but an inode each: 300,000 of them counted 4.5 MB."""
    before = fresh(tmp_path)
    for i in range(1000):
        (tmp_path / str(i)).touch()
    assert fresh(tmp_path) - before >= 1000 * 4096


def _deep(root: Path, levels: int = 17) -> int:
    """Folders of 250-character names `levels` deep under root (past PATH_MAX as a path: made by
    descriptor), a 1 MB file and a set-uid one at the bottom; returns the bottom's descriptor."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d" * 250, dir_fd=fd)
        sub = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    for name, mode in (("big", 0o644), ("setuid", 0o4755)):
        out = os.open(name, os.O_WRONLY | os.O_CREAT, mode, dir_fd=fd)
        os.write(out, b"x" * 1_000_000 if name == "big" else b"#!/bin/sh\n")
        os.fchmod(out, mode)
        os.close(out)
    return fd


def test_files_under_a_path_past_path_max_count_and_lose_set_id_bits(tmp_path: Path) -> None:
    """Measured by path, at the first folder whose path passes PATH_MAX lstat and scandir fail and
    everything under it counts nothing (241 MB under a 50 MiB workspace limit went unseen). Such a
    folder is walked by descriptor, by every measure, quick ones included (no watch can be put on a
    path that long)."""
    (tmp_path / "top").mkdir()
    tree = Tree(str(tmp_path / "top"), strip_setid=True)
    empty = tree.measure()
    fd = _deep(tmp_path / "top")
    try:
        first = tree.measure(full=False)
        assert first >= empty + 1_000_000, (empty, first)
        assert not os.stat("setuid", dir_fd=fd).st_mode & stat.S_ISUID
        out = os.open("more", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"y" * 2_000_000)
        os.close(out)
        assert tree.measure(full=False) >= first + 2_000_000  # a quick measure, no event from so deep
        assert fresh(tmp_path / "top") == tree.measure(full=True)
    finally:
        os.close(fd)
        shutil.rmtree(tmp_path / "top" / ("d" * 250))
    assert tree.measure(full=False) == empty and not tree.deep


def test_a_deep_walk_ends_past_its_cap_and_its_depth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that keeps adding folders below the walk (or hangs walked ones back under it, which
    kept a walk going 13 s while 360 MB went in) cannot keep it going: each new folder counts
    a block, and past the cap (the area's limit and more) the walk stops, over it; past DEEP_LEVELS
    levels it counts as over the cap."""
    (tmp_path / "top").mkdir()
    fd = _deep(tmp_path / "top", levels=60)
    os.close(fd)
    top = str(tmp_path / "top")
    looked: list[int] = []

    def grown(st: os.stat_result) -> int:
        looked.append(st.st_ino)
        return diskentry.bytes_of(st)

    whole = diskentry.deep_bytes(top, "d" * 250, os.stat(top).st_dev, grown, False)
    assert whole >= 60 * 4096 + 1_000_000 and len(looked) >= 60
    looked.clear()
    capped = diskentry.deep_bytes(top, "d" * 250, os.stat(top).st_dev, grown, False, cap=40_000)
    assert 40_000 < capped < whole and len(looked) <= 12, (capped, len(looked))
    monkeypatch.setattr(diskentry, "DEEP_LEVELS", 30)
    assert diskentry.deep_bytes(top, "d" * 250, os.stat(top).st_dev, grown, False, cap=10**12) == 10**12 + 1
    shutil.rmtree(tmp_path / "top")
