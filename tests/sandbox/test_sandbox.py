"""The sandbox against a real Docker engine: shell semantics, streaming, limits and faults."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sandshell.sandbox.protocol import Output
from sandshell.sandbox.sandbox import Sandbox
from tests.conftest import _base_settings

pytestmark = [pytest.mark.docker]

GRACE = 4.0  # seconds past the timeout a killed command may take to come back


def test_cwd_env_and_functions_persist(sb: Sandbox) -> None:
    sb.execute("cd /tmp && export GREETING='hello world' && greet() { echo \"hi $1\"; }")
    r = sb.execute('pwd; echo "$GREETING"; greet you')
    assert r.output == "/tmp\nhello world\nhi you\n"
    assert r.cwd == "/tmp"
    sb.execute("cd /app")


def test_exit_codes_and_prompt_facts(sb: Sandbox) -> None:
    assert sb.execute("true").return_code == 0
    r = sb.execute("(exit 7)")
    assert r.return_code == 7
    assert r.prompt() == "7 root@sandbox:/app #"
    assert sb.execute("ls /nonexistent").return_code == 2


def test_stderr_is_told_apart_and_kept(sb: Sandbox) -> None:
    events = list(sb.stream("echo out; echo err >&2"))
    outputs = [e for e in events if isinstance(e, Output)]
    assert {(e.stream, e.data) for e in outputs} == {("stdout", "out\n"), ("stderr", "err\n")}
    result = sb.execute("echo oops >&2; false")
    assert result.stderr_tail == "oops\n" and result.return_code == 1


def test_output_streams_before_the_command_ends(sb: Sandbox) -> None:
    start = time.monotonic()
    arrivals: list[tuple[float, str]] = []
    for event in sb.stream("echo first; sleep 1.5; echo second", timeout=5):
        if isinstance(event, Output):
            arrivals.append((time.monotonic() - start, event.data))
    assert [d for _, d in arrivals] == ["first\n", "second\n"]
    assert arrivals[0][0] < 1.0, arrivals  # the first line came long before the end
    assert arrivals[1][0] >= 1.4


def test_chunks_come_in_order(sb: Sandbox) -> None:
    seqs = [e.seq for e in sb.stream("seq 1 20000") if isinstance(e, Output)]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert sb.execute("seq 1 20000").output == "".join(f"{i}\n" for i in range(1, 20001))


TRICKY = [
    'echo "double \\"quoted\\"" \'single\' \\\\backslash',
    "echo `echo backtick` $(echo dollar-paren) $((6*7))",
    "printf '%s\\n' 'it'\"'\"'s' \"a\\tb\"",
    "cat <<'EOF'\nliteral $HOME `x` \"q\" \\\nEOF",
    "cat <<EOF\nexpanded ${HOME}\nEOF",
    "find /etc -maxdepth 1 -name 'host*' -exec echo {} \\; | sort",
    "echo 'ünïcødé ✓ 日本'",
    "a=1\nb=2\necho $((a+b))",
    "echo '{\"json\": [1, 2]}' | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"json\"])'",
]


@pytest.mark.parametrize("command", TRICKY)
def test_tricky_commands_reach_bash_byte_for_byte(sb: Sandbox, command: str) -> None:
    sb.write_file("/tmp/expected.sh", command)
    expected = sb.execute("bash /tmp/expected.sh")
    got = sb.execute(command)
    assert got.return_code == 0, got
    assert got.output == expected.output


def test_stdin_is_at_eof(sb: Sandbox) -> None:
    start = time.monotonic()
    r = sb.execute('cat; read x; echo "read=$?"; python3; echo done', timeout=10)
    assert r.output == "read=1\ndone\n"
    assert time.monotonic() - start < 3


@pytest.mark.parametrize("command", ["vim /tmp/x", "less /etc/passwd | head -1", "top -n 1 | head -1", "nano x"])
def test_interactive_programs_do_not_hang(sb: Sandbox, command: str) -> None:
    start = time.monotonic()
    r = sb.execute(command, timeout=3)
    assert not r.timed_out and not r.lost, "the program waited for a terminal that is not there"
    assert time.monotonic() - start < 3
    assert sb.execute("echo alive").output == "alive\n"


def test_git_log_does_not_page(sb: Sandbox) -> None:
    r = sb.execute(
        "rm -rf /tmp/repo && git init -q /tmp/repo && cd /tmp/repo && git -c user.email=a@b -c user.name=a "
        "commit -q --allow-empty -m first && git log --oneline | wc -l; cd /app",
        timeout=10,
    )
    assert r.output.strip().endswith("1"), r


def test_syntax_error_comes_back_at_once(sb: Sandbox) -> None:
    start = time.monotonic()
    r = sb.execute('echo "unterminated; echo never')
    assert time.monotonic() - start < 1.0
    assert r.syntax_error and r.return_code == 2
    assert "unexpected EOF" in r.output
    assert sb.execute("echo ok").output == "ok\n"


def test_a_syntax_error_runs_nothing(sb: Sandbox) -> None:
    sb.execute("rm -f /tmp/marker")
    sb.execute('touch /tmp/marker; echo "open')
    assert sb.execute("test -e /tmp/marker").return_code == 1


STRAY = ["}; touch /tmp/marker; {\n:", "echo a\n}\ntouch /tmp/marker\n{\n:", "); touch /tmp/marker; ("]


@pytest.mark.parametrize("command", STRAY)
def test_a_stray_closing_bracket_runs_nothing_in_the_syntax_check(sb: Sandbox, command: str) -> None:
    """The check once defined the command as a function's body: a `}` ended the body early, and what
    followed ran during the check (then the command ran again, and no syntax error was said)."""
    sb.execute("rm -f /tmp/marker")
    r = sb.execute(command)
    assert r.syntax_error and r.return_code == 2 and "syntax error" in r.output and "a\n" not in r.output, r
    assert sb.execute("test -e /tmp/marker").return_code == 1


# Commands a timeout must stop: whole process trees (background, setsid, TERM-ignoring children,
# exec) and whole command lines (loops, functions, pipelines, subshells, a TERM-ignoring shell).
TIMED_OUT = [
    "while :; do :; done",
    "sleep 600",
    "sleep 300 & sleep 300",
    "trap '' TERM; sleep 300",
    "bash -c 'trap \"\" TERM; while :; do sleep 1; done'",
    "setsid sleep 500 & sleep 500",
    "exec sleep 100",
    "for i in $(seq 1 30); do echo $i; sleep 1; done",
    "f() { while :; do echo $RANDOM >/dev/null; done; }; f",
    "sleep 30 | cat",
    "(sleep 30)",
    "trap '' TERM; for i in $(seq 1 30); do sleep 1; done",
    "trap '' TERM USR2; for i in $(seq 1 30); do sleep 1; done",  # USR2: the agent's stop signal
    "trap 'echo cleanup' EXIT INT TERM; for i in $(seq 1 30); do sleep 1; done",
]


@pytest.mark.parametrize("command", TIMED_OUT)
def test_a_timeout_stops_the_whole_command_line_and_the_shell_lives(sb: Sandbox, command: str) -> None:
    """Not just the child that was running: its tree, the loop, the statements after it, and never
    'exit 0'; the shell's state survives."""
    sb.execute("cd /srv && export KEEP=kept && rm -f /tmp/after")
    start = time.monotonic()
    r = sb.execute(command + "; touch /tmp/after", timeout=2)
    assert r.timed_out and r.return_code != 0, r
    assert time.monotonic() - start < 2 + GRACE
    if command.startswith("for"):
        assert len(r.output.split()) <= 4, r.output  # about 2 s of a 1 s loop, not 30 lines
    time.sleep(1.2)  # had any of the line survived, it would reach `touch` or a `sleep` now
    after = sb.execute("echo $KEEP; pwd; ps -eo comm= | grep -c '^sleep$'; test -e /tmp/after || echo none")
    assert after.output.split() == ["kept", "/srv", "0", "none"], after
    sb.execute("trap - TERM USR2; cd /app")


def test_state_changed_earlier_in_a_timed_out_or_exiting_command_is_kept(sb: Sandbox) -> None:
    r = sb.execute("cd /etc; export MID=1; f_mid() { echo fn; }; sleep 30", timeout=1)
    assert r.timed_out
    assert sb.execute("pwd; echo $MID; f_mid").output == "/etc\n1\nfn\n"
    r = sb.execute("cd /usr; export MID=2; exit 3")
    assert r.return_code == 3 and r.restarted
    assert sb.execute("pwd; echo $MID").output == "/usr\n2\n"
    sb.execute("cd /app")


def test_interrupt_stops_a_loop_not_just_its_child(sb: Sandbox) -> None:
    import threading

    threading.Timer(1.0, sb.interrupt).start()
    r = sb.execute("for i in $(seq 1 30); do echo $i; sleep 0.5; done; echo after", timeout=30)
    assert r.interrupted and "after" not in r.output and len(r.output.split()) <= 4, r


def test_fork_bomb_is_contained(sb: Sandbox) -> None:
    start = time.monotonic()
    r = sb.execute("bomb() { bomb | bomb & }; bomb", timeout=3)
    assert time.monotonic() - start < 3 + GRACE + 5
    notices = [r.notice or ""]
    deadline = time.monotonic() + 10
    while True:  # the agent's watchdog kills a bomb that runs on in the background
        after = sb.execute("echo count=$(ps -e --no-headers | wc -l)")
        notices.append(after.notice or "")
        found = re.findall(r"count=(\d+)", after.output)
        count = int(found[-1]) if found else 999
        if count < 20 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert count < 20
    assert any(f"reached the limit of {sb.settings.pids_limit}" in n for n in notices), notices  # and it says so
    assert "survived" in sb.execute("echo survived", timeout=10).output


def test_memory_hog_is_killed_agent_lives(sb: Sandbox) -> None:
    r = sb.execute("python3 -c 'x = bytearray(10 * 1024**3)'", timeout=10)
    assert r.return_code != 0
    assert sb.execute("echo alive").output == "alive\n"


@pytest.mark.parametrize("command", ["yes", "yes >&2", "head -c 5M /dev/urandom", "head -c 50M /dev/zero | tr '\\0' x"])
def test_floods_are_capped_with_head_tail_and_spill(sb: Sandbox, command: str) -> None:
    start = time.monotonic()
    r = sb.execute(command, timeout=3)
    assert time.monotonic() - start < 3 + GRACE
    assert r.truncated and r.spill_path and r.spill_path.startswith("/app/.sandshell/output/")
    assert len(r.output) < 300 * 1024
    assert r.output_bytes > 1024 * 1024
    size = int(sb.execute(f"stat -c %s {r.spill_path}").output)
    assert size > 1024 * 1024
    assert sb.execute("echo ok").output == "ok\n"


def test_invalid_utf8_becomes_replacement_chars(sb: Sandbox) -> None:
    r = sb.execute("printf 'a\\xffb\\xe2\\x9c\\x93c\\n'")
    assert r.output == "a\ufffdb✓c\n"


def test_multibyte_char_split_across_chunks(sb: Sandbox) -> None:
    r = sb.execute(
        "python3 -c \"import sys,time; o=sys.stdout.buffer; o.write(b'x\\xe2'); o.flush(); "
        "time.sleep(0.2); o.write(b'\\x9c\\x93y'); o.flush()\""
    )
    assert r.output == "x✓y"


def test_exit_and_exec_restart_the_shell_with_state(sb: Sandbox) -> None:
    sb.execute("cd /srv && export SURVIVES=yes")
    r = sb.execute("exit 3")
    assert r.return_code == 3 and r.restarted
    assert sb.execute("pwd; echo $SURVIVES").output == "/srv\nyes\n"
    r = sb.execute("kill -9 $$")
    assert r.restarted and r.signal == "SIGKILL"
    assert sb.execute("pwd").output == "/srv\n"
    sb.execute("cd /app")


def test_background_server_returns_at_once_and_is_reachable(sb: Sandbox) -> None:
    start = time.monotonic()
    r = sb.execute("python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 &")
    assert r.return_code == 0 and time.monotonic() - start < 1.5
    r = sb.execute(
        "for i in $(seq 50); do curl -s -o /dev/null -w '%{http_code}' 127.0.0.1:8123 && break; sleep 0.1; done"
    )
    assert r.output.endswith("200"), r
    sb.execute("pkill -f 'http.server 8123'")


def test_files_and_state(sb: Sandbox) -> None:
    sb.write_file("/app/goal", "count to three")
    sb.write_file("/app/system.md", "be brief")
    sb.write_file("/app/config.json", '{"temperature": 0.5}')
    state = sb.state()
    assert (state.goal.content, state.system.content, state.config.content) == (
        "count to three",
        "be brief",
        '{"temperature": 0.5}',
    )
    assert sb.read_file("/nope").error == "missing"
    assert sb.read_file("/app").error == "is a directory"
    sb.execute("head -c 100 /dev/urandom > /tmp/bin; printf 'x\\0y' >> /tmp/bin")
    assert sb.read_file("/tmp/bin").error == "binary file"
    sb.write_file("rel.txt", "relative")  # relative paths resolve against the shell's cwd
    assert sb.execute("cat /app/rel.txt").output == "relative"


def test_host_environment_does_not_leak(sb: Sandbox, shared_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "host-only-" + os.urandom(6).hex()
    monkeypatch.setenv("HOST_ONLY_SECRET", secret)  # in the host's environment before the container starts
    with Sandbox(workspace=shared_workspace, settings=sb.settings) as fresh:
        env = fresh.execute("env").output
        everywhere = fresh.execute("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'").output
    assert "SANDSHELL" not in env and "HOST_ONLY" not in env
    assert secret not in everywhere and "PAGER=cat" in everywhere  # read the agent's and bash's blocks too
    assert "PAGER=cat" in env and "GIT_TERMINAL_PROMPT=0" in env


def test_interrupt_stops_the_running_command(sb: Sandbox) -> None:
    import threading

    timer = threading.Timer(0.5, sb.interrupt)
    timer.start()
    start = time.monotonic()
    r = sb.execute("sleep 60", timeout=30)
    assert r.interrupted and time.monotonic() - start < 5


def test_ping_is_fast(sb: Sandbox) -> None:
    assert sb.ping() < 0.5


def test_records_without_the_nonce_or_from_another_process_never_count(sb: Sandbox) -> None:
    """Written as the attack: fake status records (without the command's nonce) into every descriptor
    the shell holds (the status channel, its saved copies), directly and reopened through /proc by
    other processes; none of them may count. (A command that looks up its nonce in the wrapper's
    variables can forge its own result: docs/security.md, "status channel".)"""
    forge = (
        "for fd in $(ls /proc/$$/fd); do [ $fd -gt 2 ] || continue; "
        "printf '0\\0/forged\\0ran\\0' >&$fd; printf '0\\0/forged\\0ran\\0' > /proc/$$/fd/$fd; done 2>/dev/null; "
        "sleep 0.5; (exit 7)"
    )
    r = sb.execute(forge)
    assert r.return_code == 7 and r.cwd == "/app", r
    nxt = sb.execute("echo next; pwd")
    assert nxt.output == "next\n/app\n" and nxt.return_code == 0, nxt  # no result shifted by one


def test_the_agent_stops_looking_without_sleeping_once_commands_take_longer(sb: Sandbox) -> None:
    """The agent looks for a command's end without sleeping (`sched_yield` between looks) only while
    the last command ended within that look: in a loop of 2 ms commands, each look was spent in
    vain (0.3 ms of CPU a command, against the container's CPU limit). Counted from the host with
    strace, which sees the agent's system calls without the agent's help."""
    sb.container.reload()
    agent = str(sb.container.attrs["State"]["Pid"])
    sb.execute("sleep 0.002")  # the last command was not quick: the next one is waited for asleep
    trace = subprocess.Popen(
        ["strace", "-qq", "-c", "-e", "trace=sched_yield", "-p", agent], stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(0.5)
        assert trace.poll() is None, trace.communicate()[1]  # attached, and tracing
        for _ in range(30):
            assert sb.execute("sleep 0.002").ok
    finally:
        trace.send_signal(signal.SIGINT)
        counts = trace.communicate(timeout=30)[1]
    assert trace.returncode == -signal.SIGINT, counts  # (strace ends by the signal it was sent)
    assert "sched_yield" not in counts, counts


def _cpus_of(sb: Sandbox, settled: bool = True) -> tuple[str, str]:
    """Cpus_allowed_list of the agent's main thread and of its bash, read from the host between
    commands (the agent sets free its thread while a command runs on, and keeps to the CPU again at
    the end of the loop's turn in which the command ended; bash keeps to it after writing its record:
    `settled` waits up to 2 s until both keep to one and the same CPU, as both are free just before)."""
    sb.container.reload()
    agent = sb.container.attrs["State"]["Pid"]

    def allowed(pid: int) -> str:
        status = Path(f"/proc/{pid}/status").read_text()
        return status.split("Cpus_allowed_list:")[1].split()[0]

    children = Path(f"/proc/{agent}/task/{agent}/children").read_text().split()
    shell = next(int(c) for c in children if Path(f"/proc/{c}/comm").read_text().strip() == "bash")
    end = time.monotonic() + 2
    while settled and not (allowed(agent) == allowed(shell) and allowed(agent).isdigit()) and time.monotonic() < end:
        time.sleep(0.01)
    return allowed(agent), allowed(shell)


def test_the_shell_keeps_to_the_agents_cpu_and_what_it_starts_runs_on_all(workspace: Path) -> None:
    """SANDSHELL_SHELL_CPU=shared: the agent and its bash keep to one CPU (a command handed over
    wakes no other CPU), and every program bash starts, however it is forked, or put in bash's
    place by `exec`, may run on every CPU the container has."""
    every = str(len(os.sched_getaffinity(0)))  # (the container is given all of the host's)
    if every == "1":
        pytest.skip("one CPU: nothing to keep to")
    with Sandbox(workspace=workspace, settings=_base_settings(sandbox={"shell_cpu": "shared"}).sandbox) as sb:
        r = sb.execute("nproc; (nproc); echo $(nproc); nproc | cat; { nproc & wait; }; bash -c nproc")
        assert r.output.split() == [every] * 6, r
        assert sb.execute("exec nproc").output == every + "\n"  # (the shell is then replaced)
        agent, shell = _cpus_of(sb)
        assert agent == shell and agent.isdigit(), (agent, shell)  # one CPU, the same
        r = sb.execute("exec 4>/dev/null; nproc")  # an `exec` of redirections only: the shell keeps to it
        assert r.output == every + "\n" and _cpus_of(sb)[1] == shell, r


def test_the_shell_keeps_to_no_cpu_by_default(sb: Sandbox) -> None:
    every = str(len(os.sched_getaffinity(0)))
    if every == "1":
        pytest.skip("one CPU: nothing to keep to")
    assert sb.hello.get("shell") == "loop", sb.hello
    agent, shell = _cpus_of(sb, settled=False)
    assert agent == shell == f"0-{int(every) - 1}", (agent, shell)  # (the host's CPUs are 0..N-1)
    assert sb.execute("nproc").output == every + "\n"
