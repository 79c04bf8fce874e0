"""Settings: one object built once from the environment and `.env`, made of sections.

Names are as in `.env.example`: `LLAMA_*` for the model (any `llama_cpp.Llama` constructor
parameter or chat-completion parameter may be given as `LLAMA_<NAME>`), `SANDSHELL_*` for the
sandbox, the session, the service and the UI. Each section (in `sections`) documents its fields
and checks its own ranges; `Settings.check` runs them all and says every problem in one sentence.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from pydantic import ByteSize, TypeAdapter, ValidationError

from sandshell import envfile
from sandshell.errors import SettingsError
from sandshell.llama_params import llama_params, near_miss
from sandshell.sections import (
    DEFAULT_GOAL,
    Bytes,
    Home,
    ModelSettings,
    SandboxSettings,
    Section,
    ServiceSettings,
    SessionSettings,
    UISettings,
)

__all__ = [
    "DEFAULT_GOAL",
    "Home",
    "ModelSettings",
    "SandboxSettings",
    "Section",
    "ServiceSettings",
    "SessionSettings",
    "Settings",
    "UISettings",
    "default_env_file",
    "load",
]


@dataclass(frozen=True)
class Settings:
    """Everything sandshell can be told, in sections, each with its defaults."""

    home: Home = field(default_factory=Home)
    model: ModelSettings = field(default_factory=ModelSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    session: SessionSettings = field(default_factory=SessionSettings)
    service: ServiceSettings = field(default_factory=ServiceSettings)
    ui: UISettings = field(default_factory=UISettings)

    def __post_init__(self) -> None:
        # Every section resolves its paths against the one home: a new home reaches them all.
        for name, section in self.sections():
            if section.home != self.home:
                object.__setattr__(self, name, dataclasses.replace(section, home=self.home))

    def sections(self) -> Iterator[tuple[str, Section]]:
        """(name, section) for every section but the home, in order."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Section):
                yield f.name, value

    def path(self, value: str) -> Path:
        """Resolve a settings path against SANDSHELL_HOME (or the current directory), never the package."""
        return self.home.path(value)

    def replace(
        self,
        *,
        home: Home | None = None,
        model: ModelSettings | None = None,
        sandbox: SandboxSettings | None = None,
        session: SessionSettings | None = None,
        service: ServiceSettings | None = None,
        ui: UISettings | None = None,
    ) -> Settings:
        """These settings with whole sections changed: `s.replace(session=s.session.replace(max_steps=3))`."""
        changes: dict[str, Any] = {
            "home": home,
            "model": model,
            "sandbox": sandbox,
            "session": session,
            "service": service,
            "ui": ui,
        }
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def check(self) -> None:
        """Every value out of its range, in one sentence (SettingsError), or nothing."""
        problems = [p for _, section in self.sections() for p in section.problems()]
        if problems:
            raise SettingsError("bad setting: " + "; ".join(problems) + " (see .env.example)")


SECTIONS: dict[str, type[Home | Section]] = {
    "home": Home,
    "model": ModelSettings,
    "sandbox": SandboxSettings,
    "session": SessionSettings,
    "service": ServiceSettings,
    "ui": UISettings,
}


def documented() -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """(section name, field) for every setting that has an `.env` name, section by section."""
    for name, cls in SECTIONS.items():
        for f in fields(cls):
            if f.metadata.get("env"):
                yield name, f


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
    known = {g.metadata["env"]: (section, g) for section, g in documented()}
    kwargs: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for env, (section, f) in known.items():
        if env in values and values[env] != "":
            hint = get_type_hints(SECTIONS[section], include_extras=True)[f.name]
            try:
                kwargs[section][f.name] = _coerce(hint, values[env])
            except ValueError as e:
                errors.append(f"{env}={values[env]!r} {e}")
    extra = {k: v for k, v in values.items() if k.startswith("LLAMA_") and k not in known}
    unknown = sorted(k for k in values if k.startswith("SANDSHELL_") and k not in known)  # a typo runs defaults
    errors += [f"{k} is not a setting sandshell knows{near_miss(k, known)}" for k in unknown]
    load_params, sampling, extra_errors = llama_params(extra, known)
    errors += extra_errors
    if errors:
        raise SettingsError("bad setting: " + "; ".join(errors) + " (see .env.example)")
    kwargs["model"].update(load_params=load_params, sampling=sampling)
    settings = Settings(**{name: cls(**kwargs[name]) for name, cls in SECTIONS.items()})  # type: ignore[arg-type]
    settings.check()
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
