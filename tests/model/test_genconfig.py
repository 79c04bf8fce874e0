"""The model's /app/config.json: validated, reported, last good kept, changes as before/after."""

from __future__ import annotations

from sandshell.model.genconfig import ModelConfig


def test_valid_config_applies_and_records_the_change() -> None:
    cfg = ModelConfig(max_tokens=384)
    out = cfg.update('{"temperature": 0.3, "top_k": 20}')
    assert out.params == {"temperature": 0.3, "top_k": 20} and not out.problems
    assert out.change == ({}, {"temperature": 0.3, "top_k": 20})
    again = cfg.update('{"temperature": 1, "top_k": 20}')  # an int is a fine temperature
    assert again.change == ({"temperature": 0.3, "top_k": 20}, {"temperature": 1.0, "top_k": 20})


def test_bad_configs_are_reported_and_last_good_stays() -> None:
    cfg = ModelConfig(max_tokens=384)
    cfg.update('{"temperature": 0.5}')
    cases = {
        "{not json": "invalid JSON",
        "[1, 2]": "must be a JSON object",
        '{"temprature": 0.1}': "unknown setting 'temprature'",
        '{"temperature": "hot"}': "temperature",
        '{"top_p": 1.5}': "top_p",
        '{"n_ctx": 100000}': "cannot be changed from inside",
        '{"grammar": ""}': "cannot be changed from inside",
        '{"max_tokens": 100000}': "max_tokens may be at most 384",
    }
    for text, words in cases.items():
        out = cfg.update(text)
        assert out.params == {"temperature": 0.5}, text
        assert any(words in p for p in out.problems), (text, out.problems)
        assert out.change is None


def test_unreadable_config_keeps_last_good() -> None:
    cfg = ModelConfig(max_tokens=384)
    cfg.update('{"seed": 3}')
    out = cfg.update(None, "is a directory")
    assert out.params == {"seed": 3} and "is a directory" in out.problems[0]
    assert cfg.update(None, "missing").problems == []
