"""Settings: one object from .env and the environment, every field documented, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandshell import config
from sandshell.envdoc import documented_fields, render
from sandshell.errors import SettingsError

REPO = Path(__file__).resolve().parents[1]


def test_defaults_without_any_configuration() -> None:
    s = config.load(env_file=None, environ={})
    assert s.sandbox.exit_timeout == 10.0 and s.sandbox.profile == "standard" and s.model.backend == "llama"
    assert s.model.load_params == {} and s.model.sampling == {}


def test_env_file_then_environment_wins(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("LLAMA_EXIT_TIMEOUT=5\nSANDSHELL_PROFILE=locked\n")
    s = config.load(env_file=env, environ={"LLAMA_EXIT_TIMEOUT": "7.5"})
    assert s.sandbox.exit_timeout == 7.5 and s.sandbox.profile == "locked"


def test_free_form_llama_parameters_are_typed() -> None:
    s = config.load(
        env_file=None,
        environ={
            "LLAMA_N_THREADS": "2",
            "LLAMA_SEED": "42",
            "LLAMA_USE_MMAP": "false",
            "LLAMA_TEMPERATURE": "0.2",
            "LLAMA_TOP_K": "7",
            "LLAMA_MIROSTAT_MODE": "2",
        },
    )
    assert s.model.load_params == {"n_threads": 2, "seed": 42, "use_mmap": False}
    assert s.model.sampling == {"temperature": 0.2, "top_k": 7, "mirostat_mode": 2}


def test_a_near_miss_names_only_a_setting_of_the_same_kind_that_is_close() -> None:
    from sandshell.llama_params import near_miss

    known = ["SANDSHELL_HOME", "SANDSHELL_TRANSPORT", "SANDSHELL_API_TOKEN", "SANDSHELL_PROFILE", "LLAMA_MODEL_PATH"]
    for far in ("SANDSHELL_HOST", "SANDSHELL_API_PORT", "SANDSHELL_PORT", "SANDSHELL_API_HOST", "LLAMA_MODEL_NAME"):
        assert near_miss(far, known) == "", far  # (the shared prefix made each look close)
    assert near_miss("SANDSHELL_PROFLE", known) == " (did you mean SANDSHELL_PROFILE?)"
    assert near_miss("LLAMA_MODEL_PAT", known) == " (did you mean LLAMA_MODEL_PATH?)"
    assert near_miss("SANDSHELL_MODEL_PAT", known) == ""  # (not across prefixes)
    assert config.load(env_file=None, environ={"LLAMA_MODEL": ""}).model.sampling == {}  # empty: as if not set


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({"LLAMA_EXIT_TIMEOUT": "soon"}, "LLAMA_EXIT_TIMEOUT='soon' is not a valid float"),
        ({"SANDSHELL_PROFILE": "open"}, "must be one of standard, locked"),
        ({"LLAMA_N_THREADS": "many"}, "LLAMA_N_THREADS='many'"),
        ({"LLAMA_FLUX_CAPACITOR": "1"}, "LLAMA_FLUX_CAPACITOR is not a setting"),
        ({"LLAMA_MAX_TOKENS": "5000"}, "LLAMA_MAX_TOKENS must be between 16 and half"),
        ({"LLAMA_EXIT_TIMEOUT": "500"}, "at most LLAMA_MAX_EXIT_TIMEOUT (120), not 500"),
        (
            {"LLAMA_EXIT_TIMEOUT": "-3"},
            "LLAMA_EXIT_TIMEOUT must be above 0 and at most LLAMA_MAX_EXIT_TIMEOUT (120), not -3 (",
        ),
        ({"LLAMA_N_CTX": "0"}, "bad setting: LLAMA_N_CTX must be at least 256, not 0 ("),
        ({"LLAMA_N_CTX": "100", "LLAMA_MAX_TOKENS": "5"}, "not 100; LLAMA_MAX_TOKENS must be between 16"),
        ({"LLAMA_GRAMMAR": "ture"}, "LLAMA_GRAMMAR='ture' is not true or false"),
        ({"SANDSHELL_MAX_STEPS": "-1"}, "SANDSHELL_MAX_STEPS must be 0 (no limit) or more"),
        ({"SANDSHELL_PROFLE": "locked"}, "sandshell knows (did you mean SANDSHELL_PROFILE?)"),
        ({"SANDSHELL_BANANA": "1"}, "SANDSHELL_BANANA is not a setting sandshell knows (see"),
        ({"LLAMA_EXIT_TIMOUT": "5"}, "llama.cpp knows (did you mean LLAMA_EXIT_TIMEOUT?)"),
        ({"LLAMA_MODEL": "/nope.gguf"}, "the model file is LLAMA_MODEL_PATH, and the model an OpenAI-compatible"),
        ({"LLAMA_TEMPERATUR": "0.2"}, "llama.cpp knows (did you mean LLAMA_TEMPERATURE?)"),
        ({"LLAMA_STOP": "</s>"}, "LLAMA_STOP is chosen by sandshell itself"),
        ({"LLAMA_MAX_EXIT_TIMEOUT": "nan"}, "LLAMA_MAX_EXIT_TIMEOUT must be a finite number"),
        ({"LLAMA_MAX_EXIT_TIMEOUT": "inf", "LLAMA_EXIT_TIMEOUT": "inf"}, "must be a finite number"),
        ({"SANDSHELL_KILL_GRACE": "-1"}, "SANDSHELL_KILL_GRACE must be a finite number, 0 or more"),
        ({"SANDSHELL_MAX_SECONDS": "nan"}, "SANDSHELL_MAX_SECONDS must be a finite number"),
    ],
)
def test_bad_settings_are_one_clear_sentence(environ: dict[str, str], words: str) -> None:
    with pytest.raises(SettingsError) as info:
        config.load(env_file=None, environ=environ)
    message = str(info.value)
    assert words in message and message.endswith("(see .env.example)") and "\n" not in message


def test_env_example_documents_every_setting() -> None:
    example = (REPO / ".env.example").read_text()
    assert example == render(), "regenerate with: .venv/bin/python -m sandshell.envdoc > .env.example"
    for env, doc, _ in documented_fields():
        assert f"\n{env}=" in example and doc


def test_core_never_imports_textual() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import sandshell.config, sandshell.model.turn, sandshell.model.llama, sandshell.sandbox.sandbox\n"
        "import sandshell.session.loop, sandshell.session.recorder, sandshell.runner, sandshell.session.replay\n"
        "import sandshell_agent.server\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'textual'], 'textual imported by the core'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_a_dotenv_line_that_is_not_name_value_is_a_bad_setting_not_a_silent_default(tmp_path: Path) -> None:
    """Each of these lines is a mistake a user makes; skipped without a word, the setting it meant
    would keep its default."""
    bad = [
        "LLAMA_EXIT_TIMEOUT 5",
        "=5",
        'LLAMA_DEFAULT_GOAL="unterminated',
        "garbage-line!!",
        "llama_exit_timeout=5",
        "LLAMA_EXIT_TIMEOUT",
    ]
    for line in bad:
        env = tmp_path / ".env"
        env.write_text(f"# a comment\n\nLLAMA_MAX_TOKENS=200\n{line}\n")
        with pytest.raises(SettingsError) as e:
            config.load(env_file=env, environ={})
        assert "line 4 of" in str(e.value) and "see .env.example" in str(e.value), line
    env.write_text(
        "# fine\nexport LLAMA_EXIT_TIMEOUT=7\nLLAMA_MAX_TOKENS = 200\nHTTP_PROXY\nhttp_proxy=x\nmy-key=1\n\n"
        "SANDSHELL_WORKSPACE=${NOT_SET_ANYWHERE:-/srv}/ws\n"
    )  # (others' lines; ${} expanded)
    s = config.load(env_file=env, environ={})
    assert (s.sandbox.exit_timeout, s.model.max_tokens, s.sandbox.workspace) == (7.0, 200, "/srv/ws")
    env.write_bytes(b"LLAMA_MAX_TOKENS=200\nSANDSHELL_API_TOKEN=caf\xe9\n")  # latin-1 (a traceback, then U+FFFD)
    with pytest.raises(SettingsError, match=r"line 2 of .* is not UTF-8 text \(byte 0xe9\): save the file as UTF-8"):
        config.load(env_file=env, environ={})


def test_every_setting_lives_in_one_section_under_its_own_env_name() -> None:
    names = [f.metadata["env"] for _, f in config.documented()]
    assert len(names) == len(set(names)) and "SANDSHELL_HOME" in names
    s = config.load(
        env_file=None,
        environ={
            "LLAMA_N_CTX": "2048",
            "SANDSHELL_MEMORY": "1g",
            "SANDSHELL_MAX_STEPS": "7",
            "SANDSHELL_MAX_SESSIONS": "2",
            "SANDSHELL_UI_MAX_LINES": "10",
            "LLAMA_EXIT_TIMEOUT": "4",
            "LLAMA_REPEAT_LIMIT": "2",
            "LLAMA_OPENAI_SLOTS": "3",
        },
    )
    assert (s.model.n_ctx, s.sandbox.memory, s.session.max_steps, s.service.max_sessions, s.ui.max_lines) == (
        2048,
        "1g",
        7,
        2,
        10,
    )
    assert (s.sandbox.exit_timeout, s.session.repeat_limit, s.service.openai_slots) == (4.0, 2, 3)


def test_a_section_is_replaced_whole_and_every_section_keeps_the_one_home(tmp_path: Path) -> None:
    s = config.load(env_file=None, environ={"SANDSHELL_HOME": str(tmp_path)})
    t = s.replace(session=s.session.replace(max_steps=3))
    assert (t.session.max_steps, s.session.max_steps, t.model, t.sandbox) == (3, 0, s.model, s.sandbox)
    assert t.sandbox.path(t.sandbox.workspace) == tmp_path / "workspace"
    moved = t.replace(home=config.Home(str(tmp_path / "elsewhere")))
    assert moved.session.path("sessions") == moved.model.path("sessions") == tmp_path / "elsewhere" / "sessions"
    assert moved.session.max_steps == 3  # (a new home keeps what was changed)
    with pytest.raises(TypeError):
        s.sandbox.replace(max_steps=3)  # a field of another section is not silently dropped


def test_each_section_checks_its_own_ranges() -> None:
    assert config.SandboxSettings(pids_limit=3).problems() == ["SANDSHELL_PIDS_LIMIT must be at least 16"]
    assert config.SessionSettings(max_seconds=float("nan")).problems() == [
        "SANDSHELL_MAX_SECONDS must be a finite number, 0 or more"
    ]
    assert "SANDSHELL_API_PROFILES" in config.ServiceSettings(api_profiles="open").problems()[0]
    assert config.ModelSettings(n_ctx=100).problems()[0] == "LLAMA_N_CTX must be at least 256, not 100"
    bad = config.Settings(sandbox=config.SandboxSettings(pids_limit=3), session=config.SessionSettings(max_steps=-1))
    with pytest.raises(SettingsError, match=r"^bad setting: SANDSHELL_PIDS_LIMIT .*; SANDSHELL_MAX_STEPS .*example\)$"):
        bad.check()


def test_a_recording_keeps_the_settings_by_section_without_secrets() -> None:
    from sandshell.session.types import public_settings

    s = config.load(env_file=None, environ={"LLAMA_OPENAI_API_KEY": "sk-secret", "SANDSHELL_API_TOKEN": "tok-secret"})
    kept = public_settings(s)
    assert set(kept) == {"home", "model", "sandbox", "session", "service", "ui"}
    assert kept["sandbox"]["exit_timeout"] == 10.0 and kept["model"]["backend"] == "llama"
    assert "secret" not in json.dumps(kept) and "home" not in kept["model"]


def test_env_example_is_grouped_by_section() -> None:
    example = (REPO / ".env.example").read_text()
    heads = [example.index(f"# -- {(cls.__doc__ or '').strip()}") for cls in config.SECTIONS.values()]
    assert heads == sorted(heads)
    assert heads[1] < example.index("\nLLAMA_N_CTX=") < heads[2] < example.index("\nLLAMA_EXIT_TIMEOUT=") < heads[3]
