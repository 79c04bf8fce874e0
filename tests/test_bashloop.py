"""The compiled command loop (container/sandshell_agent/bashloop.c), attacked from inside: it is the
default, its key and nonces are in no variable, a process that steals the next command off bash's
input cannot pass a record for it, and no code can be loaded into the shell that reports results."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandshell.resources import container_dir
from sandshell.sandbox.image import compile_loop
from sandshell.sandbox.sandbox import Sandbox

from .conftest import _base_settings


@pytest.fixture(params=["auto", "off"], ids=["loop", "wrapper"])
def box(workspace: Path, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    settings = _base_settings(exit_timeout=3.0, kill_grace=0.5, shell_loop=request.param)
    with Sandbox(workspace=workspace, settings=settings) as sb:
        yield sb


def test_commands_run_through_the_loop_by_default(sb: Sandbox) -> None:
    """A compile or load that failed would fall back to the bash functions without a word: the
    default sandbox must say it runs the loop."""
    assert sb.hello.get("shell") == "loop", sb.hello


def test_the_library_needs_nothing_newer_than_glibc_2_17(tmp_path: Path) -> None:
    """It is compiled on the host and loaded by the image's bash: symbols of a newer glibc than the
    image's (fstat@GLIBC_2.33, __isoc23_strtol@GLIBC_2.38 from a newer host) would keep it from loading."""
    context = tmp_path / "context"
    (context / "sandshell_agent").mkdir(parents=True)
    (context / "sandshell_agent" / "bashloop.c").write_bytes(
        (container_dir() / "sandshell_agent" / "bashloop.c").read_bytes()
    )
    assert compile_loop(context, lambda _m: None)
    symbols = subprocess.run(["objdump", "-T", str(context / "sandshell_agent" / "bashloop.so")],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+\.\d+)", symbols)}
    assert versions and max(versions) <= (2, 17), sorted(versions)


SECRETS = r"""
{ set; declare -p; declare -f; env; alias; trap -p; cat /proc/$$/environ /proc/$$/cmdline | tr '\0' '\n'
  ls -l /proc/$$/fd; } 2>/dev/null | grep -oE '(^|[^0-9a-f])[0-9a-f]{32,64}([^0-9a-f]|$)' | head -3
"""


def test_no_nonce_or_key_is_in_a_variable_or_the_environment(box: Sandbox) -> None:
    """What a command can list of its own shell holds no 32 or 64 hex digits with the loop; the bash
    functions keep the running command's nonce in a variable (which is why they are the fallback)."""
    found = box.execute(SECRETS).output.strip()
    if box.hello.get("shell") == "loop":
        assert found == "", found
    else:
        assert found, "the bash path's nonce variable was not found: this test would not see one"


def test_loading_or_unloading_builtins_is_refused(sb: Sandbox) -> None:
    """`enable -f` would put code in the shell that writes records; `enable -d` would unload the loop
    while it runs. Both are refused; the rest of `enable` works, and the shell goes on."""
    sb.write_file("/tmp/evil.so", "not a library")
    for attempt in ("enable -f /tmp/evil.so evil", "enable -d __ss_loop", "enable -nf /tmp/evil.so x", "enable -fd x"):
        r = sb.execute(attempt)
        assert r.return_code == 2 and "enable -f, -d" in r.output and not r.restarted, (attempt, r)
    r = sb.execute("enable -n __ss_loop; enable -n echo; type -t echo; enable echo __ss_loop; echo back")
    assert r.output == "file\nback\n" and not r.restarted, r


THIEF = r"""
in=$(for fd in $(ls /proc/$$/fd); do
       case $fd in 0|1|2|200|201) continue;; esac
       case $(readlink /proc/$$/fd/$fd) in socket:*) echo $fd; break;; esac
     done)
tag=00000000000000000000000000000000
trap 'IFS= read -r n < /tmp/stolen; printf "%s\0%s\0%s\0%s\0%s\0" "${n:0:32}" 77 /forged ran $tag >&200' USR1
( sleep 0.3; kill -STOP $$; IFS= read -r -N 42 -u $in head; echo "$head" > /tmp/stolen
  kill -CONT $$; kill -USR1 $$ ) >/dev/null 2>&1 &
echo "thief on fd $in"
"""


def test_a_thief_of_the_next_command_cannot_pass_a_record_for_it(sb: Sandbox) -> None:
    """A background subshell of the shell's own holds its input: it stops the shell, reads the next
    command's nonce off it, and has a trap in the shell write a record with that nonce from the
    shell's own pid. Without the key the record's tag is wrong: the command is lost (it was
    stolen), never given a forged status."""
    r = sb.execute(THIEF)
    assert r.output == "thief on fd 202\n", r  # the loop's input
    time.sleep(0.6)  # the thief waits, reading, with the shell stopped
    r = sb.execute("echo two", timeout=2)
    assert r.return_code != 77 and "/forged" not in r.cwd, r
    assert r.timed_out or r.restarted or r.error, r
    assert sb.execute("cat /tmp/stolen | cut -c1-32").output.strip() != ""  # the theft itself worked
    r = sb.execute("trap - USR1; echo honest")
    assert r.output == "honest\n" and r.return_code == 0, r
