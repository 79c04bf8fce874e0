"""The Textual terminal UI: one consumer of a session's events, fed by one buffered sink.

The only package that imports Textual; it may import everything else.
"""
