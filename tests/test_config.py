"""Settings: one object from .env and the environment, every field documented, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandshell import config
from sandshell.envdoc import documented_fields, render
from sandshell.errors import SettingsError

REPO = Path(__file__).resolve().parents[1]


def test_defaults_without_any_configuration() -> None:
    s = config.load(env_file=None, environ={})
    assert s.exit_timeout == 10.0 and s.profile == "standard" and s.backend == "llama"
    assert s.load_params == {} and s.sampling == {}


def test_env_file_then_environment_wins(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("LLAMA_EXIT_TIMEOUT=5\nSANDSHELL_PROFILE=locked\n")
    s = config.load(env_file=env, environ={"LLAMA_EXIT_TIMEOUT": "7.5"})
    assert s.exit_timeout == 7.5 and s.profile == "locked"


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
    assert s.load_params == {"n_threads": 2, "seed": 42, "use_mmap": False}
    assert s.sampling == {"temperature": 0.2, "top_k": 7, "mirostat_mode": 2}


def test_a_near_miss_names_only_a_setting_of_the_same_kind_that_is_close() -> None:
    from sandshell.llama_params import near_miss

    known = ["SANDSHELL_HOME", "SANDSHELL_TRANSPORT", "SANDSHELL_API_TOKEN", "SANDSHELL_PROFILE", "LLAMA_MODEL_PATH"]
    for far in ("SANDSHELL_HOST", "SANDSHELL_API_PORT", "SANDSHELL_PORT", "SANDSHELL_API_HOST", "LLAMA_MODEL_NAME"):
        assert near_miss(far, known) == "", far  # (the shared prefix made each look close)
    assert near_miss("SANDSHELL_PROFLE", known) == " (did you mean SANDSHELL_PROFILE?)"
    assert near_miss("LLAMA_MODEL_PAT", known) == " (did you mean LLAMA_MODEL_PATH?)"
    assert near_miss("SANDSHELL_MODEL_PAT", known) == ""  # (not across prefixes)
    assert config.load(env_file=None, environ={"LLAMA_MODEL": ""}).sampling == {}  # empty: as if not set


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
    assert (s.exit_timeout, s.max_tokens, s.workspace) == (7.0, 200, "/srv/ws")
    env.write_bytes(b"LLAMA_MAX_TOKENS=200\nSANDSHELL_API_TOKEN=caf\xe9\n")  # latin-1 (a traceback, then U+FFFD)
    with pytest.raises(SettingsError, match=r"line 2 of .* is not UTF-8 text \(byte 0xe9\): save the file as UTF-8"):
        config.load(env_file=env, environ={})
