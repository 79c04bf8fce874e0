"""The Textual terminal UI (the only part of sandshell that imports Textual)."""
