"""What telling the prompt's evaluation costs: one `eval` of the whole prompt against `prefill`'s
batches of n_batch (a progress report after each), on the default model.

Run: .venv/bin/python bench/prefill_bench.py [--tokens 1500] [--rounds 7]
Each round evaluates the same prompt from an empty cache both ways, in alternating order; prints
the median and the spread of each, in a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time

from sandshell import config
from sandshell.model.llama import LlamaBackend


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    backend = LlamaBackend(config.load(env_file=None, environ={}).model)
    llm, fast = backend.llm, backend.fast
    assert fast is not None, "the grammar sampler is off (LLAMA_GRAMMAR=false): nothing to measure"
    tokens = llm.tokenize(("the quick brown fox jumps over the lazy dog. " * 400).encode())[: args.tokens]
    times: dict[str, list[float]] = {"one eval": [], "prefill (told per batch)": []}

    def whole() -> None:
        llm.n_tokens = 0
        llm.eval(tokens)

    def batches() -> None:
        llm.n_tokens = 0  # no prefix to reuse: both ways evaluate every token
        for _ in fast.prefill(tokens):
            pass

    for i in range(args.rounds):
        arms = [("one eval", whole), ("prefill (told per batch)", batches)]
        for name, run in arms if i % 2 == 0 else arms[::-1]:
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    print(f"| way ({len(tokens)} tokens, n_batch {llm.n_batch}, {args.rounds} rounds) | median s | min s | max s |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} | {max(ts):.3f} |")


if __name__ == "__main__":
    main()
