"""One persistent bash: commands run in it by `eval`, state is saved after each so it can be revived."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess

STATUS_FD = 200  # bash writes "rc NUL cwd NUL" here after each command; hidden from commands

NONINTERACTIVE_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "LESS": "-R",
    "EDITOR": "true",
    "VISUAL": "true",
    "GIT_EDITOR": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_PROGRESS_BAR": "off",
    "PIP_NO_INPUT": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_ROOT_USER_ACTION": "ignore",
    "TQDM_DISABLE": "1",
    "PYTHONUNBUFFERED": "1",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}


def base_env(home: str) -> dict[str, str]:
    env = dict(NONINTERACTIVE_ENV)
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env["HOME"] = home
    return env


# Full-screen editors would wait on a terminal that is not there until the timeout: say so at once.
EDITOR_STUBS = "\n".join(
    f'{name}() {{ echo "sandshell: {name} needs a terminal; write files with a write action or a heredoc" >&2;'
    " return 1; }"
    for name in ("vi", "vim", "nano", "emacs", "pico")
)


class Shell:
    """A bash process reading control lines on stdin; output on two pipes, status on a third."""

    def __init__(self, state_dir: str, home: str, cwd: str) -> None:
        self.state_dir = state_dir
        self.home = home
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.status_r = -1
        self.stdout_r = -1
        self.stderr_r = -1
        self._status_buf = b""

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, restore: bool = False) -> None:
        """Start bash; with `restore`, in the last cwd with the last exported env and functions."""
        status_r, status_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()

        self.proc = subprocess.Popen(
            ["/bin/bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=out_w,
            stderr=err_w,
            env=base_env(self.home),
            cwd=self.cwd if os.path.isdir(self.cwd) else "/",
            start_new_session=True,  # a signal to the agent's group never reaches it
            pass_fds=(status_w,),
            close_fds=True,
        )
        for fd in (status_w, out_w, err_w):
            os.close(fd)
        for fd in (status_r, out_r, err_r):
            os.set_blocking(fd, False)
        self.status_r, self.stdout_r, self.stderr_r = status_r, out_r, err_r
        self._status_buf = b""
        prelude = [f"exec {STATUS_FD}>&{status_w} {status_w}>&-", "set +o history", EDITOR_STUBS]
        if restore:
            for name in ("exports.sh", "functions.sh"):
                path = os.path.join(self.state_dir, name)
                prelude.append(f"[ -r {shlex.quote(path)} ] && . {shlex.quote(path)} 2>/dev/null")
        prelude.append(f"cd -- {shlex.quote(self.cwd)} 2>/dev/null")
        self._send("\n".join(prelude) + "\n")

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
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    self.proc.kill()
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            if self.proc.stdin:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
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
    def run(self, command_file: str) -> None:
        """Start the command in `command_file` (read whole, then eval'd at top level)."""
        st = shlex.quote(self.state_dir)
        f = shlex.quote(command_file)
        # Defining a function parses the whole command without running any of it, so a syntax
        # error (an unterminated quote or heredoc) is reported at once and nothing half-runs.
        line = (
            f"IFS= read -r -d '' __ss_cmd < {f}; "
            'if eval "__ss_syntax() {\n:\n$__ss_cmd\n}" </dev/null; then unset -f __ss_syntax; '
            f'eval "$__ss_cmd" </dev/null {STATUS_FD}>&-; __ss_rc=$?; __ss_how=ran; '
            "else __ss_rc=2; __ss_how=syntax; fi; "
            f"export -p > {st}/exports.sh 2>/dev/null; declare -f > {st}/functions.sh 2>/dev/null; "
            f'printf \'%s\\0%s\\0%s\\0\' "$__ss_rc" "$PWD" "$__ss_how" >&{STATUS_FD}\n'
        )
        self._send(line)

    def _send(self, text: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def read_status(self) -> tuple[int, str, bool] | None:
        """Read the status pipe; returns (exit code, cwd, syntax error) once a record is whole."""
        try:
            data = os.read(self.status_r, 4096)
        except BlockingIOError:
            return None
        if not data:
            raise EOFError("the shell closed its status pipe")
        self._status_buf += data
        parts = self._status_buf.split(b"\0")
        if len(parts) < 4:
            return None
        rc_raw, cwd_raw, how = parts[0], parts[1], parts[2]
        self._status_buf = b"\0".join(parts[3:])
        self.cwd = cwd_raw.decode(errors="replace")
        try:
            return int(rc_raw), self.cwd, how == b"syntax"
        except ValueError:
            return 255, self.cwd, False
