"""Settings: one object built once from the environment and `.env`, every field documented.

Names are as in `.env.example`: `LLAMA_*` for the model (any `llama_cpp.Llama` constructor parameter or
chat-completion parameter may be given as `LLAMA_<NAME>`), `SANDSHELL_*` for the sandbox, the session and the UI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from pydantic import ByteSize, TypeAdapter, ValidationError

from sandshell import envfile
from sandshell.engineconfig import EngineSettings, _f
from sandshell.errors import SettingsError
from sandshell.llama_params import llama_params, near_miss
from sandshell.ranges import check_ranges

DEFAULT_GOAL = (
    "Explore this Linux machine. Find out what it is and what it can do, keep notes in "
    "/app/notes.md, and improve your own instructions in /app/system.md as you learn."
)


Bytes, GiB = Annotated[int, "bytes"], 1024**3  # a size, written as 4GiB, 500MB or plain bytes


@dataclass(frozen=True)
class Settings(EngineSettings):
    """Everything sandshell can be told, with its default (which engine, and the cluster's settings,
    come first: `EngineSettings`)."""

    # -- model -----------------------------------------------------------------------------
    model_path: str = _f("LLAMA_MODEL_PATH", "", "GGUF model file; empty uses the embedded SmolLM2-135M-Instruct")
    backend: Literal["llama", "openai", "script"] = _f(
        "LLAMA_BACKEND",
        "llama",
        "llama (llama.cpp in-process), openai (any OpenAI-compatible server) or script (actions from a JSONL file)",
    )
    openai_base_url: str = _f(
        "LLAMA_OPENAI_BASE_URL", "http://127.0.0.1:8080/v1", "base URL of the OpenAI-compatible server"
    )
    openai_model: str = _f("LLAMA_OPENAI_MODEL", "default", "model name sent to the OpenAI-compatible server")
    openai_api_key: str = _f("LLAMA_OPENAI_API_KEY", "", "API key for the OpenAI-compatible server (empty: none)")
    script_path: str = _f("LLAMA_SCRIPT", "", "JSONL file of actions for the script backend, one action a line")
    n_ctx: int = _f("LLAMA_N_CTX", 4096, "context window in tokens (a load-time setting)")
    max_tokens: int = _f("LLAMA_MAX_TOKENS", 384, "most tokens the model may write in one turn")
    context_margin: int = _f("LLAMA_CONTEXT_MARGIN", 64, "tokens kept free between the prompt and max_tokens")
    grammar: bool = _f("LLAMA_GRAMMAR", True, "constrain generation so every answer parses as actions")
    parse_retries: int = _f("LLAMA_PARSE_RETRIES", 2, "retries when an unconstrained answer does not parse")
    intro: bool = _f("LLAMA_INTRO", True, "start each session with a few scripted actions that show the format")
    repeat_limit: int = _f(
        "LLAMA_REPEAT_LIMIT", 4, "stop after the model repeats the same action this many times in a row (0: never)"
    )
    observation_tokens: int = _f(
        "LLAMA_OBSERVATION_TOKENS", 0, "most tokens one observation takes (0: a fifth of the context); less is faster"
    )
    # help for small models: each off by default, measured on and off with `sandshell eval`
    few_shot: bool = _f("LLAMA_FEW_SHOT", False, "add a few short examples of answers to the fixed prompt")
    comment_chars: int = _f(
        "LLAMA_COMMENT_CHARS", -1, "most characters of an action's comment, by the grammar (-1: no cap, 0: none)"
    )
    intro_style: Literal["turn", "observation"] = _f(
        "LLAMA_INTRO_STYLE",
        "turn",
        "turn (the intro reads as the model's first answer) or observation (its output is in the opening message)",
    )
    best_of: int = _f("LLAMA_BEST_OF", 1, "sample this many answers a turn and keep the one a checker likes best")
    error_fix: bool = _f("LLAMA_ERROR_FIX", False, "after a failed command, quote its error and ask for a fix")
    nudge: bool = _f("LLAMA_NUDGE", False, "once a session, restate the goal instead of stopping a stuck model")
    history_penalty: float = _f(
        "LLAMA_HISTORY_PENALTY", 1.0, "repeat penalty on the commands of the last two answers (1.0: off; llama only)"
    )
    default_goal: str = _f("LLAMA_DEFAULT_GOAL", DEFAULT_GOAL, "the goal when /app/goal is absent")
    exit_timeout: float = _f(
        "LLAMA_EXIT_TIMEOUT", 10.0, "seconds a command may run before its whole process tree is killed"
    )
    max_exit_timeout: float = _f("LLAMA_MAX_EXIT_TIMEOUT", 120.0, "the most a per-command timeout may ask for")
    # -- where things live -----------------------------------------------------------------
    home: str = _f(
        "SANDSHELL_HOME",
        "",
        "folder that relative paths (workspace, sessions, cache) and .env are found in; empty: the current directory",
    )
    # -- sandbox ---------------------------------------------------------------------------
    workspace: str = _f("SANDSHELL_WORKSPACE", "workspace", "host folder mounted at /app")
    workspace_mode: Literal["rw", "ro", "copy"] = _f(
        "SANDSHELL_WORKSPACE_MODE",
        "rw",
        "rw (read-write mount), ro (read-only mount) or copy (copied in; the host folder is never touched)",
    )
    profile: Literal["standard", "locked"] = _f(
        "SANDSHELL_PROFILE", "standard", "standard (root, network) or locked (no network, no capability, read-only)"
    )
    base_image: str = _f(
        "SANDSHELL_BASE_IMAGE",
        "auto",
        "base image; auto: a local bootstrap, else python:3.12-slim-bookworm if pullable, else debootstrap one",
    )
    image: str = _f(
        "SANDSHELL_IMAGE", "sandshell-sandbox", "name of the sandbox image (its tag is a hash of what builds it)"
    )
    docker_host: str = _f(
        "SANDSHELL_DOCKER_HOST",
        "",
        "the Docker engine sandboxes run on: unix:///path.sock, tcp://HOST:PORT (mutual TLS with "
        "SANDSHELL_DOCKER_TLS) or ssh://USER@HOST; empty: DOCKER_HOST from the environment, else the local socket",
    )
    docker_hosts: str = _f(
        "SANDSHELL_DOCKER_HOSTS",
        "",
        "engines the HTTP service spreads sessions over: URLs as SANDSHELL_DOCKER_HOST, comma-separated, "
        "the one running fewest sessions first (empty: SANDSHELL_DOCKER_HOST alone; not used with "
        "SANDSHELL_ENGINE=kubernetes, whose scheduler places pods)",
    )
    docker_tls: str = _f(
        "SANDSHELL_DOCKER_TLS",
        "",
        "folder with ca.pem, cert.pem and key.pem for a tcp:// engine (empty: DOCKER_CERT_PATH when "
        "DOCKER_TLS_VERIFY is set)",
    )
    workspace_transfer: Literal["auto", "mount", "archive"] = _f(
        "SANDSHELL_WORKSPACE_TRANSFER",
        "auto",
        "mount (the host folder is bind-mounted; no set-id file or device node can be made in it), "
        "archive (copied in through the engine's API "
        "and, in rw mode, copied back) or auto (mount on a local engine, archive on a remote one)",
    )
    git_write: bool = _f("SANDSHELL_GIT_WRITE", False, "rw mode: let the model write the workspace's own .git")
    sync_seconds: float = _f(
        "SANDSHELL_SYNC_SECONDS",
        30.0,
        "archive transfer in rw mode: after an action, copy /app back to the host folder when this many "
        "seconds passed since the last copy (0: only at the end and when asked)",
    )
    memory: str = _f("SANDSHELL_MEMORY", "2g", "container memory limit (docker units)")
    cpus: float = _f("SANDSHELL_CPUS", 1.0, "container CPU limit")
    pids_limit: int = _f("SANDSHELL_PIDS_LIMIT", 256, "most processes in the container")
    output_limit: int = _f(
        "SANDSHELL_OUTPUT_LIMIT",
        1024 * 1024,
        "bytes of one command's output streamed live (0: no limit); the rest goes to a spill file",
    )
    spill_limit: int = _f(
        "SANDSHELL_SPILL_LIMIT",
        32 * 1024 * 1024,
        "bytes kept in a spill file before a flooding command is stopped (0: no limit)",
    )
    workspace_limit: Annotated[int, "bytes"] = _f(
        "SANDSHELL_WORKSPACE_LIMIT",
        4 * GiB,
        "most bytes /app may hold (sizes as 4GiB, 500MB or bytes; 0: no limit); a command that writes past it "
        "is stopped, and nothing already there is deleted",
    )
    file_limit: Annotated[int, "bytes"] = _f(
        "SANDSHELL_FILE_LIMIT",
        GiB,
        "largest file the model's processes may write (RLIMIT_FSIZE; 0: no limit; never above the other two)",
    )
    scratch_limit: Annotated[int, "bytes"] = _f(
        "SANDSHELL_SCRATCH_LIMIT",
        GiB,
        "size of /tmp (a tmpfs, in memory), and most bytes the model may add to the rest of the container's "
        "files (0: no limit)",
    )
    kill_grace: float = _f("SANDSHELL_KILL_GRACE", 1.0, "seconds between TERM and KILL when a command times out")
    shell_loop: Literal["auto", "off"] = _f(
        "SANDSHELL_SHELL_LOOP", "auto", "auto (a compiled command loop if the image's bash loads it) or off (bash only)"
    )
    shell_cpu: Literal["any", "shared"] = _f(
        "SANDSHELL_SHELL_CPU", "any", "any, or shared (the agent and its bash keep to one CPU between commands)"
    )
    agent_code: Literal["compiled", "source"] = _f(
        "SANDSHELL_AGENT_CODE", "compiled", "compiled (the agent as compiled with the image, if it was) or source"
    )
    state_limit: int = _f(
        "SANDSHELL_STATE_LIMIT", 16 * 1024, "bytes read of /app/goal, /app/system.md and /app/config.json each"
    )
    # -- session ---------------------------------------------------------------------------
    max_steps: int = _f("SANDSHELL_MAX_STEPS", 0, "turns before the session stops (0: no limit)")
    max_seconds: float = _f("SANDSHELL_MAX_SECONDS", 0.0, "seconds before the session stops (0: no limit)")
    approval: bool = _f("SANDSHELL_APPROVAL", False, "ask before each action runs")
    sessions_dir: str = _f("SANDSHELL_SESSIONS_DIR", "sessions", "where session recordings are written")
    ui_max_lines: int = _f("SANDSHELL_UI_MAX_LINES", 5000, "lines the terminal UI keeps")
    cast_version: Literal["2", "3"] = _f(
        "SANDSHELL_CAST_VERSION", "2", "asciicast version of session.cast: 2 (for asciinema 2.x) or 3 (asciinema 3)"
    )
    recording_limit: Annotated[int, "bytes"] = _f("SANDSHELL_RECORDING_LIMIT", 2**26, "bytes a recording may hold")
    cast_idle_limit: float = _f(
        "SANDSHELL_CAST_IDLE_LIMIT", 2.0, "players shorten pauses in session.cast to this many seconds (0: keep them)"
    )
    # -- the HTTP service (`sandshell serve`) ------------------------------------------------
    api_token: str = _f(
        "SANDSHELL_API_TOKEN",
        "",
        "bearer token of the HTTP API; empty: one is made at first start and kept (mode 0600) in "
        "SESSIONS_DIR/.service/api-token",
    )
    max_sessions: int = _f("SANDSHELL_MAX_SESSIONS", 4, "API tasks that run at once, each in its own sandbox")
    max_conversations: int = _f("SANDSHELL_MAX_CONVERSATIONS", 4, "API chat conversations open at once")
    conversation_idle: float = _f(
        "SANDSHELL_CONVERSATION_IDLE", 600.0, "seconds a chat conversation may sit idle before its sandbox ends"
    )
    api_body_limit: Annotated[int, "bytes"] = _f(
        "SANDSHELL_API_BODY_LIMIT", 64 * 1024, "largest HTTP request body the API accepts (sizes as 64KiB or bytes)"
    )
    api_profiles: str = _f(
        "SANDSHELL_API_PROFILES",
        "locked",
        "profiles API clients may ask for, comma-separated (standard gives root and the network to anyone with "
        "the token); a request naming none gets SANDSHELL_PROFILE when it is listed, else the first listed",
    )
    openai_slots: int = _f(
        "LLAMA_OPENAI_SLOTS",
        0,
        "generations at once with the openai backend, each session keeping its slot (id_slot); "
        "0: the server's slot count from /props (1 when it does not say)",
    )
    # -- free-form llama.cpp parameters (LLAMA_<NAME>) -------------------------------------
    load_params: dict[str, Any] = field(default_factory=dict, metadata={"env": "", "doc": ""})
    sampling: dict[str, Any] = field(default_factory=dict, metadata={"env": "", "doc": ""})

    @property
    def home_dir(self) -> Path:
        return Path(self.home).expanduser().absolute() if self.home else Path.cwd()

    def path(self, value: str) -> Path:
        """Resolve a settings path against SANDSHELL_HOME (or the current directory), never the package."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.home_dir / p

    def replace(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def default_env_file(environ: dict[str, str] | None = None) -> Path:
    """`.env` in SANDSHELL_HOME, or in the current directory."""
    return Path((os.environ if environ is None else environ).get("SANDSHELL_HOME") or ".").expanduser() / ".env"


def load(
    env_file: str | Path | Literal["default"] | None = "default", environ: dict[str, str] | None = None
) -> Settings:
    """Build the settings from `.env` then the environment (which wins)."""
    env_file = default_env_file(environ) if env_file == "default" else env_file
    values, errors = envfile.read(env_file) if env_file is not None and Path(env_file).is_file() else ({}, [])
    values.update(os.environ if environ is None else environ)
    hints = get_type_hints(Settings, include_extras=True)
    known = {f.metadata["env"]: f.name for f in fields(Settings) if f.metadata.get("env")}
    kwargs: dict[str, Any] = {}
    for env, name in known.items():
        if env in values and values[env] != "":
            try:
                kwargs[name] = _coerce(hints[name], values[env])
            except ValueError as e:
                errors.append(f"{env}={values[env]!r} {e}")
    extra = {k: v for k, v in values.items() if k.startswith("LLAMA_") and k not in known}
    unknown = sorted(k for k in values if k.startswith("SANDSHELL_") and k not in known)  # a typo runs defaults
    errors += [f"{k} is not a setting sandshell knows{near_miss(k, known)}" for k in unknown]
    load_params, sampling, extra_errors = llama_params(extra, known)
    errors += extra_errors
    if errors:
        raise SettingsError("bad setting: " + "; ".join(errors) + " (see .env.example)")
    settings = Settings(**kwargs, load_params=load_params, sampling=sampling)
    check_ranges(settings)
    return settings


def _coerce(tp: Any, raw: str) -> Any:
    if tp == Bytes:
        try:
            return int(TypeAdapter(ByteSize).validate_strings(raw))
        except ValidationError:
            raise ValueError("is not a size (e.g. 4GiB, 500MB, or a number of bytes)") from None
    if get_origin(tp) is Literal:
        if raw not in get_args(tp):
            raise ValueError("must be one of " + ", ".join(map(str, get_args(tp))))
        return raw
    try:
        return TypeAdapter(tp).validate_strings(raw)
    except ValidationError:
        raise ValueError(
            "is not true or false" if tp is bool else f"is not a valid {getattr(tp, '__name__', tp)}"
        ) from None
