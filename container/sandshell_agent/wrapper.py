"""The few bash functions around each command: read it, check its syntax, run it, report it.

The model owns the shell they run in, so they are written against what its commands may leave
there: functions named like builtins (`read`, `printf`, `eval`: every builtin is called through
`builtin`, and the wrapper's own functions are read-only), aliases (the one line bash reads per
command quotes its words), `set -e`, `-u`, `-x`, `-v`, `noclobber` (options are local to the
functions, files are written with `>|`), and readonly or integer variables in the way (the
variables' names are made anew for each shell). The line bash reads per command is always the
same and holds no secret: the status record's nonce comes with the command, on bash's input.

What they cannot stop is code the model asks the shell itself to run around every command (a
DEBUG trap with `extdebug`, a function named `builtin`): such a hook runs as the shell and may
report what it likes. It is the model's own doing, shown in the recording where it was set; the
agent still checks the reported working directory against the kernel's (`Shell.read_status`).
"""

from __future__ import annotations

import os
import shlex
import signal

from . import files

STATUS_FD = 200  # bash writes "nonce NUL rc NUL cwd NUL how NUL" here after each command
ERROR_FD = 201  # bash's first stderr, where a syntax error goes: the model may close or move fd 2
STOP_SIGNAL = signal.SIGUSR2  # the agent's "end this command line" to bash (see the traps below)
NONCE_CHARS = 32  # the nonce's hex digits, ahead of the command on bash's input
# An explicit read timeout, so the model's `TMOUT` (read's default one) cannot cut a command short.
READ_SECONDS = 99999999


WHOLE = "# sandshell: whole"  # the last line of a state script written to its end
SAVED_AS = ("", ".prev")  # the two copies of each state script, in the order they are written


# Every file bash itself writes in the state folder (with `>|`, which follows a link and waits on a
# FIFO: a new shell starts only after the agent has removed anything but a regular file there).
STATE_FILES = (*(f"{n}{suffix}" for n in ("exports.sh", "functions.sh") for suffix in SAVED_AS), "cwd", "trap")


def _twice(st: str, name: str, dump: str) -> str:
    first, second = (f"{st}/{name}{suffix}" for suffix in SAVED_AS)
    whole = f"{{ {dump} && builtin printf '%s\\n' '{WHOLE}'; }}"
    return f"{whole} >| {first} && {whole} >| {second}"


def restore_lines(state_dir: str) -> list[str]:
    """What a replacement shell runs to get the saved exports and functions back: of each script,
    the first copy written whole (a regular file: never a FIFO, not even one swapped in later)."""
    lines = []
    for name in ("exports.sh", "functions.sh"):
        copies = (os.path.join(state_dir, name + suffix) for suffix in SAVED_AS)
        for path in [shlex.quote(p) for p in copies if files.ends_with(p, WHOLE)][:1]:
            lines.append(f"builtin [ -f {path} ] && builtin . {path} 2>/dev/null")
    return lines


def functions(state_dir: str, tag: str) -> list[str]:
    """The wrapper's definitions for a new shell; `tag` makes its variables' names unguessable."""
    st = shlex.quote(state_dir)
    c, n, h, t, r, k, u = (f"__ss_{v}_{tag}" for v in "cnhtrku")
    return [
        # The state a replacement shell starts from: written after every command and when the shell ends.
        # Each script twice, each copy ending with WHOLE once written whole, the second only once the
        # first is: a save that fails midway (SIGXFSZ under `ulimit -f 0`, a full folder, a builtin
        # disabled) leaves one whole copy, this command's or the one before (see Shell.start).
        f"__ss_save() {{ {_twice(st, 'exports.sh', 'builtin export -p')};"
        f" {_twice(st, 'functions.sh', 'builtin declare -f')};"
        f' builtin printf %s "$PWD" >| {st}/cwd; }} 2>/dev/null',
        # Read "nonce command NUL". A read that fails (a builtin disabled, a variable in the way) ends
        # the shell: what is left of the command on bash's input must never run as lines of its own.
        # Defining a function parses the whole command without running any of it, so a syntax error
        # (an unterminated quote or heredoc) is reported and nothing half-runs.
        f"__ss_in() {{ builtin local -; builtin set +xveuE; {h}=ran; {k}= || builtin exit 2;"
        f" IFS= builtin read -r -t {READ_SECONDS} -d '' {c} || builtin exit 2;"
        f" {n}=${{{c}:0:{NONCE_CHARS}}}; {c}=${{{c}:{NONCE_CHARS}}};"
        f' if builtin eval "__ss_syntax_{tag}() {{\n:\n${c}\n}}" </dev/null 2>&3;'
        f" then builtin unset -f __ss_syntax_{tag};"
        f" {c}+=$'\\n{{ \\\\__ss_keep $? \"$_\"; }} 2>/dev/null'; return 0; fi;"
        f" {h}=syntax; return 2; }}",
        # The command's status, kept by the line the wrapper adds after it: the eval then ends with
        # status 0, so errexit and an ERR trap see the command's own failures only, never the
        # eval's (`set -e; [ -d x ] && ...` ended the shell; each failure fired an ERR trap twice).
        f"__ss_keep() {{ {k}=$1; {u}=$2; }}",  # and `$_`, which the run line hands on to the next
        # The EXIT trap saves the state of a command that ends the shell (`exit`, `set -e`); the USR2
        # trap ends a timed-out command line (the agent's own signal: TERM comes with pasted scripts,
        # `trap cleanup EXIT INT TERM`, and a TERM trap set by the command that then timed out let
        # its line run on). A trap the model sets or clears on them replaces the wrapper's: after each
        # command, put the wrapper's back around whatever the model's trap runs ($1: the signal, $2:
        # what follows the model's code). A signal the model ignores stays ignored: the agent
        # freezes such a shell.
        f"__ss_arm() {{ builtin trap -p $1 >| {st}/trap; IFS= builtin read -r -d '' {t} < {st}/trap;"
        f" {t}=${{{t}%$'\\n'}}; case ${t} in \"trap -- '\\\\__ss_save\"* | \"trap -- '' \"*) builtin return;; esac;"
        f" {t}=${{{t}#trap -- }}; {t}=${{{t}% *}}; builtin eval \"{t}=${{{t}:-''}}\";"
        f' builtin trap -- "\\__ss_save${{{t}:+\n${t}}}$2" $1; }} 2>/dev/null',
        # `$?` at the start of a command is the last command's status, as at a prompt (`make`, then
        # `echo $?`): the run line tests this in an `if`, so errexit and ERR traps never see it.
        f'__ss_rc() {{ builtin return "${{{r}:-0}}"; }}',
        f"__ss_out() {{ builtin local -; builtin set +xveuE; {r}=${{{k}:-$1}}; __ss_arm EXIT '';"
        f" __ss_arm USR2 $'\\nbuiltin exit 143'; __ss_save;"
        f' builtin printf \'%s\\0%s\\0%s\\0%s\\0\' "${n}" "${{{k}:-$1}}" "$PWD" "${h}" >&{STATUS_FD}; }}',
        "builtin readonly -f __ss_save __ss_arm __ss_in __ss_keep __ss_rc __ss_out",
        # USR2 (the agent's, at a timeout or an interrupt) ends the whole command line (a loop, the
        # statements after it), not just its children; TERM (`kill $$`) ends it the same way. EXIT
        # first: a trap set before it and reset later (`trap - TERM`) would leave bash dying of the
        # signal without running its EXIT trap, and the state of the command at hand would be lost.
        "builtin trap '\\__ss_save' EXIT; builtin trap '\\__ss_save; builtin exit 143' TERM USR2",
    ]


def run_line(tag: str) -> bytes:
    """The line bash reads for every command; the nonce and the command follow it on its input.
    The wrapper's insides do not show in `set -x` output (options are local to its functions; a
    syntax error goes to fd 3, bash's first stderr, which the model's `exec 2>&-` cannot close);
    the command runs at top level, so `declare` and `local` mean what they mean at a prompt. (No
    `{ ...; }` around `__ss_in`: after a syntax error in its `eval`, bash 5.2 then fails to parse
    the next line.)"""
    run = f'\\builtin eval "$__ss_c_{tag}" </dev/null {STATUS_FD}>&- {ERROR_FD}>&-'
    return (
        f'\\__ss_in 3>&{ERROR_FD} 2>/dev/null && if \\__ss_rc "${{__ss_u_{tag}-}}" 2>/dev/null;'
        f" then {run}; else {run}; fi;"
        f" {{ \\__ss_out $?; }} 2>/dev/null\n"
    ).encode()
