"""The sandbox contract at its edges, written as a hostile process inside (or a broken model) would
try it: NUL bytes and huge requests, FIFOs and links where the agent reads, writes and spills,
a hand-made container from the image, and whose result a watchdog's notice lands in."""

from __future__ import annotations

import hashlib
import shlex
import time
from pathlib import Path

import docker
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandshell.errors import SandboxError
from sandshell.sandbox import engine
from sandshell.sandbox.protocol import LIMITS
from sandshell.sandbox.sandbox import Sandbox
from sandshell_agent.wrapper import CWD_FILE, EXEC_STATE, STATE_FILES
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]


def test_nul_bytes_bad_text_and_oversized_requests_are_refused_and_run_nothing(sb: Sandbox) -> None:
    for command, why in [
        ("touch /app/ran-nul\0; echo", "NUL byte"),
        ("touch /app/ran-big; : " + "x" * LIMITS["command"], "at most 262,144"),
        ("touch /app/ran-surrogate; echo \ud800", "not valid text"),
    ]:
        r = sb.execute(command)
        assert r.return_code is None and why in (r.error or "") and "nothing ran" in (r.error or ""), r
    for bad in (float("nan"), float("inf"), -1.0):
        r = sb.execute("touch /app/ran-timeout", timeout=bad)
        assert r.return_code is None and "finite number of seconds" in (r.error or ""), r
    assert "NUL byte" in (sb.read_file("/app/goal\0.txt").error or "")
    assert "control character" in (sb.read_file("/app/\x1b]52;c;aGk=\x07").error or "")
    assert "at most" in (sb.read_file("/app/" + "d/" * 3000).error or "")
    with pytest.raises(SandboxError, match="NUL byte"):
        sb.write_file("/app/ran-content", "a\0b")
    with pytest.raises(SandboxError, match="at most"):
        sb.write_file("/app/ran-content", "x" * (LIMITS["content"] + 1))
    with pytest.raises(SandboxError, match="control character"):
        sb.write_file("/app/note.txt}}] ]\n] ]", "x")
    r = sb.execute("ls /app | grep -c ran- ; echo alive")
    assert r.output == "0\nalive\n", r  # nothing of any of them ran
    # the largest command allowed does run, and in time
    r = sb.execute(": " + "x" * (LIMITS["command"] - 20) + "; echo big-ok", timeout=20)
    assert r.output == "big-ok\n", r.error


def test_fifos_where_the_agent_reads_or_writes_never_block_it(sb: Sandbox) -> None:
    sb.execute("mkfifo /app/pipe /app/pipe2; (exec 3<>/app/pipe2; sleep 30) &")  # pipe2 has a reader
    start = time.monotonic()
    assert sb.read_file("/app/pipe").error == "not a regular file"
    with pytest.raises(SandboxError, match="No such device"):
        sb.write_file("/app/pipe", "x")  # no reader: refused at once instead of waiting for one
    with pytest.raises(SandboxError, match="not a regular file"):
        sb.write_file("/app/pipe2", "x")
    assert time.monotonic() - start < 5
    assert sb.execute("echo alive; pkill -f 'sleep 30'; rm -f /app/pipe /app/pipe2").output == "alive\n"


PLANT = "mkdir -p /app/.sandshell/output && for i in $(seq 1 400); do {} /app/.sandshell/output/c$i.log; done"


@pytest.mark.parametrize(
    "trap",
    [
        "ln -s /etc /app/.sandshell/output",  # the spill folder is a link out of the workspace
        "touch /app/.sandshell/output",  # ... a file
        PLANT.format("mkfifo"),  # every name the agent would pick is a FIFO
        PLANT.format("ln -s /etc/passwd"),  # ... or a link to a file the model must not reach this way
    ],
)
def test_a_hostile_spill_folder_costs_the_spill_never_the_agent(sb: Sandbox, trap: str) -> None:
    sb.execute("rm -rf /app/.sandshell/output && mkdir -p /app/.sandshell && " + trap, timeout=20)
    passwd = sb.execute("md5sum /etc/passwd").output
    start = time.monotonic()
    r = sb.execute("head -c 3M /dev/zero | tr '\\0' x", timeout=10)
    assert time.monotonic() - start < 10 and r.truncated, r
    if r.spill_path:  # a fresh name beside the planted ones: a regular file, not through a link
        kind = sb.execute(f"stat -c %F {r.spill_path}; readlink -f {r.spill_path}").output
        assert kind == f"regular file\n{r.spill_path}\n", kind
    else:
        assert "could not be kept" in (r.notice or ""), r
    assert sb.execute("md5sum /etc/passwd").output == passwd
    assert sb.execute("ls /etc | grep -c '^c[0-9]*.log'; echo alive").output == "0\nalive\n"
    sb.execute("rm -rf /app/.sandshell/output")


def test_a_container_made_from_the_image_by_hand_is_not_a_session(
    sb: Sandbox, docker_client: docker.DockerClient
) -> None:
    image = sb.container.image.id
    other = docker_client.containers.create(image, command="true")
    try:
        assert not [k for k in other.labels if k.startswith("sandshell.session")], other.labels
        other.start()
        other.wait(timeout=30)
        assert other.name not in engine.reap(docker_client)  # exited, but not ours to remove
        other.reload()
    finally:
        other.remove(force=True)


def test_a_watchdog_notice_belongs_to_the_command_it_is_about(sb: Sandbox) -> None:
    """A fork bomb in the foreground: the notice is on that command's result. One that starts in
    the background after its command ended: on the next result, saying so. Never later."""
    bomb = "bomb() { bomb | bomb & }; bomb"
    during = sb.execute(f"{bomb}; sleep 3; echo never", timeout=6)
    after = sb.execute("echo after")
    assert "processes reached the limit" in (during.notice or ""), during
    # ... and like a timeout, it ends the command line: `echo never` must not run after the trip
    assert "never" not in during.output and during.return_code != 0, during
    assert not (during.notice or "").startswith("before this command"), during
    assert after.notice is None and after.output == "after\n", after
    left = sb.execute(f"(sleep 1; {bomb}) &")  # returns at once; the bomb starts a second later
    time.sleep(3)  # the watchdog finds it between commands
    second = sb.execute("echo second")
    third = sb.execute("echo third")
    assert left.notice is None, left
    assert (second.notice or "").startswith("before this command, in the background: "), second
    assert "processes reached the limit" in (second.notice or "") and second.output == "second\n"
    assert third.notice is None and third.output == "third\n", third


def test_the_model_sees_the_real_head_and_the_real_tail(sb: Sandbox) -> None:
    r = sb.execute("seq 1 100000")  # 588,895 bytes: past the head kept on the host, under the stream cap
    assert not r.truncated and r.output_bytes == 588_895, r
    assert r.output.startswith("1\n2\n3\n") and r.output.endswith("\n99999\n100000\n")
    assert "characters cut here; the end follows" in r.output and len(r.output) < 300 * 1024
    r = sb.execute("seq 1 300000")  # past the stream cap: the end comes from the agent's tail
    assert r.truncated and r.output.endswith("\n299999\n300000\n")


def test_a_shell_that_stops_reading_cannot_stall_the_agent(sb: Sandbox) -> None:
    """A DEBUG trap that sleeps before bash reads the next command, and a command bigger than the
    socket's buffer: the agent must not wait on bash, so the timeout still fires on time."""
    sb.execute("trap '[ -e /tmp/stall ] && sleep 30' DEBUG; (sleep 0.5; touch /tmp/stall) &")
    time.sleep(1.5)  # bash now waits for its next line; the trap will sleep before it reads the command
    start = time.monotonic()
    r = sb.execute(": " + "x" * (LIMITS["command"] - 20), timeout=2)
    assert time.monotonic() - start < 2 + 8, r
    assert r.timed_out or r.restarted, r
    assert sb.execute("rm -f /tmp/stall; echo alive", timeout=5).output.endswith("alive\n")


def test_a_fifo_where_the_shell_saves_its_state_cannot_hang_the_agent(sb: Sandbox) -> None:
    """The state folder is within the model's reach: FIFOs there may cost the shell its saved
    state, never the agent its life."""
    state = "/run/sandshell-agent"
    start = time.monotonic()
    names = " ".join(f"{state}/{name}" for name in (*STATE_FILES, EXEC_STATE))
    plant = f"cd /tmp; rm -f {names}; mkfifo {names}; kill -9 $$"
    r = sb.execute(plant, timeout=3)  # the shell dies; its replacement reads the saved state
    assert time.monotonic() - start < 3 + 8 and r.restarted and not r.lost, r
    r = sb.execute("echo alive", timeout=3)
    assert r.output == "alive\n" and not r.lost, r
    sb.execute(f"rm -f {names}; cd /app")


def test_links_and_fifos_where_bash_saves_its_state_cost_one_command_at_most(sb: Sandbox) -> None:
    """Bash writes its state with `>|`, which follows a link and waits on a FIFO: planted there,
    they made every later command write through the link and then hang until its timeout."""
    state = "/run/sandshell-agent"
    plant = (
        f"cd /tmp; rm -f {state}/state0.sh {state}/state1.sh {state}/trap {state}/cwd; mkfifo {state}/state1.sh"
        f" {state}/trap; ln -s /app/through-a-link {state}/state0.sh; ln -s /app/through-a-link {state}/cwd; kill -9 $$"
    )
    r = sb.execute(plant, timeout=3)
    assert r.restarted and not r.lost, r
    for _ in range(2):
        r = sb.execute("echo alive", timeout=3)
        assert r.output == "alive\n" and not r.timed_out and not r.restarted, r
    assert sb.execute("test -e /app/through-a-link").return_code == 1
    sb.execute("cd /app")


def test_folders_where_bash_saves_its_state_cost_one_command_at_most(sb: Sandbox) -> None:
    """A folder made in place of each state file: every save failed from then on, and when the
    shell was replaced, its start said "trap: Is a directory" into the next command's output."""
    state = "/run/sandshell-agent"
    names = " ".join(f"{state}/{name}" for name in (*STATE_FILES, EXEC_STATE))
    r = sb.execute(f"cd /tmp; rm -rf {names}; mkdir {names}; mkdir {state}/state0.sh/inside; kill -9 $$", timeout=3)
    assert r.restarted and not r.lost, r
    r = sb.execute("echo alive", timeout=3)
    assert r.output == "alive\n" and not r.restarted, r
    r = sb.execute("cd /etc; export SAVED=yes; exit 3", timeout=3)  # saved again, so kept past the restart
    assert r.return_code == 3, r
    r = sb.execute("echo $SAVED; pwd", timeout=3)
    assert r.output == "yes\n/etc\n", r
    # ... and where a program that replaced the shell leaves its cwd and exports, planted this time
    sb.execute(f"rm -rf {state}/{EXEC_STATE} {state}/{CWD_FILE}; mkdir {state}/{EXEC_STATE} {state}/{CWD_FILE}")
    r = sb.execute("cd /usr && export BY_EXEC=yes && exec sleep 0.2", timeout=3)
    assert r.restarted and r.cwd == "/usr", r
    assert sb.execute("echo $BY_EXEC").output == "yes\n"
    sb.execute("unset SAVED BY_EXEC; cd /app")


def test_every_byte_of_a_command_reaches_bash_as_sent_in_any_locale(sb: Sandbox) -> None:
    """Bash reads the command in blocks of a length it is told (`read -N`), sent as ASCII and
    decoded with `printf %b`: backslashes, escapes, `%`, tabs and text past ASCII come through as
    they were, whatever locale the model set, and 200 KB arrive whole."""
    text = "a\\b \\c \\x41 \\0101 \\u00e9 %d %b \t é 日本 🙂 end"
    for setup in ("true", "export LC_ALL=C", "export LC_ALL=POSIX LANG=C; readonly LC_ALL"):
        sb.execute(setup)
        r = sb.execute(f"printf '%s\\n' {shlex.quote(text)}")
        assert r.output == text + "\n" and r.return_code == 0, (setup, r)
    body = "".join(f"{i} é \\ \\x41 %s 日本 $HOME `x`\n" for i in range(6000))
    r = sb.execute(f"cat > /tmp/big <<'END'\n{body}END\nmd5sum < /tmp/big", timeout=20)
    assert r.output.split()[0] == hashlib.md5(body.encode()).hexdigest(), r
    assert len(body.encode()) > 200_000


def test_what_a_shell_left_when_it_ended_is_not_restored_after_later_commands(sb: Sandbox) -> None:
    """Where a shell was when it exited, and what a program that replaced it had exported, count for
    the shell that follows it only: a later shell killed is restored from the later commands."""
    r = sb.execute("cd /etc && export LEFT=exit && exit 3")
    assert r.restarted and r.cwd == "/etc", r
    sb.execute("cd /tmp; unset LEFT")
    r = sb.execute("kill -9 $$")
    assert r.restarted and r.cwd == "/tmp", r
    assert sb.execute('echo "[${LEFT-unset}]"').output == "[unset]\n"
    r = sb.execute("cd /usr && export BY_EXEC=yes && exec sleep 0.2")  # state read from the program's /proc
    assert r.restarted and r.cwd == "/usr", r
    assert sb.execute("echo $BY_EXEC").output == "yes\n"
    sb.execute("cd /var; unset BY_EXEC")
    r = sb.execute("kill -9 $$")
    assert r.restarted and r.cwd == "/var", r
    assert sb.execute('echo "[${BY_EXEC-unset}]"').output == "[unset]\n"
    sb.execute("cd /app")


def test_restarts_do_not_pile_up_in_the_saved_state(sb: Sandbox) -> None:
    """The saved functions come back in the next shell, the wrapper's own among them: a wrapper
    function named for each shell (its fallback was) made every save bigger after each restart."""
    sb.execute("f() { echo f; }")
    count = "declare -F | wc -l; declare -f | wc -c"
    first = sb.execute(count).output.split()
    for _ in range(4):
        assert sb.execute("exit 3").restarted
    r = sb.execute(count + "; f")
    assert r.output.split() == [*first, "f"], r


json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
requests = st.fixed_dictionaries(
    {"type": st.sampled_from(["run", "read", "write", "state", "ping", "interrupt", "ack", "hello", "x", 7, None])},
    optional={
        k: json_value
        for k in ("id", "command", "path", "content", "limit", "timeout", "append", "seq", "resume", "nonce", "version")
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests)
def test_the_agent_answers_any_request_and_stays_up(sb: Sandbox, frame: dict[str, object]) -> None:
    """Any field of any type in any request: the agent answers or refuses, and still serves the next one."""
    if frame.get("type") == "run" and isinstance(frame.get("command"), str):
        frame["command"] = "true"  # random text as a command would run: its validation is what is fuzzed
    if frame.get("type") == "write" and isinstance(frame.get("path"), str):
        frame["path"] = "/tmp/fuzz/" + str(frame["path"]).replace("/", "_")[:40]
    assert sb.conn is not None
    container = sb.container.id
    sb.conn.send(frame)  # type: ignore[arg-type]
    assert sb.ping() < 5.0  # answered, not stuck
    assert sb.container.id == container, "the agent died and a fresh sandbox took its place"


@pytest.mark.parametrize("code", ["compiled", "source"])
def test_an_id_nested_as_deep_as_the_parser_takes_is_answered_not_a_crash(workspace: Path, code: str) -> None:
    """Every reply echoes the request's id: one nested a level or two short of the parser's limit
    parses, then cannot be encoded back (RecursionError), which must not end the agent, PID 1
    (compiled, or from source, whose encoding runs a frame or two deeper)."""
    settings = _base_settings(sandbox={"exit_timeout": 3.0, "agent_code": code})
    with Sandbox(workspace=workspace, settings=settings.sandbox) as sb:
        container = sb.container.id
        assert sb.conn is not None
        for depth in range(900, 1001):
            sb.conn.send_raw(b'{"type":"ping","id":' + b"[" * depth + b"]" * depth + b"}\n")
        assert sb.ping() < 5.0
        assert sb.container.id == container, "the agent died and a fresh sandbox took its place"
