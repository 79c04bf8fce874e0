"""The ranges settings must keep, beyond their types: checked once, when the settings are loaded."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import TYPE_CHECKING

from sandshell.errors import SettingsError

if TYPE_CHECKING:
    from sandshell.config import Settings


def check_ranges(s: Settings) -> None:
    """Every value out of its range, in one sentence (SettingsError), or nothing."""
    problems = []
    if s.n_ctx < 256:
        problems.append(f"LLAMA_N_CTX must be at least 256, not {s.n_ctx}")
    if s.max_tokens < 16 or (s.max_tokens > s.n_ctx // 2 and s.n_ctx >= 256):  # (a context too small: said above)
        problems.append(
            f"LLAMA_MAX_TOKENS must be between 16 and half of LLAMA_N_CTX ({s.n_ctx // 2}), not {s.max_tokens}"
        )
    told = set()
    if 0 <= s.max_exit_timeout < math.inf and (s.exit_timeout <= 0 or s.exit_timeout > s.max_exit_timeout):
        told.add("LLAMA_EXIT_TIMEOUT")
        most, got = f"{s.max_exit_timeout:g}", f"{s.exit_timeout:g}"
        problems.append(f"LLAMA_EXIT_TIMEOUT must be above 0 and at most LLAMA_MAX_EXIT_TIMEOUT ({most}), not {got}")
    for f in fields(s):  # pydantic reads "nan", "inf" and "-1" as floats: none is a time or a size here
        value = getattr(s, f.name)
        if isinstance(value, float) and not 0 <= value < math.inf and f.metadata.get("env") not in told:
            problems.append(f"{f.metadata.get('env', f.name)} must be a finite number, 0 or more")
    if s.max_sessions < 1 or s.max_conversations < 0 or s.api_body_limit < 1024 or s.openai_slots < 0:
        problems.append(
            "SANDSHELL_MAX_SESSIONS must be 1 or more, SANDSHELL_MAX_CONVERSATIONS and LLAMA_OPENAI_SLOTS 0 or "
            "more, SANDSHELL_API_BODY_LIMIT at least 1KiB"
        )
    profiles = {p.strip() for p in s.api_profiles.split(",")} - {""}
    if not profiles or profiles - {"standard", "locked"}:
        problems.append("SANDSHELL_API_PROFILES must name standard, locked or both, comma-separated")
    if s.observation_tokens < 0:
        problems.append("LLAMA_OBSERVATION_TOKENS must be 0 or more")
    if not 1 <= s.best_of <= 8 or s.comment_chars < -1 or not 1.0 <= s.history_penalty <= 2.0:
        problems.append("LLAMA_BEST_OF must be 1 to 8, LLAMA_COMMENT_CHARS -1 or more, LLAMA_HISTORY_PENALTY 1 to 2")
    if s.max_steps < 0:
        problems.append("SANDSHELL_MAX_STEPS must be 0 (no limit) or more")
    if s.pids_limit < 16:
        problems.append("SANDSHELL_PIDS_LIMIT must be at least 16")
    if problems:
        raise SettingsError("bad setting: " + "; ".join(problems) + " (see .env.example)")
