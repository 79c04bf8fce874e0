"""A sandbox with no container: files in memory, each command answered by a function. It stands in
for the real one where a session's logic is what matters (tests of the loop, demos), as the
script backend stands in for a model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sandshell.errors import SandboxError
from sandshell.sandbox.protocol import FileContent, ModelState, Output, Result

Reply = tuple[str, int]  # what a command prints, and its exit status


def unknown(command: str) -> Reply:
    return f"bash: {command.split()[0] if command.split() else command}: command not found\n", 127


@dataclass
class ScriptedSandbox:
    """`files` maps paths to their text; `answer` says what each command prints and returns."""

    files: dict[str, str] = field(default_factory=dict)
    answer: Callable[[str], Reply] = unknown
    commands: list[str] = field(default_factory=list)  # every command it was asked to run, in order
    session_id: str = "scripted"

    def execute(
        self, command: str, timeout: float | None = None, on_output: Callable[[Output], None] | None = None
    ) -> Result:
        self.commands.append(command)
        output, code = self.answer(command)
        if on_output is not None and output:
            on_output(Output(str(len(self.commands)), 0, "stdout", output))
        return Result(command, code, output=output, tail=output)

    def read_file(self, path: str, limit: int | None = None) -> FileContent:
        if path not in self.files:
            return FileContent(path, None, error="No such file or directory")
        text = self.files[path]
        cut = text[:limit] if limit is not None else text
        return FileContent(path, cut, size=len(text.encode()), truncated=len(cut) < len(text))

    def write_file(self, path: str, content: str, append: bool = False) -> int:
        if not path.startswith("/"):
            raise SandboxError(f"cannot write {path}: not an absolute path")
        self.files[path] = (self.files.get(path, "") if append else "") + content
        return len(self.files[path].encode())

    def state(self) -> ModelState:
        def read(path: str) -> FileContent:
            return self.read_file(path) if path in self.files else FileContent(path, None, error="missing")

        return ModelState(read("/app/goal"), read("/app/system.md"), read("/app/config.json"))

    def interrupt(self) -> None:
        """Nothing runs for long here: there is nothing to interrupt."""


__all__ = ["ScriptedSandbox", "unknown"]
