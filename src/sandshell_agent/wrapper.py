"""The few bash functions around each command: read it, check its syntax, run it, report it.

The model owns the shell they run in, so they are written against what its commands may leave
there: functions named like builtins (`read`, `printf`, `eval`: every builtin is called through
`builtin`, and the wrapper's own functions are read-only), aliases (the line run per command is
an alias of the wrapper's, put back after each command with any alias on its reserved words taken
off; its other words are quoted), `set -e`, `-u`, `-x`, `-v`, `noclobber` (options are local to the
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
import re
import shlex
import signal

from . import files

STATUS_FD = 200  # bash writes "nonce NUL rc NUL cwd NUL how NUL" here after each command, then "nonce NUL done NUL"
DONE = "done"  # ... once it has saved its state (status.py)
BROKEN = "broken"  # the "how" of a command that did not run: the builtins the wrapper needs are disabled
ERROR_FD = 201  # bash's first stderr, where a syntax error goes: the model may close or move fd 2
UNRUN = shlex.quote(
    "sandshell: this command did not run: the shell's alias expansion or its alias builtin was turned off;"
    " a new shell starts with the cwd, exports and functions kept"
)
STOP_SIGNAL = signal.SIGUSR2  # the agent's "end this command line" to bash (see the traps below)
NONCE_CHARS = 32  # the nonce's hex digits, ahead of the command on bash's input
LENGTH_DIGITS = 10  # then the length of the command as sent (encode_command), in bytes
DIGITS = "[0123456789]" * LENGTH_DIGITS  # the length's pattern: a glob (a regex is compiled on every use: 40 µs)
NOT_ASCII = re.compile(rb"[\x80-\xff]")
# An explicit read timeout, so the model's `TMOUT` (read's default one) cannot cut a command short.
READ_SECONDS = 99999999
# The run line's alias, and the function that stands in for it when aliases are off. One name for
# every shell: the saved functions bring the last shell's back, and a name of each shell's own
# would pile up there, one more each restart, rewritten with every save.
RUN_NAME = "__ss_run"
# The line bash reads for every command: the alias, so that bash, which reads a pipe or a socket
# one byte at a time, reads 10 bytes instead of 230 (~0.1 ms a command). (An empty line first:
# after a syntax error in `__ss_in`'s eval, bash 5.2 takes the next word for no command's first,
# so for no alias.)
RUN_LINE = f"\n{RUN_NAME}\n".encode()


WHOLE = "# sandshell: whole"  # then " N": the last line of state script number N, written to its end
# The shell's saved state (exports and functions) goes to these two in turn, one per save: a save
# that fails midway (SIGXFSZ under `ulimit -f 0`, a full folder, a builtin disabled) leaves the
# other whole, the one before. A new shell restores the whole one with the highest number.
STATE_SCRIPTS = ("state0.sh", "state1.sh")
EXEC_STATE = "exec.sh"  # the exports of a program that replaced the shell (execstate), after the above
CWD_FILE = "cwd"  # where the shell was when it ended (EXIT trap, USR2) or was replaced; else the last status says

# Every file bash itself writes in the state folder (with `>|`, which follows a link and waits on a
# FIFO: a new shell starts only after the agent has removed anything but a regular file there).
STATE_FILES = (*STATE_SCRIPTS, CWD_FILE, "trap")


def encode_command(command: bytes) -> bytes:
    """The command as bash reads it: ASCII only, so that `read -N` counts its bytes whatever the
    model's locale, and `printf %b` gives every byte back (each backslash doubled, each byte past
    ASCII as \\xHH)."""
    escaped = command.replace(b"\\", b"\\\\")
    return escaped if escaped.isascii() else NOT_ASCII.sub(lambda m: b"\\x%02x" % m[0][0], escaped)


def last_saved(state_dir: str) -> tuple[int, str | None]:
    """The number of the last state script written whole, and its path (0, None: none yet)."""
    best: tuple[int, str | None] = (0, None)
    for name in STATE_SCRIPTS:
        path = os.path.join(state_dir, name)
        mark, _, number = (files.last_line(path) or "").rpartition(" ")
        # (isascii: "²".isdigit() is true and int("²") raises; the model writes these files, and a
        # raise here would end the agent)
        if mark == WHOLE and number.isascii() and number.isdigit() and int(number) >= best[0]:
            best = (int(number), path)
    return best


def restore_lines(state_dir: str) -> list[str]:
    """What a replacement shell runs to get the saved exports and functions back: the last state
    script written whole, then the exports of a program that replaced the shell after that save
    (each a regular file when checked; bash checks again, and never reads a FIFO swapped in)."""
    number, path = last_saved(state_dir)
    exec_state = os.path.join(state_dir, EXEC_STATE)
    paths = [path, exec_state if files.last_line(exec_state) == f"{WHOLE} {number}" else None]
    return [f"builtin [ -f {shlex.quote(p)} ] && builtin . {shlex.quote(p)} 2>/dev/null" for p in paths if p]


def forget(state_dir: str) -> None:
    """Drop the saved state: it ended the shell that read it back."""
    for name in (*STATE_FILES, EXEC_STATE):
        try:
            os.unlink(os.path.join(state_dir, name))
        except OSError:
            pass


def saved_cwd(state_dir: str) -> str | None:
    """Where the shell was when it ended or was replaced, if that was after the last save."""
    number, _, cwd = (files.read_text(os.path.join(state_dir, CWD_FILE), 8192)["content"] or "").partition("\n")
    return cwd if number == str(last_saved(state_dir)[0]) and cwd.startswith("/") else None


def functions(state_dir: str, tag: str, saved: int = 0) -> list[str]:
    """The wrapper's definitions for a new shell; `tag` makes its names unguessable, `saved` is the
    number of the last state script saved (the new shell's saves go on from it)."""
    st = shlex.quote(state_dir)
    c, n, h, t, r, k, u, q, e, m, z = (f"__ss_{v}_{tag}" for v in "cnhtrkuqemz")
    y = setup_done(tag)
    alias = run_alias(tag)
    return [
        f"{q}={int(saved)}",
        # The state a replacement shell starts from: saved after every command into the two state
        # scripts in turn (see STATE_SCRIPTS), each ending with its number once written whole.
        f"__ss_save() {{ {q}=$(( {q} + 1 ));"
        # (exports as `declare -x` in any mode, functions read back with bash's default options, then
        # the model's: see bashloop.c's save_state)
        # (`shopt -p` fails for an option that is off: the group ends true, or `set -e` would end the shell)
        f" {{ builtin declare -px && builtin printf '%s\\n' 'builtin set +o posix; builtin shopt -s extglob'"
        f" && builtin declare -f && {{ builtin shopt -p extglob; builtin shopt -po posix; builtin true; }}"
        f" && builtin printf '%s %d\\n' '{WHOLE}' \"${q}\"; }}"
        f" >| {st}/state$(( {q} % 2 )).sh; }}",
        # ... and where the shell is, when it ends or is stopped (the traps below).
        # (not while the saved state is still being read back: a half-read state would replace it)
        f"__ss_end() {{ [[ ${{{y}-}} ]] || builtin return 0; \\__ss_save;"
        f' builtin printf "%s\\n%s" "${q}" "$PWD" >| {st}/{CWD_FILE}; }} 2>/dev/null',
        # Read the nonce, the length and the command (encode_command): `read -N` takes it in blocks,
        # where a read up to a delimiter, or with a timeout, takes a byte (and a select) at a time:
        # 100 KB a byte at a time takes ~145 ms. The model's `TMOUT` (read's default timeout) is set aside;
        # a readonly one gets a timeout of the wrapper's instead, so it cannot cut a command short.
        # A read that fails or comes short (a builtin disabled, a variable in the way) ends the
        # shell: what is left of the command on bash's input must never run as lines of its own.
        # Then the whole command is parsed before any of it runs, so a syntax error (an unterminated
        # quote or heredoc) is reported and nothing half-runs.
        f"__ss_get() {{ builtin local TMOUT; builtin unset -v TMOUT || :;"
        f" {m}=(); [[ ${{TMOUT+x}} ]] && {m}=(-t {READ_SECONDS});"
        f' IFS= builtin read -r "${{{m}[@]}}" -N {NONCE_CHARS + LENGTH_DIGITS} {c} || builtin exit 2;'
        f" {n}=${{{c}:0:{NONCE_CHARS}}}; {z}=${{{c}:{NONCE_CHARS}}};"
        f" [[ ${z} == {DIGITS} ]] || builtin exit 2; {z}=$(( 10#${z} ));"
        f' IFS= builtin read -r "${{{m}[@]}}" -N ${z} {c}; [[ ${{#{c}}} == "${z}" ]] || builtin exit 2;'
        f' builtin printf -v {c} %b "${c}"; }}',
        # The syntax check: the command is evaluated under `set -n`, which parses every line and runs
        # none (a check that defined it as a function's body ran whatever followed a stray `}`, and
        # the command then ran again); `local -` turns it off again as the function returns. The
        # text is parsed where the model's aliases apply, so it holds no word but `\builtin`; and
        # `set` must work before it is evaluated at all (the model may have disabled it, or `eval`:
        # they are enabled again, and if that fails the command does not run and the shell is
        # replaced). Its status: 0 parsed, 2 a syntax error, 1 `set` or `eval` unusable.
        f"__ss_parse() {{ builtin local -; {{ builtin set +n && builtin eval :; }} || builtin enable set eval;"
        f' if builtin set +n; then builtin eval "\\\\builtin set -n\n${c}" 2>&3; else [[ -z x ]]; fi; }}',
        f"__ss_in() {{ builtin local -; builtin set +xveuE; {h}=ran; {k}= || builtin exit 2; \\__ss_get;"
        f" \\__ss_parse; case $? in 0) {c}+=$'\\n{{ \\\\__ss_keep $? \"$_\"; }} 2>/dev/null'; return 0;;"
        f" 2) {h}=syntax;; *) {h}={BROKEN};; esac; return 2; }}",
        # The command's status, kept by the line the wrapper adds after it: the eval then ends with
        # status 0, so errexit and an ERR trap see the command's own failures only, never the
        # eval's (`set -e; [ -d x ] && ...` ended the shell; each failure fired an ERR trap twice).
        f"__ss_keep() {{ {k}=$1; {u}=$2; }}",  # and `$_`, which the run line hands on to the next
        # The EXIT trap saves the state of a command that ends the shell (`exit`, `set -e`); the USR2
        # trap ends a timed-out command line (the agent's own signal: TERM comes with pasted scripts,
        # `trap cleanup EXIT INT TERM`, and a TERM trap set by the command that then timed out let
        # its line run on). A trap the model sets or clears on them replaces the wrapper's: after each
        # command whose traps are not as the wrapper left them, put the wrapper's back around whatever
        # the model's trap runs ($1: the signal, $2: what follows the model's code). A signal the
        # model ignores stays ignored: the agent freezes such a shell.
        f"__ss_arm1() {{ builtin trap -p $1 >| {st}/trap; IFS= builtin read -r -d '' {t} < {st}/trap;"
        f" {t}=${{{t}%$'\\n'}}; case ${t} in \"trap -- '\\\\__ss_end\"* | \"trap -- '' \"*) builtin return;; esac;"
        f" {t}=${{{t}#trap -- }}; {t}=${{{t}% *}}; builtin eval \"{t}=${{{t}:-''}}\";"
        f' builtin trap -- "\\__ss_end${{{t}:+\n${t}}}$2" $1; }}',
        f"__ss_arm() {{ builtin trap -p EXIT USR2 >| {st}/trap; IFS= builtin read -r -d '' {t} < {st}/trap;"
        f" [[ ${t} == \"${e}\" ]] && builtin return; \\__ss_arm1 EXIT ''; \\__ss_arm1 USR2 $'\\nbuiltin exit 143';"
        f" builtin trap -p EXIT USR2 >| {st}/trap; IFS= builtin read -r -d '' {e} < {st}/trap; }}",
        # `$?` at the start of a command is the last command's status, as at a prompt (`make`, then
        # `echo $?`): the run line tests this in an `if`, so errexit and ERR traps never see it.
        f'__ss_rc() {{ builtin return "${{{r}:-0}}"; }}',
        # After each command: its status at once; then the traps and the run line's alias put back,
        # the state saved, and word that the save is done (status.py).
        f"__ss_out() {{ builtin local -; builtin set +xveuE; {r}=${{{k}:-$1}};"
        f' builtin printf \'%s\\0%s\\0%s\\0%s\\0\' "${n}" "${r}" "$PWD" "${h}" >&{STATUS_FD};'
        f" \\__ss_arm; {alias}; \\__ss_save; builtin printf '%s\\0{DONE}\\0' \"${n}\" >&{STATUS_FD}; }}",
        # Should the alias not be expanded (the model disabled `shopt` or `alias` itself), its name
        # runs this instead: the command is taken off bash's input unrun, said so, and the shell ends
        # (the agent starts a new one, which has the alias again).
        f"{RUN_NAME}() {{ builtin local -; builtin set +xveuE; \\__ss_get;"
        f" builtin printf '%s\\n' {UNRUN} >&{ERROR_FD}; builtin exit 2; }} 2>/dev/null",
        "builtin readonly -f __ss_get __ss_parse __ss_save __ss_end __ss_arm1 __ss_arm __ss_in __ss_keep __ss_rc"
        f" __ss_out {RUN_NAME}",
        # USR2 (the agent's, at a timeout or an interrupt) ends the whole command line (a loop, the
        # statements after it), not just its children; TERM (`kill $$`) ends it the same way. EXIT
        # first: a trap set before it and reset later (`trap - TERM`) would leave bash dying of the
        # signal without running its EXIT trap, and the state of the command at hand would be lost.
        "builtin trap '\\__ss_end' EXIT; builtin trap '\\__ss_end; builtin exit 143' TERM USR2",
        f"{{ builtin trap -p EXIT USR2 >| {st}/trap; IFS= builtin read -r -d '' {e} < {st}/trap; }} 2>/dev/null",
    ]


def setup_done(tag: str) -> str:
    """The variable the new shell's setup sets as its last step: no save on the way out before it."""
    return f"__ss_y_{tag}"


def run_alias(tag: str) -> str:
    """Defines the run line's alias (with expansion on, and no alias on its reserved words). A new
    shell runs it last, after the saved functions are back: they hold the fallback function's
    definition, `__ss_run () ...`, which the alias would turn into the run line."""
    keywords = " ".join(shlex.quote(w) for w in KEYWORDS)
    return (
        f"builtin shopt -s expand_aliases; builtin unalias {keywords} 2>/dev/null || :;"
        f" builtin alias {RUN_NAME}={shlex.quote(_run_line(tag))}"
    )


KEYWORDS = ("if", "then", "else", "fi", "{", "}")  # the reserved words of the run line: bash expands aliases on them


def _run_line(tag: str) -> str:
    """What bash runs for every command; the nonce and the command follow it on its input.
    The wrapper's insides do not show in `set -x` output (options are local to its functions; a
    syntax error goes to fd 3, bash's first stderr, which the model's `exec 2>&-` cannot close);
    the command runs at top level, so `declare` and `local` mean what they mean at a prompt. (No
    `{ ...; }` around `__ss_in`: after a syntax error in its `eval`, bash 5.2 then fails to parse
    the next line.)"""
    run = f'\\builtin eval "$__ss_c_{tag}" </dev/null {STATUS_FD}>&- {ERROR_FD}>&-'
    return (
        f'\\__ss_in 3>&{ERROR_FD} 2>/dev/null && if \\__ss_rc "${{__ss_u_{tag}-}}" 2>/dev/null;'
        f" then {run}; else {run}; fi;"
        f" {{ \\__ss_out $?; }} 2>/dev/null"
    )
