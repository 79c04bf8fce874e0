"""What the tuned adapter costs a turn: time to first token and tokens a second, adapter on against off.

Both backends load once; each run sends the same first turn of a session (the short fixed prompt,
a goal, the intro and its listing) with an empty KV cache, alternating on and off so that load
from other work falls on both alike. Generation is greedy and free (no grammar), up to a number of
tokens; the two sides may end at different lengths, so decoding is compared as tokens a second.

Run: .venv/bin/python bench/adapter_bench.py [--runs 15] [--tokens 64]
Prints a Markdown table (paste into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from sandshell import config
from sandshell.model import tuned
from sandshell.model.llama import LlamaBackend
from sandshell.model.types import Stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for the test's first turn
from tests.model.test_tuned import messages

MESSAGES = messages(tuned.system_prompt())  # the tuned model's own test sends the same first turn


def backend(adapter: str) -> LlamaBackend:
    environ = {"LLAMA_ADAPTER": adapter, "LLAMA_GRAMMAR": "false", "LLAMA_PROMPT": "short"}
    return LlamaBackend(config.load(env_file=None, environ=environ).model)


def one(b: LlamaBackend, tokens: int) -> Stats:
    b.llm.reset()  # an empty KV cache: every run evaluates the whole prompt
    params = {"temperature": 0.0, "max_tokens": tokens, "seed": 1}
    stats = Stats()
    for part in b.stream(MESSAGES, params):
        if isinstance(part, Stats):
            stats = part
    return stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    t0 = time.perf_counter()
    sides = {"off": backend("off")}
    load_off = time.perf_counter() - t0
    t0 = time.perf_counter()
    sides["on"] = backend("on")
    load_on = time.perf_counter() - t0
    seen: dict[str, list[Stats]] = {"on": [], "off": []}
    for side in ("on", "off"):
        one(sides[side], 8)  # warm up
    for i in range(args.runs):
        for side in ("on", "off") if i % 2 == 0 else ("off", "on"):
            seen[side].append(one(sides[side], args.tokens))
    print(f"{args.runs} runs each, {seen['on'][0].prompt_tokens} prompt tokens, up to {args.tokens} generated\n")
    print("| adapter | load s | median ttft s | p90 ttft s | median tokens/s | generated |")
    print("|---|---|---|---|---|---|")
    for side, load in (("on", load_on), ("off", load_off)):
        ttft = sorted(s.ttft for s in seen[side])
        tps = statistics.median(s.tokens_per_second for s in seen[side])
        gen = statistics.median(s.completion_tokens for s in seen[side])
        p90 = ttft[min(len(ttft) - 1, int(0.9 * len(ttft)))]
        print(f"| {side} | {load:.2f} | {statistics.median(ttft):.3f} | {p90:.3f} | {tps:.1f} | {gen:.0f} |")


if __name__ == "__main__":
    main()
