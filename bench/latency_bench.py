"""Turn latency on the default model: prompt-cache reuse per turn and time to first token after turn 2.

Run: .venv/bin/python bench/latency_bench.py [--turns 20] [--caps 0 300]
     .venv/bin/python bench/latency_bench.py --results sessions/eval-.../results.json
The first form plays the same scripted session (model_bench's commands, the model's real
prompt and a real sandbox) once per observation cap (LLAMA_OBSERVATION_TOKENS; 0 is the
default rule), interleaved turn by turn so the machine's load falls on all alike. The second
reads the per-turn numbers an eval run recorded. Prints Markdown (paste into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from model_bench import COMMANDS, SYSTEM

from sandshell import config
from sandshell.model import actions
from sandshell.model.actions import Action
from sandshell.model.context import Context, Step, Turn, brief_command, observe_command
from sandshell.model.llama import LlamaBackend
from sandshell.model.types import Stats
from sandshell.sandbox.sandbox import Sandbox

OPENING = "Begin. The shell is ready: 0 root@sandbox:/app #"


def line(label: str, cache: list[float], ttft: list[float], evaluated: list[int]) -> str:
    late_c, late_t, late_e = cache[2:], ttft[2:], evaluated[2:]
    share = sum(c >= 0.8 for c in late_c)
    return (
        f"| {label} | {share} of {len(late_c)} ({share / max(1, len(late_c)):.0%}) "
        f"| {statistics.median(late_t):.2f} s | {max(late_t):.2f} s | {statistics.median(late_e):.0f} |"
    )


def played(turns: int, caps: list[int]) -> list[str]:
    settings = config.load(env_file=None, environ={})
    backends = {cap: LlamaBackend(settings.model) for cap in caps}  # each with its own KV cache
    contexts = {
        cap: Context(b.n_ctx, settings.model.max_tokens, settings.model.context_margin, b.count, observation_tokens=cap)
        for cap, b in backends.items()
    }
    rows: dict[int, tuple[list[float], list[float], list[int]]] = {cap: ([], [], []) for cap in caps}
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        for i in range(turns):
            action = Action("bash", COMMANDS[i % len(COMMANDS)])
            result = sb.execute(action.arg)
            for cap, ctx in contexts.items():  # interleaved turn by turn: the load falls on each alike
                messages, _ = ctx.messages(SYSTEM, OPENING)
                stats = next(
                    s for s in backends[cap].stream(messages, {"max_tokens": 8, "seed": i}) if isinstance(s, Stats)
                )
                cache, ttft, evaluated = rows[cap]
                cache.append(stats.cached_tokens / stats.prompt_tokens)
                ttft.append(stats.ttft)
                evaluated.append(stats.prompt_tokens - stats.cached_tokens)
                obs = observe_command(result, ctx.observation_chars)
                ctx.turns.append(
                    Turn(actions.dumps([action]), [Step(action, obs, brief_command(result), not result.ok)])
                )
    return [line(f"observation cap {cap or 'default (a fifth of the context)'}", *rows[cap]) for cap in caps]


def from_results(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    out = []
    for variant in dict.fromkeys(r["variant"] for r in doc["results"]):
        mine = [r for r in doc["results"] if r["variant"] == variant]
        cache = [c for r in mine for c in r["cache"][2:]]
        ttft = [t for r in mine for t in r["ttft"][2:]]
        if cache:
            share = sum(c >= 0.8 for c in cache)
            median = statistics.median(ttft)
            shares = f"{share} of {len(cache)} ({share / len(cache):.0%})"
            out.append(f"| {variant} | {shares} | {median:.2f} s | {max(ttft):.2f} s | - |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--caps", type=int, nargs="+", default=[0, 300])
    ap.add_argument("--results", type=Path)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}\n")
    print(
        "| run | turns after turn 2 with ≥80% of the prompt cached | median time to first token after turn 2 "
        "| worst | median tokens evaluated |"
    )
    print("|---|---|---|---|---|")
    for row in from_results(args.results) if args.results else played(args.turns, args.caps):
        print(row)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
