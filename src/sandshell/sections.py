"""The sections of the settings: one frozen dataclass for each part of sandshell, every field
documented (its `.env` name and one line, in the field's metadata), and the ranges it must keep.

Each component takes its own section: the model its `ModelSettings`, the sandbox its
`SandboxSettings`, and so on. Every section carries the `Home` that its relative paths are found
in, so that a component can resolve them without the whole settings object.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Self

# Concrete on purpose: the tuned 135M default does a goal like this from start to `done`; an open one
# ("explore this machine") is beyond it. A bigger model (LLAMA_MODEL_PATH) may take any goal.
DEFAULT_GOAL = "Find out which kernel this machine runs (what uname -a prints) and write it into /app/notes.md."

Bytes, GiB = Annotated[int, "bytes"], 1024**3  # a size, written as 4GiB, 500MB or plain bytes


def _f(env: str, default: Any, doc: str) -> Any:
    return field(default=default, metadata={"env": env, "doc": doc})


@dataclass(frozen=True)
class Home:
    """Where relative paths (workspace, sessions, cache) and `.env` are found."""

    folder: str = _f(
        "SANDSHELL_HOME",
        "",
        "folder that relative paths (workspace, sessions, cache) and .env are found in; empty: the current directory",
    )

    @property
    def dir(self) -> Path:
        return Path(self.folder).expanduser().absolute() if self.folder else Path.cwd()

    def path(self, value: str) -> Path:
        """Resolve a settings path against SANDSHELL_HOME (or the current directory), never the package."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.dir / p


@dataclass(frozen=True, kw_only=True)
class Section:
    """What every section has: the home its paths are relative to, `replace` and its range checks."""

    home: Home = field(default_factory=Home, repr=False, compare=False, metadata={"env": "", "doc": ""})

    def path(self, value: str) -> Path:
        """A path setting of this section, resolved against the home."""
        return self.home.path(value)

    def replace(self, **changes: Any) -> Self:
        return replace(self, **changes)

    def problems(self) -> list[str]:
        """Every value out of its range, one clause each (empty when all are in range)."""
        return _not_finite(self)


def _not_finite(section: Section, told: Collection[str] = ()) -> list[str]:
    """pydantic reads "nan", "inf" and "-1" as floats: none is a time or a size here."""
    return [
        f"{f.metadata.get('env') or f.name} must be a finite number, 0 or more"
        for f in fields(section)
        if isinstance(value := getattr(section, f.name), float)
        and not 0 <= value < math.inf
        and f.metadata.get("env") not in told
    ]


@dataclass(frozen=True, kw_only=True)
class ModelSettings(Section):
    """The model: which backend, how big a context, how it samples, and the help for small models."""

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
    observation_tokens: int = _f(
        "LLAMA_OBSERVATION_TOKENS", 0, "most tokens one observation takes (0: a fifth of the context); less is faster"
    )
    adapter: Literal["on", "off"] = _f(
        "LLAMA_ADAPTER",
        "on",
        "on: the embedded default model loads with its sandshell-tuned LoRA adapter; off: the plain model "
        "(a model of your own, LLAMA_MODEL_PATH, never gets it)",
    )
    prompt: Literal["auto", "full", "short"] = _f(
        "LLAMA_PROMPT",
        "auto",
        "fixed system prompt: full (system.md), short (the one the adapter was trained on) or auto (short "
        "when the adapter is loaded, else full)",
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
    # free-form llama.cpp parameters (LLAMA_<NAME>), typed by llama-cpp-python's own signatures
    load_params: dict[str, Any] = field(default_factory=dict, metadata={"env": "", "doc": ""})
    sampling: dict[str, Any] = field(default_factory=dict, metadata={"env": "", "doc": ""})

    def problems(self) -> list[str]:
        problems = []
        if self.n_ctx < 256:
            problems.append(f"LLAMA_N_CTX must be at least 256, not {self.n_ctx}")
        if self.max_tokens < 16 or (self.max_tokens > self.n_ctx // 2 and self.n_ctx >= 256):  # (too small: above)
            half = self.n_ctx // 2
            problems.append(
                f"LLAMA_MAX_TOKENS must be between 16 and half of LLAMA_N_CTX ({half}), not {self.max_tokens}"
            )
        problems += _not_finite(self)
        if self.observation_tokens < 0:
            problems.append("LLAMA_OBSERVATION_TOKENS must be 0 or more")
        if not 1 <= self.best_of <= 8 or self.comment_chars < -1 or not 1.0 <= self.history_penalty <= 2.0:
            problems.append(
                "LLAMA_BEST_OF must be 1 to 8, LLAMA_COMMENT_CHARS -1 or more, LLAMA_HISTORY_PENALTY 1 to 2"
            )
        return problems


@dataclass(frozen=True, kw_only=True)
class SandboxSettings(Section):
    """The sandbox: its image, profile and workspace, the engine it runs on, its limits and timeouts."""

    engine: Literal["docker", "kubernetes"] = _f(
        "SANDSHELL_ENGINE",
        "docker",
        "docker (a container on a Docker engine) or kubernetes (a pod on a cluster, placed by its scheduler, "
        "reached through pods/attach; the workspace is streamed in and back through the agent)",
    )
    kube_config: str = _f(
        "SANDSHELL_KUBECONFIG",
        "",
        "kubeconfig file for the kubernetes engine; empty: in-cluster config inside a pod, else KUBECONFIG or "
        "~/.kube/config",
    )
    kube_context: str = _f("SANDSHELL_KUBE_CONTEXT", "", "kubeconfig context to use (empty: its current context)")
    kube_namespace: str = _f(
        "SANDSHELL_KUBE_NAMESPACE", "", "namespace sessions' pods run in (empty: the context's, else default)"
    )
    kube_image: str = _f(
        "SANDSHELL_KUBE_IMAGE",
        "",
        "the sandbox image as the cluster pulls it (REGISTRY/sandshell-sandbox:TAG, pushed as docs/scaling.md "
        "says); required with the kubernetes engine",
    )
    kube_runtime_class: str = _f(
        "SANDSHELL_KUBE_RUNTIME_CLASS", "", "runtimeClassName of sessions' pods, e.g. gvisor or kata (empty: none)"
    )
    kube_node_selector: str = _f(
        "SANDSHELL_KUBE_NODE_SELECTOR", "", "node labels sessions' pods must land on: KEY=VALUE, comma-separated"
    )
    kube_priority_class: str = _f(
        "SANDSHELL_KUBE_PRIORITY_CLASS", "", "priorityClassName of sessions' pods (empty: the cluster's default)"
    )
    kube_start_timeout: float = _f(
        "SANDSHELL_KUBE_START_TIMEOUT",
        120.0,
        "seconds a pod may take to be scheduled, pull its image and start before the session gives up",
    )
    kube_deadline: int = _f(
        "SANDSHELL_KUBE_DEADLINE", 86400, "activeDeadlineSeconds of a session's pod: a backstop if the host vanishes"
    )
    kube_heartbeat: float = _f(
        "SANDSHELL_KUBE_HEARTBEAT",
        20.0,
        "seconds between WebSocket pings on an idle attach (kubelets drop idle streams)",
    )
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
        "the one running fewest sessions first (empty: SANDSHELL_DOCKER_HOST alone)",
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
    exit_timeout: float = _f(
        "LLAMA_EXIT_TIMEOUT", 10.0, "seconds a command may run before its whole process tree is killed"
    )
    max_exit_timeout: float = _f("LLAMA_MAX_EXIT_TIMEOUT", 120.0, "the most a per-command timeout may ask for")
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

    def problems(self) -> list[str]:
        problems, told = [], set()
        if 0 <= self.max_exit_timeout < math.inf and (
            self.exit_timeout <= 0 or self.exit_timeout > self.max_exit_timeout
        ):
            told.add("LLAMA_EXIT_TIMEOUT")
            most, got = f"{self.max_exit_timeout:g}", f"{self.exit_timeout:g}"
            problems.append(
                f"LLAMA_EXIT_TIMEOUT must be above 0 and at most LLAMA_MAX_EXIT_TIMEOUT ({most}), not {got}"
            )
        problems += _not_finite(self, told)
        if self.pids_limit < 16:
            problems.append("SANDSHELL_PIDS_LIMIT must be at least 16")
        return problems


@dataclass(frozen=True, kw_only=True)
class SessionSettings(Section):
    """A session: its goal, its limits, approval, and where and how it is recorded."""

    default_goal: str = _f("LLAMA_DEFAULT_GOAL", DEFAULT_GOAL, "the goal when /app/goal is absent")
    max_steps: int = _f("SANDSHELL_MAX_STEPS", 0, "turns before the session stops (0: no limit)")
    max_seconds: float = _f("SANDSHELL_MAX_SECONDS", 0.0, "seconds before the session stops (0: no limit)")
    approval: bool = _f("SANDSHELL_APPROVAL", False, "ask before each action runs")
    sessions_dir: str = _f("SANDSHELL_SESSIONS_DIR", "sessions", "where session recordings are written")
    repeat_limit: int = _f(
        "LLAMA_REPEAT_LIMIT", 4, "stop after the model repeats the same action this many times in a row (0: never)"
    )
    cast_version: Literal["2", "3"] = _f(
        "SANDSHELL_CAST_VERSION", "2", "asciicast version of session.cast: 2 (for asciinema 2.x) or 3 (asciinema 3)"
    )
    recording_limit: Annotated[int, "bytes"] = _f("SANDSHELL_RECORDING_LIMIT", 2**26, "bytes a recording may hold")
    cast_idle_limit: float = _f(
        "SANDSHELL_CAST_IDLE_LIMIT", 2.0, "players shorten pauses in session.cast to this many seconds (0: keep them)"
    )

    def problems(self) -> list[str]:
        problems = _not_finite(self)
        if self.max_steps < 0:
            problems.append("SANDSHELL_MAX_STEPS must be 0 (no limit) or more")
        return problems


@dataclass(frozen=True, kw_only=True)
class ServiceSettings(Section):
    """The HTTP service (`sandshell serve`): its token, how many sessions at once, its request limits."""

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

    def problems(self) -> list[str]:
        problems = _not_finite(self)
        if self.max_sessions < 1 or self.max_conversations < 0 or self.api_body_limit < 1024 or self.openai_slots < 0:
            problems.append(
                "SANDSHELL_MAX_SESSIONS must be 1 or more, SANDSHELL_MAX_CONVERSATIONS and LLAMA_OPENAI_SLOTS 0 or "
                "more, SANDSHELL_API_BODY_LIMIT at least 1KiB"
            )
        profiles = {p.strip() for p in self.api_profiles.split(",")} - {""}
        if not profiles or profiles - {"standard", "locked"}:
            problems.append("SANDSHELL_API_PROFILES must name standard, locked or both, comma-separated")
        return problems


@dataclass(frozen=True, kw_only=True)
class UISettings(Section):
    """The terminal UI."""

    max_lines: int = _f("SANDSHELL_UI_MAX_LINES", 5000, "lines the terminal UI keeps")
