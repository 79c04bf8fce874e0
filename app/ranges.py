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
        problems.append("LLAMA_N_CTX must be at least 256")
    if s.max_tokens < 16 or s.max_tokens > s.n_ctx // 2:
        problems.append("LLAMA_MAX_TOKENS must be between 16 and half of LLAMA_N_CTX")
    if s.exit_timeout <= 0 or s.exit_timeout > s.max_exit_timeout:
        problems.append("LLAMA_EXIT_TIMEOUT must be above 0 and at most LLAMA_MAX_EXIT_TIMEOUT")
    for f in fields(s):  # pydantic reads "nan", "inf" and "-1" as floats: none is a time or a size here
        value = getattr(s, f.name)
        if isinstance(value, float) and not 0 <= value < math.inf:
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
    if s.pids_limit < 16:
        problems.append("SANDSHELL_PIDS_LIMIT must be at least 16")
    if problems:
        raise SettingsError("bad setting: " + "; ".join(problems) + " (see .env.example)")
