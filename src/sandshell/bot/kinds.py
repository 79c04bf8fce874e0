"""What a bot is: its type (with a default system prompt) and its permission on the mounted folder."""

from __future__ import annotations

import logging
from enum import Enum

log = logging.getLogger(__name__)


class Permission(Enum):
    """What the bot may do to the mounted folder: the workspace modes `ro` and `rw`."""

    READ_ONLY = "ro"
    READ_WRITE = "rw"

    @property
    def mode(self) -> str:
        return self.value


class BotType(Enum):
    """A bot's job; each has a default system prompt. BROWSING also gets network and a text browser."""

    READING = "reading"
    WRITING = "writing"
    BROWSING = "browsing"
    CUSTOM = "custom"

    @property
    def default_prompt(self) -> str:
        return DEFAULT_PROMPTS[self]


DEFAULT_PROMPTS = {
    BotType.READING: (
        "You are a reading bot. The files to read are in /app. Read them (cat, grep, head, wc, find) "
        "to answer the task, change nothing, and end with done and the answer in one or two sentences."
    ),
    BotType.WRITING: (
        "You are a writing bot. Create or change the files in /app that the task asks for, check what "
        "you wrote (cat it back), and end with done and a sentence saying what you wrote where."
    ),
    BotType.BROWSING: (
        "You are a browsing bot with network access and the text browser lynx: "
        "`lynx -dump -nolist URL | head -100` prints a page as plain text. Find what the task asks "
        "for, and end with done and the answer in one or two sentences."
    ),
    BotType.CUSTOM: "You are a bot working in a Linux shell. Do the task, then end with done and the result.",
}


__all__ = ["DEFAULT_PROMPTS", "BotType", "Permission"]
