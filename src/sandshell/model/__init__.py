"""The model: backends that stream text (llama.cpp, OpenAI-compatible, script), the action format
and its grammar, sampling, the prompt's context budget and the model's own config.json.

`types` and `actions` have no native dependency (recordings and replay use them); only `llama`
and `sampling` import llama.cpp and numpy. May import `config`, `errors`, `resources` and
`sandbox.protocol`; never `session` or `tui`.
"""
