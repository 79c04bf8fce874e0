"""The Bot API: a Python front door on the session core.

`Bot` runs a task to its end (`run` returns `{status, result, error, log}`); `Environment` is a
sandbox with `execute` and `kill`; `LLM` asks the model for actions with a history of its own;
`ToolDefinition` installs a tool into the environment's image (cached by the tools' hash).
Here: `kinds` (BotType, Permission, default prompts), `tools`, `environment`, `llm`, `bot`.
May import everything but the TUI, like `runner`.
"""

from __future__ import annotations

import logging

from sandshell.bot.bot import Bot
from sandshell.bot.environment import Environment
from sandshell.bot.kinds import BotType, Permission
from sandshell.bot.llm import LLM
from sandshell.bot.tools import ToolDefinition, ToolError

logging.getLogger(__name__).addHandler(logging.NullHandler())  # the library logs; the program decides where

__all__ = ["LLM", "Bot", "BotType", "Environment", "Permission", "ToolDefinition", "ToolError"]
