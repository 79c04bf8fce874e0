"""One persistent bash: commands run in it by `eval`, state is saved after each so it can be revived."""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import socket
import subprocess

from . import AGENT_HOME, files, procs, spawn
from .cpus import Home
from .shellenv import EDITOR_STUBS
from .status import Status, StatusChannel, tag
from .wrapper import (
    ERROR_FD,
    EXEC_STATE,
    LENGTH_DIGITS,
    RUN_LINE,
    STATE_FILES,
    STATUS_FD,
    STOP_SIGNAL,
    encode_command,
    forget,
    functions,
    last_saved,
    restore_lines,
    run_alias,
    saved_cwd,
    setup_done,
)

OUTPUT_BUFFER = 1 << 20  # bash's stdout/stderr send buffer (default 208 KiB; the kernel doubles it)
LOOP_LIBRARY = os.path.join(AGENT_HOME, "bashloop.so")  # built with the image
# What stands for a cwd whose path neither bash (bashloop.c's CWD_MAX) nor the kernel's readlink will
# give: over PATH_MAX. Said as the result's cwd, not "" (which the host would show as "/").
LONG_CWD = "(a folder whose path is over 4,096 bytes)"


def loop_loads(library: str = LOOP_LIBRARY) -> bool:
    """Whether this image's bash loads the compiled command loop (bashloop.c): it is built on the
    host with the image, and a base image with another libc may refuse it. Bash 5 only: the loop
    declares what it uses of bash as 5.0 to 5.3 have it (4.4 looks the same, and is untried)."""
    if not os.path.exists(library):
        return False
    loads = f"enable -f {shlex.quote(library)} __ss_loop __ss_end && (( BASH_VERSINFO[0] == 5 ))"
    probe = ["/bin/bash", "--noprofile", "--norc", "-c", loads]
    try:
        loaded = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return loaded.returncode == 0


def _channel(send_buffer: int = 0) -> tuple[int, int]:
    """A byte channel (the agent's end, bash's end). A socket, not a pipe: a command cannot reopen
    it through /proc/PID/fd (that gives ENXIO for a socket), so it cannot write lines into bash's
    input, read the agent's output away, or write a status record from outside the shell."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    if send_buffer:
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    return ours.detach(), theirs.detach()


class Shell:
    """A bash process reading control lines on stdin; output on two pipes, status on a third."""

    def __init__(self, state_dir: str, home: str, cwd: str, file_limit: int, loop: bool, cpus: Home) -> None:
        self.state_dir = state_dir
        self.loop, self.cpus = loop, cpus  # the compiled loop (bashloop.c), not the bash wrapper; its CPU
        self.file_limit = file_limit  # RLIMIT_FSIZE for bash and all it starts (0: none)
        self.home = home
        self.cwd = cwd
        self.first_cwd = cwd  # where a new shell starts when the last cwd cannot be entered
        self.unreachable: str | None = None  # the cwd the last start wanted and could not enter
        self.proc: subprocess.Popen[bytes] | None = None
        self.control = -1  # bash's stdin: the lines that run commands (non-blocking)
        self.input_ino = 0  # bash's end of it
        self.input_fds: tuple[int, ...] = ()  # where bash holds it, as its first command ended
        self.unsent = bytearray()  # what bash has not read of them yet
        self.status_r = -1
        self.stdout_r = -1
        self.stderr_r = -1
        self.exit_fd = -1  # readable once bash has ended (a pidfd; -1 where the kernel has none)
        self.status = StatusChannel(-1, 0)
        self.ready_r = -1  # bash writes one byte here as the last line of its setup (`finished_setup`)
        self.setup_done = False
        self.fell_back = False  # this shell started fresh: the saved state ended the one before
        self.news: list[str] = []  # what the last start has to tell (a notice with the command at hand)
        self.killed_unready = False  # the agent killed it before its setup was through
        self.tries = 0  # shells in a row killed in their setup and started again with the state

    @property
    def shown_cwd(self) -> str:
        """The cwd as a result says it ("" inside: not known, over PATH_MAX)."""
        return self.cwd or LONG_CWD

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, restore: bool = False) -> None:
        """Start bash; with `restore`, in the last cwd with the last exported env and functions."""
        # The last shell ended while it read the saved state back: so would every next one, and no
        # command would run again. A fresh one (`fell_back`: the agent says so). One the agent killed
        # there (a command timed out while a big state was read back) gets one more try first.
        unready = restore and self.proc is not None and not self.finished_setup()
        # Root inside may remove or replace the compiled loop: a shell that then died in its setup
        # gets the bash functions from now on (every later command had ended with exit 3).
        lost_loop = unready and self.loop and not loop_loads()
        if lost_loop:
            self.loop, unready = False, False  # (not the state: that is kept)
        self.fell_back = unready and (not self.killed_unready or self.tries > 0)
        self.tries = self.tries + 1 if unready and not self.fell_back else 0
        self.killed_unready = False
        if self.fell_back:
            restore = False
            forget(self.state_dir)
        # A link or a FIFO the model put where bash saves its state would make every save write
        # through it or wait forever (each command then timed out); gone before bash starts.
        files.remove_unless_regular(self.state_dir, (*STATE_FILES, EXEC_STATE))
        status_r, status_w = _channel()
        with socket.socket(fileno=os.dup(status_r)) as sock:  # the kernel tells who wrote each byte
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        out_r, out_w = _channel(OUTPUT_BUFFER)
        err_r, err_w = _channel(OUTPUT_BUFFER)
        self.control, control_r = _channel()
        self.input_ino, self.input_fds = os.fstat(control_r).st_ino, ()
        if self.ready_r >= 0:
            os.close(self.ready_r)
        self.ready_r, ready_w = _channel()  # (a socket: a pipe's end can be reopened through /proc for reading)
        self.setup_done = False

        if restore:
            self.cwd = saved_cwd(self.state_dir) or self.cwd
        wanted = self.cwd
        places = (self.cwd, self.first_cwd, "/")
        self.proc, self.cwd, killed = spawn.bash(places, self.home, control_r, out_w, err_w, (status_w, ready_w))
        self.unreachable = (wanted or LONG_CWD) if self.cwd != wanted else None
        self.news = [
            news
            for news, told in (
                (
                    f"a new shell ended while it read the saved state back; one started in {self.cwd} without it"
                    " (exports and functions are lost)",
                    self.fell_back,
                ),
                (
                    f"the new shell could not enter {wanted} (gone, or not permitted) and started in {self.cwd}"
                    if wanted
                    else f"the new shell could not return to {LONG_CWD} and started in {self.cwd}",
                    self.unreachable,
                ),
                (
                    f"the container's process limit was full as a new shell had to start: {killed} processes"
                    " left by earlier commands were killed to make room",
                    killed,
                ),
                (
                    f"the compiled command loop ({LOOP_LIBRARY}) no longer loads (removed or replaced from inside):"
                    " commands run through the bash functions from now on",
                    lost_loop,
                ),
            )
            if told
        ]
        procs.protect(self.proc.pid)  # the agent's own child: never taken for an orphan of the model's
        try:  # its status channel closes a moment before it is gone: this says when it is
            self.exit_fd = os.pidfd_open(self.proc.pid)
        except OSError:
            self.exit_fd = -1
        for fd in (status_w, out_w, err_w, control_r, ready_w):
            os.close(fd)
        for fd in (status_r, out_r, err_r, self.control, self.ready_r):
            os.set_blocking(fd, False)
        self.unsent.clear()
        self.status_r, self.stdout_r, self.stderr_r = status_r, out_r, err_r
        key = secrets.token_bytes(32) if self.loop else None
        self.status = StatusChannel(status_r, self.proc.pid, key)
        prelude = [f"exec {STATUS_FD}>&{status_w} {status_w}>&- {ERROR_FD}>&2", "set +o history", EDITOR_STUBS]
        if self.file_limit:  # soft and hard, before anything of the model's; without CAP_SYS_RESOURCE it stays
            # (bash's own `ulimit`: the agent may not set another process's limits, the filter says so)
            prelude.insert(0, f"builtin ulimit -f {self.file_limit // 1024} || builtin exit 1")  # KiB, rounded down
        tag = secrets.token_hex(4)
        saved = last_saved(self.state_dir)[0]
        setup = restore_lines(self.state_dir) if restore else []
        # `builtin`: the model's functions are loaded by now, and a `cd` of its own must not run here.
        setup.append(f"builtin cd -- {shlex.quote(self.cwd)} 2>/dev/null")
        if self.loop:
            # Loaded and started before anything of the model's is back (it comes back in the loop's
            # setup): no function of its can stand in for them. Bash reads nothing more of its input
            # after this line; should the loop not start or ever return, the shell ends.
            load = f"builtin enable -f {shlex.quote(LOOP_LIBRARY)} __ss_loop __ss_end"
            prelude.append(f"{load} 2>/dev/null || builtin exit 3")  # (gone: `start` says so, not bash)
            args = (STATUS_FD, ERROR_FD, shlex.quote(self.state_dir), saved, shlex.quote("\n".join(setup)), ready_w)
            prelude.append(f"__ss_loop {' '.join(map(str, (*args, *self.cpus.loop_args())))}; builtin exit 3")
        else:
            # (`exec`, not `builtin exec`, whose redirections last for that command only: a function of
            # the model's named `exec` would keep the pipe open; the bash functions are the weaker way)
            ready = f"builtin printf . >&{ready_w}; exec {ready_w}>&-; {setup_done(tag)}=1"
            prelude += [*functions(self.state_dir, tag, saved), *setup[:-1], run_alias(tag), setup[-1], ready]
        self._send("\n".join(prelude) + "\n")
        if key is not None:  # the loop's first read, before any of the model's code is back: in no variable
            self._send(key.hex())

    def terminate(self) -> None:
        """Ask bash to end the running command line: it saves its state and exits (see the USR2 trap)."""
        self.killed_unready = self.killed_unready or (self.alive() and not self.finished_setup())  # (no trap yet)
        if self.alive():
            try:
                os.kill(self.pid, STOP_SIGNAL)
            except (ProcessLookupError, PermissionError):
                pass

    def finished_setup(self) -> bool:
        """Whether this shell got through its setup (the saved state read back): one that ended
        without its byte on the ready pipe died there, and so will the next one that reads it."""
        if not self.setup_done and self.ready_r >= 0:
            try:
                self.setup_done = os.read(self.ready_r, 1) == b"."
            except BlockingIOError:  # still held open: by a shell in its setup, or what that started
                pass
        return self.setup_done

    def input_lost(self) -> bool:
        """Whether bash can read no next command after the one that just reported its status: its input
        is gone from where it held it as its first command ended (`exec 202<&-`), or it has ended
        on its own (a command's `exit` writes no status; a shell killed in its save, by a signal
        such as `ulimit -f 0`'s, is said on the next result as before)."""
        if self.alive() and not self._input_gone():
            return False
        code = self.exit_code(wait=0.2)  # ended, or ending (its descriptors close as it exits)
        return code is None or code < 128

    def _input_gone(self) -> bool:
        """Whether bash's input is gone from where it was (False when that cannot be looked at)."""
        if not self.input_fds:
            fds = self._input_fds()
            if fds is None:
                return False
            self.input_fds = fds
            return not fds
        for n in self.input_fds:
            try:
                if os.stat(f"/proc/{self.pid}/fd/{n}").st_ino == self.input_ino:
                    return False
            except PermissionError:
                return False
            except OSError:
                continue
        # Not where it was: look at every descriptor before saying so (bash moves its input while it
        # runs a command's redirections, so the first look may have caught it at a passing number).
        fds = self._input_fds()
        if fds is None:
            return False
        if fds:
            self.input_fds = fds
        return not fds

    def _input_fds(self) -> tuple[int, ...] | None:
        try:
            names = os.listdir(f"/proc/{self.pid}/fd")
        except OSError:
            return None
        found = []
        for name in names:
            try:
                if os.stat(f"/proc/{self.pid}/fd/{name}").st_ino == self.input_ino:
                    found.append(int(name))
            except (OSError, ValueError):
                continue
        return tuple(found)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self, wait: float = 1.0) -> int | None:
        """The shell's exit status as a shell would report it (128+N for signal N)."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return None
        return 128 - code if code < 0 else code

    def kill(self) -> None:
        """Kill bash and close its pipes."""
        self.killed_unready = self.killed_unready or (self.alive() and not self.finished_setup())
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        for fd in (self.control, self.exit_fd):
            if fd >= 0:
                os.close(fd)
        self.control = self.exit_fd = -1
        self.unsent.clear()
        self.status.close()
        for fd in (self.status_r, self.stdout_r, self.stderr_r):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.status_r = self.stdout_r = self.stderr_r = -1

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    # -- commands --------------------------------------------------------------------------
    def run(self, command: bytes) -> None:
        """Run `command` (no NUL byte) at top level: bash reads it whole from its input, then evals it.

        It travels on bash's own input right after the line that reads it, so no file holds it
        (nothing for a command to swap for a link or a FIFO). Its status record starts with a
        nonce made for this command, sent ahead of it on that input: a record a command writes
        into the status channel itself is not taken for the real one. The line is always the same
        and holds no secret (`set -v` echoes it, `set -x` and a DEBUG trap see it).
        """
        nonce = os.urandom(16).hex().encode()  # (what secrets.token_hex does, without its Python around it)
        self.status.expect(nonce)
        if self.loop:  # the loop reads the bytes as they are, behind a tag it checks under the key
            head = b"%s%0*d" % (nonce, LENGTH_DIGITS, len(command))
            assert self.status.key is not None
            self._send(head + tag(self.status.key, head + command) + command)
            return
        body = encode_command(command)
        self._send(b"%s%s%0*d%s" % (RUN_LINE, nonce, LENGTH_DIGITS, len(body), body))

    def _checked_cwd(self, said: str) -> str:
        """The cwd bash reported if it is where bash really is, else the kernel's path for it."""
        return procs.cwd_named(self.pid, said) or said

    def _send(self, text: str | bytes) -> None:
        # surrogateescape: a cwd that is not UTF-8 (`cd $'/tmp/\xff'`) is held as its bytes escaped,
        # and goes back to bash as those bytes (strict, it ended the agent at the next restart)
        self.unsent += text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
        self.flush()

    def flush(self) -> bool:
        """Give bash what it has not taken yet, without waiting for it (a trap of the model's may
        keep bash from reading); True once all is given. The agent's loop calls again when bash
        can take more."""
        while self.unsent and self.control >= 0:
            try:
                del self.unsent[: os.write(self.control, self.unsent)]
            except BlockingIOError:
                return False
            except OSError:  # bash is gone: its status channel says so
                self.unsent.clear()
        return True

    def read_status(self) -> Status | None:
        """The running command's status, once bash has written it whole (see status.py); the cwd
        it says is checked against the kernel's."""
        status = self.status.read()
        if status is None:
            return None
        self.cwd = self._checked_cwd(status.cwd)
        return Status(status.code, self.cwd, status.syntax_error, status.broken)
