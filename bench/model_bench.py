"""Model benchmarks on the default GGUF: backend overhead, the constraint's cost, KV-cache reuse per turn.

Run: .venv/bin/python bench/model_bench.py [--tokens 128] [--turns 20]
Prints Markdown tables (paste into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sandshell import config
from sandshell.model import actions
from sandshell.model.actions import Action
from sandshell.model.context import Context, Step, Turn, brief_command, observe_command
from sandshell.model.llama import LlamaBackend
from sandshell.model.types import Stats
from sandshell.resources import fixed_system_prompt
from sandshell.sandbox.sandbox import Sandbox

SYSTEM = fixed_system_prompt()
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Begin. Goal: describe this machine."}]
COMMANDS = [
    "uname -a",
    "cat /etc/os-release",
    "ls -la /",
    "df -h",
    "ps aux",
    "ls /usr/bin | head -80",
    "env | sort",
    "python3 --version",
    "cat /proc/cpuinfo | head -30",
    "free -m",
    "ls -la /app",
    "id",
    "cat /etc/passwd",
    "mount | head -20",
    "ls /etc | head -60",
    "git --version",
    "ip addr 2>&1 | head",
    "seq 1 400",
    "find /usr/lib/python3* -maxdepth 1 | head -50",
    "dpkg -l | head -60",
]


def gen_rate(backend: LlamaBackend, params: dict[str, Any], runs: int) -> float:
    rates = []
    for seed in range(runs):
        backend.llm.reset()
        stats = next(s for s in backend.stream(MESSAGES, {**params, "seed": seed}) if isinstance(s, Stats))
        rates.append(stats.tokens_per_second)
    return statistics.median(rates)


def plain_rate(backend: LlamaBackend, params: dict[str, Any], runs: int) -> float:
    """The same prompt through llama-cpp-python directly."""
    rates = []
    for seed in range(runs):
        backend.llm.reset()
        time.perf_counter()
        first = None
        n = 0
        chunks = backend.llm.create_chat_completion(messages=MESSAGES, stream=True, seed=seed, **params)  # type: ignore[arg-type]
        for chunk in chunks:
            if chunk["choices"][0]["delta"].get("content"):  # type: ignore[index, union-attr]
                first = first or time.perf_counter()
                n += 1
        if first is not None:
            rates.append(n / (time.perf_counter() - first))
    return statistics.median(rates)


def conversation(turns: int) -> list[tuple[int, int, int, float]]:
    """A scripted session on the real model and sandbox: per turn (prompt, evaluated, cached, ttft)."""
    settings = config.load(env_file=None, environ={})
    backend = LlamaBackend(settings.model)
    ctx = Context(backend.n_ctx, settings.model.max_tokens, settings.model.context_margin, backend.count)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Sandbox(workspace=Path(tmp), settings=settings.sandbox) as sb:
        for i in range(turns):
            messages, _ = ctx.messages(SYSTEM, "Begin. The shell is ready: 0 root@sandbox:/app #")
            stats = next(s for s in backend.stream(messages, {"max_tokens": 24, "seed": i}) if isinstance(s, Stats))
            rows.append(
                (stats.prompt_tokens, stats.prompt_tokens - stats.cached_tokens, stats.cached_tokens, stats.ttft)
            )
            action = Action("bash", COMMANDS[i % len(COMMANDS)])
            result = sb.execute(action.arg)
            step = Step(action, observe_command(result, ctx.observation_chars), brief_command(result), not result.ok)
            ctx.turns.append(Turn(answer=actions.dumps([action]), steps=[step]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--turns", type=int, default=20)
    args = ap.parse_args()
    base = config.load(env_file=None, environ={})
    params = {"max_tokens": args.tokens, "temperature": 0.8}
    free = LlamaBackend(base.model.replace(grammar=False))
    ours = gen_rate(free, params, args.runs)
    plain = plain_rate(free, params, args.runs)
    grammar_backend = LlamaBackend(base.model)
    constrained = gen_rate(grammar_backend, params, args.runs)
    assert grammar_backend.fast is not None
    print("| generation (default model, 2 threads) | tokens/s (median of runs) | ratio |")
    print("|---|---|---|")
    print(f"| plain llama-cpp-python, unconstrained | {plain:.1f} | 1.00 |")
    print(f"| sandshell backend, unconstrained | {ours:.1f} | {ours / plain:.2f} of plain |")
    print(
        f"| sandshell backend, constrained (GBNF, sample-then-check) | {constrained:.1f} "
        f"| {constrained / ours:.2f} of unconstrained |"
    )
    print(
        f"\nThe grammar overruled the model's first choice {grammar_backend.fast.resampled} times "
        f"in {args.runs} answers of up to {args.tokens} tokens."
    )
    print()
    rows = conversation(args.turns)
    print("| turn | prompt tokens | evaluated | from cache | cache share | time to first token |")
    print("|---|---|---|---|---|---|")
    for i, (prompt, evaluated, cached, ttft) in enumerate(rows, 1):
        print(f"| {i} | {prompt} | {evaluated} | {cached} | {cached / prompt:.0%} | {ttft * 1000:.0f} ms |")
    later = [c / p for p, _, c, _ in rows[2:]]
    print(
        f"\nAfter turn 2, turns with at least 80% of the prompt from cache: "
        f"{sum(1 for x in later if x >= 0.8)} of {len(later)}"
    )


if __name__ == "__main__":
    main()
