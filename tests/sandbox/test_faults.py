"""Faults between host, container and agent; profiles and workspace modes."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from sandshell.config import Settings
from sandshell.errors import SandshellError
from sandshell.sandbox.connection import SPARE_WAIT, Connection, ConnectionLost
from sandshell.sandbox.engine import PID_LABEL
from sandshell.sandbox.protocol import Output, Result
from sandshell.sandbox.sandbox import Sandbox

pytestmark = [pytest.mark.docker]


def _events(sb: Sandbox, command: str, timeout: float) -> tuple[list[Output], Result]:
    outputs: list[Output] = []
    for e in sb.stream(command, timeout=timeout):
        if isinstance(e, Output):
            outputs.append(e)
        else:
            return outputs, e
    raise AssertionError("no result")


def test_docker_kill_mid_command_is_reported_fast_and_next_command_runs_fresh(
    workspace: Path, settings: Settings, docker_client: docker.DockerClient
) -> None:
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(exit_timeout=60)) as sb:
        first = sb.container.id
        threading.Timer(0.7, lambda: docker_client.containers.get(first).kill()).start()
        start = time.monotonic()
        _, result = _events(sb, "sleep 50", timeout=60)
        assert result.lost and "died" in (result.error or "")
        assert time.monotonic() - start < 8  # said within seconds, not at the 60 s timeout
        again = sb.execute("echo fresh")
        assert again.output == "fresh\n" and sb.container.id != first


def test_the_agent_cannot_be_killed_or_stopped_from_inside(workspace: Path, settings: Settings) -> None:
    """The agent is PID 1 of the container's namespace: KILL and STOP from inside never reach it, and
    it handles no other signal."""
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        assert sb.hello["pid"] == 1
        container = sb.container.id
        for sig in ("KILL", "STOP", "TERM", "INT", "HUP", "QUIT", "USR1"):
            r = sb.execute(f"kill -{sig} $PPID 1; echo sent-{sig}", timeout=5)
            assert r.output.endswith(f"sent-{sig}\n") and not r.lost and not r.timed_out, (sig, r)
        assert sb.ping() < 1.0  # it answers at once: not stopped
        assert sb.execute("echo back").output == "back\n" and sb.container.id == container  # the same agent


def test_signals_limits_and_priorities_aimed_at_the_agent_change_nothing(workspace: Path, settings: Settings) -> None:
    """The model shares the agent's uid and gid, which is all the kernel asks to lower another
    process's limits or priority (`prlimit --pid 1 --nofile=12:12` killed the agent), and glibc
    catches signal 33 once a thread exists (a few `kill -33 1` loops stalled the agent for 25 s)."""
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        r = sb.execute(
            "grep SigCgt /proc/1/status; for t in /proc/1/task/*; do t=${t##*/};"
            " prlimit --pid $t --nofile=12:12 2>/dev/null && echo limited;"
            " renice -n 19 -p $t >/dev/null 2>&1 && echo reniced; chrt -i -p 0 $t 2>/dev/null && echo idle;"
            " ionice -c3 -p $t 2>/dev/null && echo ioniced; taskset -p 1 $t >/dev/null 2>&1 && echo pinned; done;"
            " for i in 1 2 3 4; do (timeout 4 perl -e 'while (1) { kill 33, 1; kill 32, 1 }' &); done; echo flooding",
            timeout=10,
        )
        assert "SigCgt:\t0000000000000000" in r.output and r.output.endswith("flooding\n"), r.output
        assert not any(w in r.output for w in ("limited", "reniced", "idle", "ioniced", "pinned")), r.output
        start = time.monotonic()
        assert sb.execute("echo hi", timeout=10).output == "hi\n"
        assert sb.ping() < 1.0 and time.monotonic() - start < 3, "the flood slowed the agent"
        r = sb.execute(
            "nice -n 5 true && prlimit --nofile=100:100 true && chrt -i 0 true && ionice -c3 true"
            " && taskset 1 true && echo own"
        )
        assert r.output.endswith("own\n"), r.output  # a command may still do all this to itself
        r = sb.execute("echo 500 > /proc/1/oom_score_adj")  # the kernel allows it: at least it is said
        assert "set the agent's OOM score to 500" in (r.notice or ""), r
        # Raised between commands, it is the background's news, not the next command's doing (it was).
        sb.execute("(sleep 0.5; echo 900 > /proc/1/oom_score_adj) >/dev/null 2>&1 &")
        time.sleep(2)
        r = sb.execute("echo innocent")
        told = "before this command, in the background: something in the sandbox set the agent's OOM score to 900"
        assert told in (r.notice or ""), r


def test_dropped_socket_while_yes_streams_resumes(workspace: Path, settings: Settings) -> None:
    s = settings.replace(sandbox=settings.sandbox.replace(exit_timeout=3.0, output_limit=0, spill_limit=0))
    with Sandbox(workspace=workspace, settings=s.sandbox) as sb:
        seqs: list[int] = []
        received = 0
        dropped = False
        result = None
        for event in sb.stream("yes | head -c 30000000", timeout=20):
            if isinstance(event, Output):
                seqs.append(event.seq)
                received += len(event.data)
                assert set(event.data) <= {"y", "\n"}, event.data[:300]
                if len(seqs) == 50 and not dropped:
                    assert sb.conn is not None and sb.conn.sock is not None
                    sb.conn.sock.shutdown(socket.SHUT_RDWR)
                    dropped = True
            else:
                result = event
        assert dropped and result is not None
        assert result.return_code == 0 and not result.lost
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no chunk lost, none twice
        assert received == 30_000_000 == result.output_bytes  # every byte, exactly once
        assert sb.execute("echo after").output == "after\n"


def test_malformed_and_oversized_frames_get_errors_and_agent_stays_up(workspace: Path, settings: Settings) -> None:
    with Sandbox(workspace=workspace, settings=settings.sandbox) as raw_agent:
        _malformed(raw_agent)


def _malformed(raw_agent: Sandbox) -> None:
    conn = raw_agent.conn
    assert conn is not None
    conn.send_raw(b"this is not json\n")
    assert conn.recv(time.monotonic() + 5)["code"] == "malformed"
    conn.send_raw(b'["a list"]\n')
    assert conn.recv(time.monotonic() + 5)["code"] == "malformed"
    conn.send_raw(b'{"type":"run","id":"big","command":"' + b"x" * (9 * 1024 * 1024) + b'"}\n')
    assert conn.recv(time.monotonic() + 10)["code"] == "too_large"
    conn.send_raw(b'{"type":"run","id":"long","command":"' + b"x" * (300 * 1024) + b'"}\n')
    reply = conn.recv(time.monotonic() + 10)  # a frame that fits, a command over the limit
    assert reply["code"] == "bad_request" and "at most 262,144" in reply["message"]
    for hostile in (
        b'{"type":"run","id":"n","command":"touch /tmp/pwned\\u0000"}',  # a NUL, on the raw channel
        b'{"type":"run","id":"s","command":"touch /tmp/pwned \\ud800"}',  # a lone surrogate
        b'{"type":"write","id":"w","path":"/tmp/pwned","content":"a\\u0000b"}',
        b'{"type":"read","id":"l","path":"/app","limit":"lots"}',
    ):
        conn.send_raw(hostile + b"\n")
        assert conn.recv(time.monotonic() + 5)["code"] == "bad_request", hostile
    assert raw_agent.execute("test -e /tmp/pwned").return_code == 1
    conn.send_raw(b'{"type":"teleport","id":"t"}\n')
    assert conn.recv(time.monotonic() + 5)["code"] == "unknown_type"
    conn.send_raw(b'{"type":"run","id":7}\n')
    assert conn.recv(time.monotonic() + 5)["code"] == "bad_request"
    assert raw_agent.execute("echo fine").output == "fine\n"


def test_read_only_workspace(workspace: Path, settings: Settings) -> None:
    (workspace / "keep.txt").write_text("original")
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(workspace_mode="ro")) as sb:
        assert sb.execute("cat /app/keep.txt").output == "original"
        assert sb.execute("echo changed > /app/keep.txt").return_code != 0
        r = sb.execute("yes | head -c 3000000")
        assert r.truncated and r.spill_path and r.spill_path.startswith("/tmp/")
    assert (workspace / "keep.txt").read_text() == "original"


def test_copied_workspace_never_touches_the_host(workspace: Path, settings: Settings) -> None:
    (workspace / "keep.txt").write_text("original")
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(workspace_mode="copy")) as sb:
        assert sb.execute("cat /app/keep.txt").output == "original"
        assert sb.execute("echo changed > /app/keep.txt && touch /app/new && cat /app/keep.txt").output == "changed\n"
    assert (workspace / "keep.txt").read_text() == "original"
    assert not (workspace / "new").exists()


def test_failed_start_leaves_nothing(workspace: Path, settings: Settings, docker_client: docker.DockerClient) -> None:
    bad = settings.replace(sandbox=settings.sandbox.replace(memory="not-a-size"))
    ours = {"label": ["sandshell.session", f"{PID_LABEL}={os.getpid()}"]}  # (other workers run too)
    before = {c.id for c in docker_client.containers.list(all=True, sparse=True, filters=ours)}
    with (
        pytest.raises(Exception, match=r"(?i)sandbox|memory|invalid"),
        Sandbox(workspace=workspace, settings=bad.sandbox),
    ):
        pass
    after = {c.id for c in docker_client.containers.list(all=True, sparse=True, filters=ours)}
    assert after <= before


@pytest.mark.docker
def test_missing_workspace_is_one_clear_sentence(tmp_path: Path, settings: Settings) -> None:
    """Reset is advised only for the workspace it lays out; any other folder is to be made or named."""
    with (
        pytest.raises(SandshellError, match=r"does not exist; create it first") as other,
        Sandbox(tmp_path / "nope", settings.sandbox),
    ):
        pass
    assert "reset" not in str(other.value)
    home = settings.replace(sandbox=settings.sandbox.replace(workspace=str(tmp_path / "home-workspace")))
    with (
        pytest.raises(SandshellError, match=r"does not exist; run \./reset\.sh to create it"),
        Sandbox(settings=home.sandbox),
    ):
        pass


def test_locked_profile(workspace: Path, settings: Settings) -> None:
    import os

    os.chown(workspace, 1000, 1000)
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(profile="locked")) as sb:
        assert sb.execute("id -u").output.strip() == "1000"
        assert sb.execute("touch /etc/x").return_code != 0  # read-only root
        assert sb.execute("touch /tmp/x && echo > /app/mine && echo ok").output.endswith("ok\n")
        assert sb.execute("cat /sys/class/net/*/operstate | wc -l").output.strip() == "1"  # only lo
        assert sb.execute("curl -s -m 3 http://1.1.1.1 >/dev/null").return_code != 0
        assert sb.execute("cd /tmp && export A=1").return_code == 0
        assert sb.execute("echo $A; pwd").output == "1\n/tmp\n"
    assert (workspace / "mine").stat().st_uid == 1000


def test_a_container_killed_between_commands_is_replaced(
    workspace: Path, settings: Settings, docker_client: docker.DockerClient
) -> None:
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        first = sb.container.id
        assert sb.execute("echo one").output == "one\n"
        docker_client.containers.get(first).kill()
        time.sleep(0.5)
        assert sb.execute("echo two").output == "two\n"
        assert sb.container.id != first


def test_files_made_as_root_go_back_to_a_non_root_workspace_owner(workspace: Path, settings: Settings) -> None:
    import os

    os.chown(workspace, 1234, 2345)
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        assert sb.execute("id -u").output == "0\n"  # standard: root inside
        sb.execute("mkdir -p /app/a/b && echo x > /app/a/b/f && touch /app/top")
        sb.write_file("/app/written.txt", "w")
    for path in ("a", "a/b", "a/b/f", "top", "written.txt"):
        st = (workspace / path).stat()
        assert (st.st_uid, st.st_gid) == (1234, 2345), path


@pytest.mark.parametrize("mode", ["rw", "copy"])
def test_locked_works_on_a_root_owned_workspace(workspace: Path, settings: Settings, mode: str) -> None:
    """As our machines run it (the host user, and so the workspace, is root): locked starts in every
    mode and the model can write /app; in copy mode the host folder is never touched."""
    os.chown(workspace, 0, 0)
    (workspace / "goal").write_text("kept")
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(profile="locked", workspace_mode=mode)) as sb:
        r = sb.execute("echo x > /app/new && cat /app/goal && touch /usr/x 2>/dev/null || echo read-only-root")
        assert r.output == "keptread-only-root\n", r  # the goal has no newline
        assert "CapEff:\t0000000000000000" in sb.execute("grep CapEff /proc/self/status").output
    assert (workspace / "new").exists() == (mode == "rw")


def _quietly(call: Callable[..., object], *args: object) -> Callable[[], None]:
    def run() -> None:
        with contextlib.suppress(OSError):  # (the test may have closed the socket by then)
            call(*args)

    return run


def _linked(monkeypatch: pytest.MonkeyPatch, **waits: float) -> tuple[Connection, socket.socket]:
    """A Connection on one end of a socketpair (the test holds the other: the 'agent'), its waits
    bounded by the kernel as a plain socket's are."""
    from sandshell.sandbox import connection

    for name, seconds in waits.items():
        monkeypatch.setattr(connection, name, seconds)
    ours, theirs = socket.socketpair()
    conn = Connection("test", "")
    conn._blocking(ours)
    conn.sock = ours
    return conn, theirs


def test_a_plain_socket_read_keeps_its_deadline_through_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    conn, agent = _linked(monkeypatch)
    assert conn._poller is not None and conn.sock is not None and conn.sock.gettimeout() is None
    ticks: list[int] = []  # a signal every 0.1 s at the reading thread (a terminal being resized, a timer)
    old = signal.signal(signal.SIGALRM, lambda *_: ticks.append(1))
    signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)
    late = threading.Timer(3.0, _quietly(agent.sendall, b'{"type":"pong","id":"late"}\n'))  # (a read past it gets this)
    late.start()
    took: list[float] = []
    try:
        for wait in (0.7, SPARE_WAIT + 0.5):  # (a read that blocks alone, retried after each signal, never ends)
            start = time.monotonic()
            with pytest.raises(TimeoutError):  # silence: the deadline, on time, however often a signal came
                conn.recv(start + wait)
            took.append(time.monotonic() - start - wait)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert len(ticks) >= 15 and all(-0.05 < t < 0.2 for t in took), (len(ticks), took)
    # A frame that comes after a kernel wait or two is read, not taken for a timeout.
    threading.Timer(0.5, lambda: agent.sendall(b'{"type":"pong","id":"p1"}\n')).start()
    assert conn.recv(time.monotonic() + 5) == {"type": "pong", "id": "p1"}
    late.cancel()
    agent.close()
    with pytest.raises(ConnectionLost):
        conn.recv(time.monotonic() + 5)


def test_a_plain_socket_send_that_nobody_takes_is_a_lost_link(monkeypatch: pytest.MonkeyPatch) -> None:
    conn, agent = _linked(monkeypatch, SEND_WAIT=0.3)
    ended: list[BaseException] = []

    def flood() -> None:  # the agent never reads: buffers fill, then the wait ends
        try:
            for _ in range(10_000):
                conn.send({"type": "ping", "id": "x" * 60_000})
        except BaseException as e:  # (what ended it is the assertion's)
            ended.append(e)

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    sender.join(5)  # (without the kernel's bound the send blocks for ever)
    before_close = list(ended)  # ended by the bound, not by the agent's end going away
    agent.close()
    sender.join(5)
    assert before_close and isinstance(ended[0], ConnectionLost) and "send failed" in str(ended[0]), ended


def test_an_output_frame_with_fields_of_any_type_is_no_crash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A frame's `seq` is read as it is (int() of a string or a list raised out of `stream`), and its
    stream is stdout unless it says stderr (the UI keeps a partial line by stream name: KeyError)."""
    conn, agent = _linked(monkeypatch)
    sb = Sandbox(workspace=tmp_path)
    sb.conn = conn
    for seq, stream in (("x", "stdout"), ([1], "tty"), (None, 3), (2.5, None)):
        out = {"type": "output", "id": "c1", "seq": seq, "stream": stream, "bytes": 2}
        exit_ = {"type": "exit", "id": "c1", "exit_code": 0, "cwd": "/app"}
        agent.sendall(json.dumps(out).encode() + b"\nhi" + json.dumps(exit_).encode() + b"\n")
        events = list(sb._follow("true", "c1", 1.0))
        assert [type(e) for e in events] == [Output, Result]
        assert isinstance(events[0], Output)
        assert (events[0].data, events[0].seq, events[0].stream) == ("hi", 0, "stdout")


def test_a_written_reply_with_a_size_of_any_type_is_no_crash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`write_file` returns the size the agent says, when it is one: int() of "x", a list or an
    infinity raised out of it."""
    conn, agent = _linked(monkeypatch)
    sb = Sandbox(workspace=tmp_path)
    sb.conn, sb.container = conn, object()  # (a container that is there: no restart)
    for n, size in enumerate(["x", [1], None, float("inf"), -3, 7], start=1):
        agent.sendall(json.dumps({"type": "written", "id": f"r{n}", "size": size}).encode() + b"\n")
        assert sb.write_file("/app/f", "hi") == (7 if size == 7 else 0)


def _unreachable_agent(monkeypatch: pytest.MonkeyPatch, sb: Sandbox) -> list[float]:
    """Every reconnect (up to 50) "succeeds" (as when the agent answers a hello) without changing the link;
    returns when each was asked for. Nothing is removed when the sandbox counts as lost."""
    asked: list[float] = []
    monkeypatch.setattr(sb, "_reconnect", lambda resume: asked.append(time.monotonic()) or len(asked) < 50)
    monkeypatch.setattr(sb, "_lost", lambda: None)
    return asked


def test_an_agent_that_reattaches_but_stays_silent_is_given_up_after_one_reconnect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Settings
) -> None:
    """An agent whose timer slack a write action set to 100 s answers every re-attach and never the
    command: unbounded, the host re-attached ~290 times in a second (its deadline had passed, so each
    wait ended at once), then removed a live container."""
    from sandshell.sandbox import boxes
    from sandshell.sandbox import sandbox as module

    monkeypatch.setattr(module, "SILENCE", 0.3)
    conn, agent = _linked(monkeypatch)
    sb = Sandbox(workspace=tmp_path, settings=settings.sandbox.replace(kill_grace=0.1))
    sb.conn = conn
    asked = _unreachable_agent(monkeypatch, sb)
    engine: list[object] = []  # an agent that stopped answering: nothing to ask the engine
    monkeypatch.setattr(boxes, "why_dead", lambda box, e: engine.append(e) or str(e))
    start = time.monotonic()
    (result,) = list(sb._follow("sleep 60", "c1", 0.2))
    took = time.monotonic() - start
    assert len(asked) == 1 and asked[0] - start > 0.5, asked  # once, after the silence
    assert result.lost and result.error is not None and "stopped answering" in result.error, result
    assert 0.5 + 5.1 < took < 8 and not engine, (took, engine)  # the resumed agent had kill_grace + 5 s to speak
    agent.close()


def test_a_link_that_drops_at_every_reconnect_is_retried_a_few_times_backed_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Settings
) -> None:
    conn, agent = _linked(monkeypatch)
    agent.close()  # every read: the agent closed the connection
    sb = Sandbox(workspace=tmp_path, settings=settings.sandbox)
    sb.conn = conn
    asked = _unreachable_agent(monkeypatch, sb)
    (result,) = list(sb._follow("true", "c1", 5.0))
    ended = time.monotonic()
    from sandshell.sandbox.sandbox import RETRIES

    gaps = [b - a for a, b in itertools.pairwise(asked)]
    assert len(asked) == RETRIES and all(g > 0.15 for g in gaps), gaps
    assert ended - asked[-1] < 0.5, ended - asked[-1]  # no back-off before giving up (it slept 1 s)
    assert result.lost and "died mid-command" in str(result.error), result


ALLOC = "import sys, time; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(60)"
WORKERS = 'for i in $(seq 1 40); do python3 -c "$ALLOC" 8 & done; sleep 8; echo survived'


def test_workers_smaller_than_the_agent_that_fill_the_memory_limit_are_the_ones_to_go(
    workspace: Path, settings: Settings
) -> None:
    """The kernel's OOM killer takes the container's process of the highest score, the agent not
    exempt: forty workers of 8 MB each, all smaller than the agent, would take the agent and the
    sandbox down within 1.5 s. The model's processes go first; a model that
    brings its own back to the agent's level is told the sandbox ran out of memory."""
    with Sandbox(workspace=workspace, settings=settings.sandbox.replace(memory="256m", exit_timeout=30)) as sb:
        first = sb.container.id
        assert sb.execute("cat /proc/self/oom_score_adj").output.strip() == "500"
        assert sb.execute("cat /proc/1/oom_score_adj 2>/dev/null || echo hidden").output.strip() in ("0", "hidden")
        r = sb.execute(f"ALLOC={shlex.quote(ALLOC)}; {WORKERS}", timeout=30)
        assert r.output.endswith("survived\n") and "Killed" in r.output and not r.lost, r
        assert sb.execute("pkill -9 -f bytearray; echo alive").output.endswith("alive\n") and sb.container.id == first
        r = sb.execute(f"echo 0 > /proc/self/oom_score_adj; ALLOC={shlex.quote(ALLOC)}; {WORKERS}", timeout=30)
        assert r.lost and "ran out of memory" in (r.error or "") and "SANDSHELL_MEMORY" in (r.error or ""), r


def test_drops_far_apart_each_start_afresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Settings) -> None:
    """A long command over a link that drops now and then is not given up for its sixth drop: the bound
    is on drops that come within EPISODE of the last reconnect."""
    from sandshell.sandbox import sandbox as module

    monkeypatch.setattr(module, "EPISODE", 0.2)
    conn, agent = _linked(monkeypatch)
    sb = Sandbox(workspace=tmp_path, settings=settings.sandbox)
    sb.conn = conn

    def recv(deadline: float) -> dict[str, object]:  # each drop comes longer than EPISODE after the last
        time.sleep(0.25)
        raise ConnectionLost("the agent closed the connection")

    monkeypatch.setattr(conn, "recv", recv)
    asked = _unreachable_agent(monkeypatch, sb)
    monkeypatch.setattr(sb, "_reconnect", lambda resume: asked.append(time.monotonic()) or len(asked) < 8)
    (result,) = list(sb._follow("true", "c1", 5.0))
    assert len(asked) == 8 > module.RETRIES and result.lost, (len(asked), result)
    agent.close()
