"""What an eval run found: a result per task, a summary by variant and level, its JSON, and a comparison."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from sandshell.eval.task import LEVELS, TaskError

FORMAT = "sandshell-eval/1"
LATE = 2  # turns after this many count as "after the second turn" (where the latency target starts)


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 2) if values else 0.0


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else 0.0


def group(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Numbers for one group of results."""
    n = len(results)
    ttft = [t for r in results for t in r["ttft"]]
    late_ttft = [t for r in results for t in r["ttft"][LATE:]]
    late_cache = [c for r in results for c in r["cache"][LATE:]]
    passed = sum(r["passed"] for r in results)
    return {
        "tasks": n,
        "passed": passed,
        "rate": round(passed / n, 3) if n else 0.0,
        "steps": _mean([r["steps"] for r in results]),
        "tokens_in": _mean([r["tokens_in"] for r in results]),
        "tokens_out": _mean([r["tokens_out"] for r in results]),
        "seconds": _mean([r["seconds"] for r in results]),
        "ttft": _mean(ttft),
        "ttft_late_median": _median(late_ttft) if late_ttft else None,
        "cached_80_late": round(sum(c >= 0.8 for c in late_cache) / len(late_cache), 3) if late_cache else None,
        "statuses": {s: sum(r["status"] == s for r in results) for s in sorted({r["status"] for r in results})},
    }


def summarize(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{variant: {level or "all": numbers}}, variants in the order they first appear."""
    out: dict[str, dict[str, Any]] = {}
    for variant in dict.fromkeys(r["variant"] for r in results):
        mine = [r for r in results if r["variant"] == variant]
        levels = [lv for lv in LEVELS if any(r["level"] == lv for r in mine)]
        out[variant] = {lv: group([r for r in mine if r["level"] == lv]) for lv in levels}
        out[variant]["all"] = group(mine)
    return out


def document(results: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "meta": meta, "summary": summarize(results), "results": results}


def load(path: str | Path) -> dict[str, Any]:
    """A results file written by `eval --json`; TaskError when it is not one."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise TaskError(f"cannot read the results file {p}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise TaskError(f"{p} is not JSON; give a file written by `sandshell eval --json`") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("results"), list):
        raise TaskError(f"{p} is not an eval results file ({FORMAT}); give one written by `sandshell eval --json`")
    return doc


def result_line(r: dict[str, Any]) -> str:
    mark = "PASS" if r["passed"] else "fail"
    rep = f" #{r['repeat']}" if r.get("repeat", 1) > 1 else ""
    why = "" if r["passed"] else f" ({r['status']}{': ' + r['error'] if r['error'] else ''})"[:160]
    turns = f"{r['steps']:>2} turn" + ("" if r["steps"] == 1 else "s")  # (a turn: one answer, of one or more actions)
    return f"{mark} {r['variant']:<10} {r['task']:<28}{rep} {turns} {r['seconds']:>6.1f}s{why}"


def table(summary: dict[str, dict[str, Any]]) -> str:
    """The summary as a Markdown table."""
    head = (
        "| variant | level | passed | rate | turns (mean) | prompt tokens evaluated (mean) | tokens written (mean) "
        "| seconds (mean) | time to first token (mean s) | time to first token after turn 2 (median s) "
        "| prompt reuse after turn 2 (turns ≥80% cached) | endings |"
    )
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for variant, levels in summary.items():
        for level, g in levels.items():
            endings = ", ".join(f"{k} {v}" for k, v in g["statuses"].items())
            lines.append(
                f"| {variant} | {level} | {g['passed']}/{g['tasks']} | {g['rate']:.0%} | {g['steps']:.1f} "
                f"| {g['tokens_in']:.0f} | {g['tokens_out']:.0f} | {g['seconds']:.1f} | {g['ttft']:.2f} "
                f"| {_or_dash(g['ttft_late_median'], '.2f')} | {_or_dash(g['cached_80_late'], '.0%')} | {endings} |"
            )
    return "\n".join(lines)


def _or_dash(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def compare(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str] = ("A", "B")) -> str:
    """What changed from run A to run B: rates by variant and level, then the tasks whose outcome flipped."""
    sa, sb = a["summary"], b["summary"]
    lines = [f"| variant | level | {names[0]} | {names[1]} | change |", "|---|---|---|---|---|"]
    for variant in dict.fromkeys([*sa, *sb]):
        for level in dict.fromkeys([*sa.get(variant, {}), *sb.get(variant, {})]):
            ga, gb = sa.get(variant, {}).get(level), sb.get(variant, {}).get(level)
            ra = f"{ga['passed']}/{ga['tasks']} ({ga['rate']:.0%})" if ga else "-"
            rb = f"{gb['passed']}/{gb['tasks']} ({gb['rate']:.0%})" if gb else "-"
            delta = f"{(gb['rate'] - ga['rate']) * 100:+.0f} points" if ga and gb else "new" if gb else "gone"
            lines.append(f"| {variant} | {level} | {ra} | {rb} | {delta} |")
    before = _outcomes(a["results"])
    after = _outcomes(b["results"])
    flips = []
    for key in sorted(set(before) & set(after)):
        if before[key] != after[key]:
            was, now = before[key], after[key]
            flips.append(f"{key[0]} {key[1]}: {was[0]}/{was[1]} passed -> {now[0]}/{now[1]}")
    lines.append("")
    lines.append("tasks whose outcome changed:" if flips else "no task's outcome changed")
    lines += [f"  {f}" for f in flips]
    only = sorted(set(before) ^ set(after))
    if only:
        lines.append(f"in one run only: {', '.join(f'{v} {t}' for v, t in only[:20])}")
    return "\n".join(lines)


def _outcomes(results: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, int]]:
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for r in results:
        key = (r["variant"], r["task"])
        p, n = out.get(key, (0, 0))
        out[key] = (p + bool(r["passed"]), n + 1)
    return out
