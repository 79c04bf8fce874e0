"""Constrained generation that costs almost nothing when the model already follows the grammar.

llama-cpp-python applies a grammar to all ~50k candidate tokens at every step, which halves a
small model's speed. Here each token is sampled as if unconstrained and only checked against
the grammar; only when the grammar rejects it is the step sampled again with the grammar
applied to the whole vocabulary (what llama.cpp's own `common_sampler` does). The output is
still always accepted by the grammar.
"""

from __future__ import annotations

import codecs
import ctypes
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from llama_cpp import llama_cpp as C
from llama_cpp._internals import LlamaTokenDataArray

from sandshell.model.types import PromptProgress

# The sampling parameters this path understands; anything else falls back to llama-cpp-python.
SUPPORTED = {
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
    "mirostat_mode",
    "mirostat_tau",
    "mirostat_eta",
    "seed",
}
PENALTY_WINDOW = 64  # llama-cpp-python's last_n_tokens_size: the tokens the repeat penalty looks back on


def supports(params: dict[str, Any]) -> bool:
    return set(params) <= SUPPORTED


class GrammarSampler:
    """Generates with a grammar using the sample-then-check strategy. One per loaded model."""

    def __init__(self, llm: Any, grammar: str) -> None:
        self.llm = llm
        self.grammar = grammar.encode()
        self.vocab = C.llama_model_get_vocab(llm._model.model)
        self.n_vocab = llm.n_vocab()
        self.candidates = LlamaTokenDataArray(n_vocab=self.n_vocab)
        self.cell = (C.llama_token_data * 1)()
        self.cell_array = C.llama_token_data_array(ctypes.cast(self.cell, C.llama_token_data_p), 1, -1, False)
        self.resampled = 0  # steps where the grammar overruled the first choice (for the benchmark)

    def _chain(self, params: dict[str, Any]) -> Any:
        if "seed" in params:
            self.llm.set_seed(int(params["seed"]))
        return self.llm._init_sampler(
            top_k=params.get("top_k", 40),
            top_p=params.get("top_p", 0.95),
            min_p=params.get("min_p", 0.05),
            typical_p=params.get("typical_p", 1.0),
            temp=params.get("temperature", 0.8),
            repeat_penalty=params.get("repeat_penalty", 1.0),
            frequency_penalty=params.get("frequency_penalty", 0.0),
            presence_penalty=params.get("presence_penalty", 0.0),
            mirostat_mode=params.get("mirostat_mode", 0),
            mirostat_tau=params.get("mirostat_tau", 5.0),
            mirostat_eta=params.get("mirostat_eta", 0.1),
        )

    def _allowed(self, grammar: Any, token: int) -> bool:
        self.cell[0] = C.llama_token_data(token, 0.0, 0.0)
        self.cell_array.size, self.cell_array.selected = 1, -1
        C.llama_sampler_apply(grammar, ctypes.byref(self.cell_array))
        return not math.isinf(self.cell[0].logit)

    def _pick(self, chain: Any, grammar: Any | None) -> int:
        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.n_vocab,))
        self.candidates.copy_logits(logits)
        arr = ctypes.byref(self.candidates.candidates)
        if grammar is not None:
            C.llama_sampler_apply(grammar, arr)
        C.llama_sampler_apply(chain.sampler, arr)
        return int(self.candidates.candidates_data.id[self.candidates.candidates.selected])

    def prefill(self, tokens: list[int]) -> Iterator[PromptProgress]:
        """Evaluate the prompt, reusing the KV cache's common prefix, a batch (n_batch) at a time; after
        each, how far it is. llama.cpp decodes in batches of n_batch anyway: the same work, told."""
        llm = self.llm
        prefix = 0
        for a, b in zip(llm._input_ids[: llm.n_tokens].tolist(), tokens, strict=False):
            if a != b:
                break
            prefix += 1
        llm.n_tokens = min(prefix, len(tokens) - 1)  # the last prompt token is evaluated again for its logits
        todo, batch = tokens[llm.n_tokens :], max(1, llm.n_batch)
        for i in range(0, len(todo), batch):
            llm.eval(todo[i : i + batch])
            yield PromptProgress(min(i + batch, len(todo)), len(todo))

    def generate(
        self, tokens: list[int], params: dict[str, Any], penalized: list[int] | None = None
    ) -> Iterator[tuple[str, bool]]:
        """Yield (text, cut) pieces of the answer to `tokens`, once `prefill` has evaluated them.

        `penalized` tokens enter the repeat penalty's history first, as if just written.
        """
        llm = self.llm
        chain = self._chain(params)
        for token in penalized or ():
            C.llama_sampler_accept(chain.sampler, token)
        grammar = C.llama_sampler_init_grammar(self.vocab, self.grammar, b"root")
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        made: list[int] = []
        try:
            for _ in range(int(params.get("max_tokens", 256))):
                # First choice entirely in C (it also enters the chain's penalty history).
                token = C.llama_sampler_sample(chain.sampler, llm._ctx.ctx, -1)
                if not self._allowed(grammar, token):
                    self.resampled += 1
                    token = self._pick(chain, grammar)
                    C.llama_sampler_accept(chain.sampler, token)
                if C.llama_vocab_is_eog(self.vocab, token):
                    return
                C.llama_sampler_accept(grammar, token)
                piece = decoder.decode(llm.detokenize([token], prev_tokens=made[-8:] or None, special=False))
                made.append(token)
                llm.eval([token])
                if piece:
                    yield piece, False
            tail = decoder.decode(b"", final=True)
            yield tail, True
        finally:
            C.llama_sampler_free(grammar)
            chain.close()
