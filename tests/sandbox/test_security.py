"""The controls of each profile are in force: configuration as inspected, and behaviour that agrees."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from sandshell import config
from sandshell.config import Settings
from sandshell.model.script import ScriptBackend
from sandshell.runner import SessionSpec, open_session, run_task
from sandshell.sandbox.container import STANDARD_CAPS
from sandshell.sandbox.sandbox import Sandbox
from sandshell.session.control import Control
from sandshell.session.loop import Session
from sandshell.session.recorder import Recorder

pytestmark = [pytest.mark.docker]

# Capability bit numbers (linux/capability.h) of what `standard` keeps.
CAP_BITS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "SETPCAP": 8,
    "NET_BIND_SERVICE": 10,
}


def cap_eff(sb: Sandbox) -> int:
    line = next(ln for ln in sb.execute("grep CapEff /proc/self/status").output.splitlines() if "CapEff" in ln)
    return int(line.split()[1], 16)


@pytest.mark.parametrize("profile", ["standard", "locked"])
def test_container_configuration_matches_the_profile(workspace: Path, settings: Settings, profile: str) -> None:
    os.chown(workspace, 1000, 1000)
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(profile=profile)) as sb:
        sb.container.reload()
        host = sb.container.attrs["HostConfig"]
        assert host["CapDrop"] == ["ALL"]
        assert sorted(host["CapAdd"] or []) == (sorted(STANDARD_CAPS) if profile == "standard" else [])
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["PidsLimit"] == settings.sandbox.pids_limit and host["Memory"] == 2 * 1024**3
        assert host["NanoCpus"] == int(settings.sandbox.cpus * 1e9)
        assert not host["Init"] and host["LogConfig"]["Type"] == "none"  # the agent is PID 1; no log kept
        config_ = sb.container.attrs["Config"]
        assert config_["OpenStdin"] is True and not any(e.startswith("SANDSHELL_TOKEN") for e in config_["Env"])
        assert host["Privileged"] is False
        binds = " ".join(host["Binds"] or [])
        assert "docker.sock" not in binds
        if profile == "locked":
            assert host["ReadonlyRootfs"] is True and host["NetworkMode"] == "none"
            assert sb.container.attrs["Config"]["User"] == "1000:1000"
        # ...and behaviour agrees.
        expected = sum(1 << CAP_BITS[c] for c in STANDARD_CAPS) if profile == "standard" else 0
        assert cap_eff(sb) == expected
        assert sb.execute("ls /var/run/docker.sock /run/docker.sock").return_code != 0
        assert "NoNewPrivs:\t1" in sb.execute("grep NoNewPrivs /proc/self/status").output


def test_locked_forbids_mount_chown_raw_sockets_and_network(workspace: Path, settings: Settings) -> None:
    os.chown(workspace, 1000, 1000)
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(profile="locked")) as sb:
        assert (
            sb.execute("mount -t tmpfs none /tmp/x 2>&1; mkdir -p /tmp/m && mount -t tmpfs t /tmp/m").return_code != 0
        )
        assert sb.execute("touch /tmp/f && chown 0:0 /tmp/f").return_code != 0
        raw = "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"
        assert "PermissionError" in sb.execute(f"python3 -c '{raw}'").output
        tcp = "import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)"
        assert sb.execute(f'python3 -c "{tcp}"').return_code != 0
        assert sb.execute("touch /usr/bin/x").return_code != 0


def test_standard_has_no_raw_sockets_and_no_mount(sb: Sandbox) -> None:
    raw = "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"
    assert "PermissionError" in sb.execute(f"python3 -c '{raw}'").output
    assert sb.execute("mkdir -p /tmp/m && mount -t tmpfs t /tmp/m").return_code != 0


CONNECT_AS = """
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(type(e).__name__)
else:
    print("connected")
"""


HUNT = r"""
out=""
ls -la /run/sandshell* /app/.sandshell 2>/dev/null | grep -q '^s' && out="$out socket-file"
awk 'NR>1 && $6=="01"' /proc/net/unix | grep -q . && out="$out unix-listener"
# (0B00007F is 127.0.0.11: the engine's own DNS resolver, which every network but the default bridge has)
awk 'NR>1 && $4=="0A" && $2 !~ /^0B00007F:/' /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q . \
  && out="$out tcp-listener"
cat /proc/*/environ 2>/dev/null | tr '\0' '\n' | grep -q '^SANDSHELL' && out="$out env"
for f in environ mem maps; do cat /proc/1/$f >/dev/null 2>&1 && out="$out read-$f"; done
readlink /proc/1/fd/0 >/dev/null 2>&1 && out="$out readlink-fd"
(echo '{"type":"run","id":"f","command":"touch /tmp/forged"}' > /proc/1/fd/0) 2>/dev/null && out="$out write-stdin"
python3 -c 'import ctypes; print(ctypes.CDLL(None).ptrace(16, 1, 0, 0))' | grep -qv -- -1 && out="$out ptrace"
echo "found:${out:- nothing}"
"""


def test_nothing_inside_can_reach_read_or_imitate_the_channel(sb: Sandbox) -> None:
    """A process inside hunts for the host's channel: files, listeners, secrets, the agent's memory,
    environment and descriptors, writing into its stdin, tracing it."""
    r = sb.execute(HUNT, timeout=20)
    assert r.output.strip().endswith("found: nothing"), r.output
    assert sb.execute("test -e /tmp/forged").return_code == 1
    assert sb.ping() < 1.0


def test_copy_mode_never_follows_a_symlink_out_of_the_workspace(workspace: Path, settings: Settings) -> None:
    secret = workspace.parent / "host-secret"
    secret.write_text("host only")
    (workspace / "escape").symlink_to(secret)
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(workspace_mode="copy")) as sb:
        assert sb.execute("readlink /app/escape").output.strip() == str(secret)
        assert "host only" not in sb.execute("cat /app/escape 2>&1").output


def test_state_files_that_are_huge_binary_invalid_dirs_or_links(workspace: Path, tmp_path: Path) -> None:
    s = config.load(env_file=None, environ={})
    s = s.replace(
        sandbox=s.sandbox.replace(workspace=str(workspace)),
        model=s.model.replace(intro=False),
        session=s.session.replace(sessions_dir=str(tmp_path / "sessions")),
    )
    steps = [
        {
            "bash": "head -c 100M /dev/zero | tr '\\0' a > /app/system.md; printf 'a\\0b' > /app/goal; "
            "mkdir /app/config.json"
        },
        {"bash": "rm -rf /app/config.json /app/goal; ln -s /etc/shadow /app/config.json; echo '{' > /app/x"},
        {"bash": "rm /app/config.json; echo '{\"temperature\": 9}' > /app/config.json"},
        {"done": "survived"},
    ]
    import json

    backend = ScriptBackend([json.dumps(x) for x in steps])
    collected: list[object] = []

    class Sink:
        def emit(self, e: object) -> None:
            collected.append(e)

    with open_session(SessionSpec(s, None, backend, [Sink()], Control())) as session:
        outcome = session.run()
        notes = [n for t in session.context.turns for n in t.notes]
    assert outcome.status == "done" and outcome.result == "survived"
    text = "\n".join(notes)
    assert "system.md is over" in text  # capped
    assert "config.json: is a directory" in text
    assert "goal: binary file" in text
    assert "config.json: invalid JSON" in text  # the symlink to /etc/shadow: the container's file, not JSON
    assert "temperature" in text  # out of range, reported; the last good settings stay


def test_a_lasting_problem_is_told_once(workspace: Path, tmp_path: Path) -> None:
    (workspace / "goal").write_bytes(b"a\0b")
    s = config.load(env_file=None, environ={})
    s = s.replace(
        sandbox=s.sandbox.replace(workspace=str(workspace)),
        model=s.model.replace(intro=False),
        session=s.session.replace(sessions_dir=str(tmp_path / "sessions")),
    )
    backend = ScriptBackend(['{"bash": "echo 1"}', '{"bash": "echo 2"}', '{"bash": "echo 3"}', '{"done": "x"}'])
    with open_session(SessionSpec(s, backend=backend, control=Control())) as session:
        assert session.run().status == "done"
        notes = [n for t in session.context.turns for n in t.notes]
    assert sum("goal: binary file" in n for n in notes) == 1


def test_the_model_cannot_lift_limits_through_config(workspace: Path, tmp_path: Path) -> None:
    s = config.load(env_file=None, environ={})
    s = s.replace(
        sandbox=s.sandbox.replace(workspace=str(workspace)),
        model=s.model.replace(intro=False),
        session=s.session.replace(sessions_dir=str(tmp_path / "sessions")),
    )
    (workspace / "config.json").write_text('{"n_ctx": 100000, "grammar": "", "exit_timeout": 9999}')
    out = run_task("t", 60, 2, settings=s, backend=ScriptBackend(['{"done": "ok"}']))
    assert out["status"] == "done"
    assert any("cannot be changed from inside the sandbox" in line for line in out["log"])


def test_a_full_disk_for_recordings_stops_cleanly(workspace: Path, tmp_path: Path) -> None:
    (workspace / "keep").write_text("intact")
    s = config.load(env_file=None, environ={})
    s = s.replace(sandbox=s.sandbox.replace(workspace=str(workspace)), model=s.model.replace(intro=False))
    recorder = Recorder(tmp_path / "rec")
    recorder._log = open("/dev/full", "w")  # noqa: SIM115 - every write now fails with ENOSPC
    backend = ScriptBackend(['{"bash": "echo hi"}'] * 5)
    from sandshell.model.turn import Model

    with Sandbox(workspace=workspace, settings=s.sandbox) as sb:
        outcome = Session(s, sb, Model(backend, s.model), [recorder], Control()).run()
        container = sb.container
    assert outcome.status == "error" and "cannot write the session recording" in (outcome.error or "")
    assert "No space left on device" in (outcome.error or "") and "\n" not in (outcome.error or "")
    assert (workspace / "keep").read_text() == "intact"
    with pytest.raises(Exception, match=r"No such container|404"):
        container.reload()


def test_two_sessions_at_once_share_nothing(tmp_path: Path) -> None:
    """Two live sessions, each with a marked process running while the other looks for it."""
    both_started = threading.Barrier(2, timeout=60)
    results: dict[str, dict[str, object]] = {}

    class InStep(ScriptBackend):
        def stream(self, messages, params):  # type: ignore[no-untyped-def]
            if self.index == 1:
                both_started.wait()  # both markers run before either session looks
            return super().stream(messages, params)

    def one(name: str, other: str) -> None:
        ws = tmp_path / name
        ws.mkdir()
        s = config.load(env_file=None, environ={})
        s = s.replace(
            sandbox=s.sandbox.replace(workspace=str(ws)),
            model=s.model.replace(intro=False),
            session=s.session.replace(sessions_dir=str(tmp_path / f"{name}-sessions")),
        )
        script = InStep(
            [
                json.dumps({"bash": f"echo {name} > /app/who; (exec -a marker-{name} sleep 60 &)"}),
                json.dumps(
                    {
                        "bash": f"cat /app/who; ls /app; ps -eo args | grep -c '^marker-{other}'; "
                        f"ps -eo args | grep -c '^marker-{name}'"
                    }
                ),
                '{"done": "ok"}',
            ]
        )
        results[name] = run_task(name, 90, 5, settings=s, backend=script)

    threads = [threading.Thread(target=one, args=pair) for pair in (("alpha", "beta"), ("beta", "alpha"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    for name, other in (("alpha", "beta"), ("beta", "alpha")):
        assert results[name]["status"] == "done", results[name]
        log = [line.strip() for line in results[name]["log"]]  # type: ignore[union-attr]
        at = log.index(name)  # its own workspace, with only its own file
        assert log[at + 1 : at + 3] == ["who", "0"], log[at - 2 : at + 8]  # its file alone; not the other's marker
        assert log[at + 3] == "1"  # its own marker is seen: the look can find one
        assert not any(other in line for line in log if "marker" not in line and not line.startswith("$"))
        assert (tmp_path / name / "who").read_text() == f"{name}\n"
        folders = list((tmp_path / f"{name}-sessions").iterdir())
        assert len(folders) == 1 and other not in (folders[0] / "events.jsonl").read_text().replace(
            f"marker-{other}", ""
        )


def test_an_unwritable_sessions_folder_is_one_sentence(workspace: Path) -> None:
    s = config.load(env_file=None, environ={})
    s = s.replace(
        sandbox=s.sandbox.replace(workspace=str(workspace)), session=s.session.replace(sessions_dir="/proc/sandshell")
    )
    out = run_task("t", 30, 2, settings=s, backend=ScriptBackend(['{"done": "x"}']))
    assert out["status"] == "error" and "cannot write the session recording in /proc/sandshell" in out["error"]
    assert list(workspace.iterdir()) == []


def _bits_gone(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while path.stat().st_mode & (stat.S_ISUID | stat.S_ISGID):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_file_made_set_uid_after_its_folder_was_scanned_loses_the_bit_soon(
    sb: Sandbox, shared_workspace: Path
) -> None:
    """The second layer (nothing inside can set the bits: tests/agent/test_setid.py): a set-id file that got
    into the workspace another way, here the host's own chmod, loses its bits at the agent's scans.
    A chmod leaves the folder's mtime alone: a file created in one quick scan's interval and made
    set-uid after it was seen kept its bits until the next full scan (10 s between commands)."""
    late = shared_workspace / "late"
    timer = threading.Timer(0.3, lambda: os.chmod(late, 0o6755))
    timer.start()
    r = sb.execute("cp /bin/sh /app/late && sleep 0.6")
    timer.join()
    assert r.return_code == 0
    assert _bits_gone(late, 1.5), "kept its set-uid bit after the command ended"
    sb.execute("cp /bin/sh /app/later")
    time.sleep(0.5)
    os.chmod(shared_workspace / "later", 0o6755)
    assert _bits_gone(shared_workspace / "later", 3.5), "kept its set-uid bit between commands"
    sb.execute("rm -f /app/late /app/later")
