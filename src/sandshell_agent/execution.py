"""The running command: starting it in the shell, reading its output, its kill phases, its result."""

from __future__ import annotations

import os
import selectors
import signal
import time
from typing import Any, Protocol

from . import execstate, files, procs
from .command import Command, Limits, read_output
from .poller import Poller
from .shell import Shell
from .wrapper import STOP_SIGNAL

SAVE_WAIT = 2.0  # seconds bash may take to save its state after a command before it is replaced
INPUT_LOST = (
    "the shell could read no further command after this one (its own input closed or replaced, as by"
    " `exec N<&-`; the command's own exit status was {}); a new shell started with the state saved after it"
)
BROKEN = (
    "the command did not run: the shell's `set` or `eval` builtin was disabled (enable -n) and could not be"
    " enabled again; a new shell started with the state saved before"
)


class Send(Protocol):
    def __call__(self, *frames: dict[str, Any]) -> None: ...


class Runner:
    """One shell, at most one command at a time; frames go out through `send`."""

    def __init__(
        self,
        sel: Poller,
        send: Send,
        shell: Shell,
        limits: Limits,
        kill_grace: float,
        workdir: str,
        owner: tuple[int, int] | None,
        who: tuple[str, str],
    ) -> None:
        self.sel = sel
        self.send = send
        self.shell = shell
        self.limits = limits
        self.kill_grace = kill_grace
        self.workdir = workdir
        self.owner = files.Owner(workdir, *owner) if owner is not None and owner != (0, 0) else None
        self.user, self.host = who
        self.cmd: Command | None = None
        self.alive = procs.Alive()
        self.before: dict[int, int] = {}  # the processes alive before the next command: pid -> start time
        self.closed_fds: set[int] = set()
        self.replaced = False
        self.notice: str | None = None  # news about the running command (a watchdog's)
        self.background: list[str] = []  # news from between commands, told with the next result
        self.start_shell(restore=False)
        self.background += self.shell.news  # (the first shell's: told with the first result)

    # -- the shell's pipes -------------------------------------------------------------------
    def start_shell(self, restore: bool) -> None:
        self.closed_fds.clear()
        self.replaced = False
        self.shell.start(restore=restore)
        if self.shell.news and self.cmd is not None:  # told with the command at hand; between commands: `_later`
            self.notice = "; ".join(n for n in (self.notice, *self.shell.news) if n)
        self.sel.register(self.shell.status_r, selectors.EVENT_READ, "status")
        if self.shell.exit_fd >= 0:
            self.sel.register(self.shell.exit_fd, selectors.EVENT_READ, "exit")
        self.watch_output(True)
        self.give_input()
        self.before = self.alive.now()

    def give_input(self) -> None:
        """Write bash's pending input; while it does not take it all, wait for it in the loop."""
        fd, done = self.shell.control, self.shell.flush()
        registered = fd >= 0 and fd in self.sel.get_map()
        if not done and not registered and fd >= 0:
            self.sel.register(fd, selectors.EVENT_WRITE, "control")
        elif done and registered:
            self.sel.unregister(fd)

    def watch_output(self, on: bool) -> None:
        for fd, name in ((self.shell.stdout_r, "stdout"), (self.shell.stderr_r, "stderr")):
            registered = fd in self.sel.get_map()
            if fd < 0 or fd in self.closed_fds:
                continue
            if on and not registered:
                self.sel.register(fd, selectors.EVENT_READ, name)
            elif not on and registered:
                self.sel.unregister(fd)

    def stop_shell(self) -> None:
        shell = self.shell
        for fd in (shell.status_r, shell.stdout_r, shell.stderr_r, shell.control, shell.exit_fd):
            if fd >= 0 and fd in self.sel.get_map():
                self.sel.unregister(fd)
        shell.kill()

    def on_exit(self, key: selectors.SelectorKey) -> None:
        """Bash is gone. A status channel that closed while it was still ending was taken for `exec`:
        without this the loop learnt otherwise only at its next turn, up to a second later."""
        self.sel.unregister(key.fd)
        if self.replaced and self.cmd is not None:
            self._shell_ended()

    # -- a command ---------------------------------------------------------------------------
    def run(self, cid: str, command: bytes, timeout: float) -> None:
        # Bash saves the last command's state after its result went out: nothing new before it is
        # done, so a shell that hangs there (a FIFO put where it saves) costs no command a timeout.
        saved = self.shell.status.wait_saved(SAVE_WAIT)
        if saved == "hung" and self.shell.alive():
            self._between(f"the shell did not finish saving its state within {SAVE_WAIT:g} s of the last command")
        elif saved == "ended" or not self.shell.alive():  # (its channel closes as it dies: wait for its end)
            self._between(self._ended())
        self.cmd = Command(cid, command, timeout, self.before, self.limits)
        self.shell.run(command)
        self.give_input()

    def interrupt(self, cid: Any) -> None:
        if self.cmd is not None and (cid is None or cid == self.cmd.id):
            self.cmd.interrupted = True
            self.begin_kill()

    def on_output(self, fd: int, stream: str) -> None:
        try:
            data = read_output(fd)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(fd)  # every writer closed; a revived shell brings new pipes
            self.closed_fds.add(fd)
            return
        if self.cmd is None:
            return  # a background job printing between commands: nobody asked for it
        self.cmd.feed(stream, data)
        if self.cmd.output_limited and self.cmd.phase is None:
            self.begin_kill()

    def on_status(self, drained: bool = False) -> None:
        """Bash wrote to its status channel; `drained`: its output channels were seen empty with it."""
        try:
            status = self.shell.read_status()
        except (EOFError, OSError):
            status = None
            dead = True
        else:
            dead = False
        if status is not None:
            if self.cmd is not None:
                if not drained:  # what the command wrote before its status is all there by now
                    self._drain_output()
                lost = not status.broken and self.cmd.phase is None and self.shell.input_lost()
                restart = status.broken or self.cmd.phase is not None or lost
                if restart:
                    # The shell was sent USR2 but ended the command first (the trap still pending
                    # would end it under the next command), or the builtins the wrapper needs are
                    # gone for good: once its state is saved (or the trap has saved it and ended
                    # the shell), a fresh one.
                    self.shell.status.wait_saved(SAVE_WAIT)
                    self._kill_stopped_tree()
                    self.stop_shell()
                    self.start_shell(restore=True)
                code = None if status.broken or lost else status.code
                why = BROKEN if status.broken else INPUT_LOST.format(status.code) if lost else None
                self._finish(
                    code,
                    syntax_error=status.syntax_error,
                    restarted=restart,
                    **({"error": why} if why else {}),
                )
            return
        if not dead:
            return
        if self.shell.alive():
            # `exec` replaced the shell with another program: that program is the command now.
            execstate.keep(self.shell.pid, self.shell.state_dir)  # at once: it may end at once
            if self.shell.status_r in self.sel.get_map():
                self.sel.unregister(self.shell.status_r)
            self.replaced = True
            return
        self._shell_ended()

    def _shell_ended(self) -> None:
        """The shell exited (exit 3, kill -9 $$, set -e, an exec'd program ended): revive it."""
        code = self.shell.exit_code(wait=0.5)
        unread = not self.shell.finished_setup()  # it died before it read the command (in its setup)
        if self.cmd is not None:
            self._drain_output()
        self._kill_stopped_tree()
        self.stop_shell()
        self.start_shell(restore=True)
        if self.cmd is not None and unread and self.cmd.phase is None and not self.cmd.rerun:
            self.cmd.rerun = True  # (once: a fresh shell that died too would not do better)
            self.shell.run(self.cmd.text)  # in the fresh shell: nothing of it ran in the last one
            self.give_input()
            return
        if self.cmd is None:  # between commands (in its save, or killed from the background)
            self._later(self._ended(code))
        elif self.cmd.phase is not None:
            self._finish(code, restarted=True)  # stopped on purpose: the result says why
        elif self.cmd is not None:
            self._finish(
                code,
                restarted=True,
                error="the shell exited; a new one started in the same cwd"
                if not self.shell.unreachable
                else "the shell exited; a new one started",
            )

    def _ended(self, code: int | None = None) -> str:
        code = self.shell.exit_code(wait=0.5) if code is None else code
        how = "" if code is None else f" (killed by signal {code - 128})" if code > 128 else f" (exit status {code})"
        return f"the shell ended after the last command{how}"

    def _between(self, news: str) -> None:
        """Replace a shell that ended or hung between commands (none of a command's processes to kill)."""
        self.stop_shell()
        self.start_shell(restore=True)
        self._later(news)

    def _later(self, news: str) -> None:
        """News of a shell replaced between commands, for the next result."""
        saved = "" if self.shell.fell_back else " with the state saved before"
        self.background.append("; ".join([f"{news}; a new one started{saved}", *self.shell.news]))
        del self.background[:-4]

    def _kill_stopped_tree(self) -> None:
        """A command being stopped ended before its kill phases did: what it started and still runs
        (a child that ignores TERM, orphaned to init once the shell left) is killed now."""
        if self.cmd is not None and self.cmd.phase is not None:
            procs.kill_all(self.cmd.before, self.shell.pid, {os.getpid(), 1})

    def _drain_output(self) -> None:
        assert self.cmd is not None
        self.cmd.drain(((self.shell.stdout_r, "stdout"), (self.shell.stderr_r, "stderr")))

    def begin_kill(self) -> None:
        cmd = self.cmd
        if cmd is None or cmd.phase is not None:
            return
        cmd.phase = "term"
        cmd.phase_deadline = time.monotonic() + self.kill_grace
        self.shell.terminate()  # first, so the shell runs nothing more of this command line
        if procs.ignores(self.shell.pid, STOP_SIGNAL):  # `trap '' USR2`: freeze it until the hard kill
            procs.signal_all([self.shell.pid], signal.SIGSTOP)
            cmd.phase_deadline = time.monotonic() + 0.2
        else:  # a shell frozen by the disk watchdog wakes to its USR2 trap
            procs.signal_all([self.shell.pid], signal.SIGCONT)
        found = procs.spawned_since(cmd.before, self.shell.pid, {os.getpid(), 1})
        procs.signal_all(found, signal.SIGTERM)
        if not found:  # only the shell itself was busy: give its USR2 trap a moment
            cmd.phase, cmd.phase_deadline = "kill", time.monotonic() + 0.3

    def tick(self, now: float) -> None:
        """Flush output that waited long enough, and move a timed-out command through its kill phases."""
        cmd = self.cmd
        if cmd is None:
            return
        if cmd.flush_due(now):
            self.send(*cmd.frames())
        if self.replaced and not self.shell.alive():
            self._shell_ended()
            return
        if cmd.phase is None and now >= cmd.deadline:
            cmd.timed_out = True
            self.begin_kill()
        elif cmd.phase == "term" and now >= cmd.phase_deadline:
            procs.kill_all(cmd.before, self.shell.pid, {os.getpid(), 1})
            cmd.phase, cmd.phase_deadline = "kill", now + 0.5
        elif cmd.phase == "kill" and now >= cmd.phase_deadline:
            # Its children are gone and the shell still has not ended the command line: kill it too.
            self._drain_output()
            self.stop_shell()
            procs.kill_all(cmd.before, -1, {os.getpid(), 1})
            self.start_shell(restore=True)
            self._finish(
                None,
                restarted=True,
                signal="SIGKILL",
                error="the shell did not stop and was killed; "
                "a new one started with the cwd and exports from before this command",
            )

    def wait_seconds(self, now: float) -> float | None:
        """How long the loop may sleep before this command needs attention (None: no command)."""
        c = self.cmd
        if c is None:
            return None
        waits = [(c.phase_deadline if c.phase else c.deadline) - now]
        if c.pending_since is not None:
            waits.append(c.pending_since + 0.05 - now)
        return min(waits)

    def _finish(self, code: int | None, **extra: Any) -> None:
        cmd = self.cmd
        assert cmd is not None
        self.send(*cmd.frames(final=True))
        if self.owner is not None and os.geteuid() == 0:  # (root's files are root's already)
            self.owner.fix()
        self.cmd = None
        notices = [n for n in (self.notice, cmd.file_limit_notice(code, self.shell.file_limit)) if n]
        notices += [f"before this command, in the background: {n}" for n in self.background]
        self.notice, self.background = None, []
        if notices:
            extra["notice"] = "; ".join(notices)
        self.send(cmd.result(code, self.shell.shown_cwd, self.user, self.host, **extra))
        # What runs now is not the next command's: taken here, while the host reads the result (a
        # background job's later children are still spared, their parent being in it).
        self.before = self.alive.now()
