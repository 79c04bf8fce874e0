"""The session: the loop (`loop`), how a user steers it (`control`), what it emits (`events`), and
what consumes its events without a UI: the recorder, replay and the plain transcript.

Never imports Textual; replay and the events never import llama.cpp (a test checks both).
"""
