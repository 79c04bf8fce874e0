"""Checking text against the real llama.cpp grammar engine, token by token."""

from __future__ import annotations

import ctypes
import math
from typing import Any

from llama_cpp import llama_cpp as C


def grammar_accepts(llm: Any, grammar: str, text: str) -> bool:
    """True if llama.cpp's grammar sampler lets the model write exactly `text` and then stop."""
    vocab = C.llama_model_get_vocab(llm._model.model)
    sampler = C.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    try:
        tokens = llm.tokenize(text.encode(), add_bos=False, special=False)
        for tok in [*tokens, llm.token_eos()]:
            cell = (C.llama_token_data * 1)(C.llama_token_data(tok, 0.0, 0.0))
            arr = C.llama_token_data_array(ctypes.cast(cell, ctypes.POINTER(C.llama_token_data)), 1, -1, False)
            C.llama_sampler_apply(sampler, ctypes.byref(arr))
            if math.isinf(cell[0].logit):
                return False
            if tok != llm.token_eos():
                C.llama_sampler_accept(sampler, tok)
        return True
    finally:
        C.llama_sampler_free(sampler)
