"""The command line: `prepare`, the interactive session (default), `--headless`, `replay`, `reset`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from sandshell.errors import SandshellError
from sandshell.inert import say


def prepare() -> int:
    """Check Docker, reap leftovers and make sure the sandbox image is built."""
    from sandshell import config
    from sandshell.sandbox import engine
    from sandshell.sandbox.image import ensure_image

    settings = config.load()
    client = engine.client()
    for name in engine.reap(client):
        say(f"removed leftover container {name}")
    tag = ensure_image(client, settings, say)
    from sandshell.model.llama import resolve_model_path
    from sandshell.workspace import init_workspace

    init_workspace(settings)
    if settings.backend == "llama":
        resolve_model_path(settings)
    say(f"sandbox image {tag} ready")
    return 0


def _settings(args: argparse.Namespace) -> Any:
    from sandshell import config

    s = config.load()
    changes = {
        "backend": args.backend,
        "script_path": args.script,
        "model_path": args.model,
        "profile": args.profile,
        "workspace": args.workspace,
        "workspace_mode": args.workspace_mode,
        "approval": args.approval or None,
    }
    if args.script and not args.backend:
        changes["backend"] = "script"
    return s.replace(**{k: v for k, v in changes.items() if v is not None})


def _rerun(folder: Path, settings: Any) -> Any:
    from sandshell.session.replay import actions_script

    lines = actions_script(folder)
    if not lines:
        raise SandshellError(f"the recording in {folder} has no actions to run again")
    script = settings.path(".cache") / f"rerun-{folder.name}.jsonl"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    say(f"re-running {len(lines)} answers from {folder}")
    return settings.replace(backend="script", script_path=str(script))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandshell", description="Watch a local language model live in a shell.")
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("prepare", help="check Docker and build the sandbox image")
    rp = sub.add_parser("replay", help="watch a recorded session (a folder under sessions/)")
    rp.add_argument("folder")
    rp.add_argument("--speed", type=float, default=1.0, help="how many times faster than it happened")
    rr = sub.add_parser("rerun", help="run a recorded session's actions again (script backend)")
    rr.add_argument("folder")
    rs = sub.add_parser("reset", help="archive the workspace and start it afresh; remove leftover containers")
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
    try:
        if args.cmd == "prepare":
            return prepare()
        if args.cmd == "replay":
            from sandshell.tui.run import replay_app, require_terminal, run_app

            require_terminal()
            run_app(replay_app(Path(args.folder), args.speed))
            return 0
        if args.cmd == "reset":
            from sandshell.workspace import reset

            return reset(assume_yes=args.yes)
        settings = _settings(args)
        if args.cmd == "rerun":
            settings = _rerun(Path(args.folder), settings)
        if args.headless:
            from sandshell.runner import run_task

            if not 0 < args.timeout < float("inf") or args.max_steps < 1:
                raise SandshellError("--timeout must be a finite number of seconds above 0, --max-steps 1 or more")
            goal = args.goal or settings.default_goal
            for sig in (signal.SIGTERM, signal.SIGHUP):  # end as Ctrl-C does: JSON printed, container removed
                signal.signal(sig, signal.default_int_handler)
            result = run_task(goal, args.timeout, args.max_steps, settings=settings, echo=True)
            return print_result(result)
        from sandshell.tui.run import live_app, require_terminal, run_app

        require_terminal()
        app = live_app(settings, goal=args.goal)
        run_app(app)
        if app.ended is not None:
            say(f"session {app.ended.status}" + (f": {app.ended.result}" if app.ended.result else ""))
        return 0
    except SandshellError as e:
        say(str(e))
        if args.headless:  # a script reading stdout gets its JSON even when the run never began
            print_result({"status": "error", "result": None, "error": str(e), "log": []})
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130


def print_result(result: dict[str, Any]) -> int:
    """Print a headless run's JSON result on stdout; exit status 0 only when the model finished.
    ASCII: every control and odd character is escaped, so it is always valid JSON."""
    print(json.dumps(result, indent=2))
    return 0 if result["status"] == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
