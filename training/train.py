"""Train a LoRA adapter for the embedded SmolLM2-135M-Instruct on recorded sessions; write it as GGUF.

The base is the very file sandshell runs (the Q4_1 GGUF, dequantized to float32 by transformers),
so the adapter learns against the weights it will be applied to. The loss covers the model's own
answers only (never the system prompt, the observations or the scripted intro). LoRA goes on the
attention's value and output projections and on the MLP of the top `--layers` layers. The layers
below are frozen, so what they make of each sequence never changes: it is computed once, kept,
and every epoch runs only the top layers, forward and backward, with logits only where an answer
token is predicted. On two shared cores that is what makes several epochs fit. q and k are left
alone: their rows are permuted between the GGUF and transformers' layout.

Needs the training tools (`training/requirements.txt`, installed by `scripts/train.sh` into
`.cache/train-venv`), never sandshell's runtime.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

TARGETS = {  # transformers module -> llama.cpp tensor name
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


class LoRA(nn.Module):
    """y = W x + (alpha / r) B A x, with B zero at the start (the adapter begins as a no-op)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, gen: torch.Generator) -> None:
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.a = nn.Parameter(torch.randn(rank, base.in_features, generator=gen) / math.sqrt(base.in_features))
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.a.T @ self.b.T) * self.scale


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def encode(tok: Any, messages: list[dict[str, str]], train_from: int) -> tuple[list[int], list[int]]:
    """Token ids of the chat as llama.cpp renders it (ChatML), and labels: -100 except the taught answers."""
    ids: list[int] = []
    labels: list[int] = []
    for i, m in enumerate(messages):
        head = tok.encode(f"<|im_start|>{m['role']}\n", add_special_tokens=False)
        body = tok.encode(f"{m['content']}<|im_end|>", add_special_tokens=False)
        tail = tok.encode("\n", add_special_tokens=False)
        taught = m["role"] == "assistant" and i >= train_from
        ids += head + body + tail
        labels += [-100] * len(head) + (body if taught else [-100] * len(body)) + [-100] * len(tail)
    return ids, labels


def top_forward(model: Any, hidden: torch.Tensor, first: int) -> torch.Tensor:
    """Run layers `first`.. on the hidden state entering layer `first` (one sequence, causal, no padding)."""
    positions = torch.arange(hidden.shape[1]).unsqueeze(0)
    rope = model.model.rotary_emb(hidden, positions)
    for layer in model.model.layers[first:]:
        out = layer(hidden, attention_mask=None, position_ids=positions, position_embeddings=rope)
        hidden = out[0] if isinstance(out, tuple) else out
    return model.model.norm(hidden)  # type: ignore[no-any-return]


def entering(model: Any, ids: list[int], first: int) -> torch.Tensor:
    """The hidden state entering layer `first` (no gradient: the layers below are frozen)."""
    with torch.no_grad():
        hidden = model.model.embed_tokens(torch.tensor([ids]))
        positions = torch.arange(len(ids)).unsqueeze(0)
        rope = model.model.rotary_emb(hidden, positions)
        for layer in model.model.layers[:first]:
            out = layer(hidden, attention_mask=None, position_ids=positions, position_embeddings=rope)
            hidden = out[0] if isinstance(out, tuple) else out
    return hidden


class Example:
    """One trajectory: its cached hidden state, where answers are predicted, and the tokens to predict."""

    def __init__(self, model: Any, ids: list[int], labels: list[int], first: int) -> None:
        self.hidden = entering(model, ids, first)
        where = [i for i in range(len(ids) - 1) if labels[i + 1] != -100]
        self.where = torch.tensor(where, dtype=torch.long)
        self.targets = torch.tensor([labels[i + 1] for i in where], dtype=torch.long)
        self.tokens = len(ids)


def loss_sum(model: Any, ex: Example, first: int) -> torch.Tensor:
    hidden = top_forward(model, ex.hidden, first)
    logits = model.lm_head(hidden[0, ex.where])
    return nn.functional.cross_entropy(logits, ex.targets, reduction="sum")


def evaluate(model: Any, items: list[Example], first: int) -> float:
    with torch.no_grad():
        total = sum(float(loss_sum(model, ex, first)) for ex in items)
    return total / max(1, sum(len(ex.targets) for ex in items))


def check_forward(model: Any, tok: Any, first: int) -> None:
    """The split forward (cached lower layers, then the top) must give the model's own logits."""
    ids = tok.encode("<|im_start|>user\nls /app<|im_end|>\n", add_special_tokens=False)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
        split = model.lm_head(top_forward(model, entering(model, ids, first), first))[0]
    gap = float((full - split).abs().max())
    if gap > 1e-3:
        raise SystemExit(f"the split forward differs from the model's by {gap}; transformers changed its layers")


def export(path: Path, loras: dict[str, LoRA], alpha: float) -> None:
    """The adapter as llama.cpp's LoRA GGUF: blk.N.<tensor>.weight.lora_a / .lora_b, F16."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(alpha))
    writer.add_string("general.name", "sandshell SmolLM2-135M-Instruct adapter")
    for name, lora in loras.items():
        writer.add_tensor(f"{name}.weight.lora_a", lora.a.detach().numpy().astype(np.float16))
        writer.add_tensor(f"{name}.weight.lora_b", lora.b.detach().numpy().astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.train", description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="JSONL from training.collect")
    p.add_argument("--base", required=True, help="the base GGUF (SmolLM2-135M-Instruct.Q4_1.gguf)")
    p.add_argument("--out", required=True, help="folder for adapter.gguf and provenance.json")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--layers", type=int, default=10, help="LoRA on the top this many of the 30 layers")
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--val", type=float, default=12, help="trajectories held out for validation (below 1: a share)")
    p.add_argument("--minutes", type=float, default=60.0, help="stop training after this long (wall clock)")
    p.add_argument("--eval-every", type=int, default=20, help="steps between validation losses")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="use only this many training trajectories (0: all)")
    p.add_argument("--keep", type=int, default=0, help="also keep this many adapters an epoch in checkpoints/")
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = Path(args.base)
    tok = AutoTokenizer.from_pretrained(str(base.parent), gguf_file=base.name)
    model = AutoModelForCausalLM.from_pretrained(str(base.parent), gguf_file=base.name, dtype=torch.float32)
    for param in model.parameters():
        param.requires_grad_(False)

    records = [json.loads(line) for line in Path(args.data).read_text(encoding="utf-8").splitlines() if line.strip()]
    rng.shuffle(records)
    n_val = int(args.val) if args.val >= 1 else max(1, int(len(records) * args.val))
    val_recs, train_recs = records[:n_val], records[n_val:]
    if args.limit:
        train_recs = train_recs[: args.limit]
    layers = model.model.layers
    first = len(layers) - args.layers
    started = time.monotonic()
    check_forward(model, tok, first)
    train = [Example(model, *encode(tok, r["messages"], r["train_from"]), first) for r in train_recs]
    val = [Example(model, *encode(tok, r["messages"], r["train_from"]), first) for r in val_recs]
    cache_seconds = time.monotonic() - started
    gen = torch.Generator().manual_seed(args.seed)
    loras: dict[str, LoRA] = {}
    for idx in range(first, len(layers)):
        for attr, gguf_name in TARGETS.items():
            owner_name, leaf = attr.split(".")
            owner = getattr(layers[idx], owner_name)
            lora = LoRA(getattr(owner, leaf), args.rank, args.alpha, gen)
            setattr(owner, leaf, lora)
            loras[f"blk.{idx}.{gguf_name}"] = lora
    params = [q for lora in loras.values() for q in (lora.a, lora.b)]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    steps_per_epoch = math.ceil(len(train) / args.batch)
    total_steps = max(1, int(steps_per_epoch * args.epochs))
    warmup = max(1, total_steps // 20)
    # the steps after which an adapter is kept: `--keep` a whole epoch, the last step left out
    kept = math.ceil(args.epochs * args.keep)
    marks = {m for j in range(1, kept + 1) if 0 < (m := round(steps_per_epoch * j / args.keep)) < total_steps}

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return args.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total_steps - warmup)))

    train_tokens = sum(ex.tokens for ex in train)
    taught_tokens = sum(len(ex.targets) for ex in train)
    print(
        f"{len(train)} train / {len(val)} val trajectories, {train_tokens} tokens ({taught_tokens} taught), "
        f"{total_steps} steps; lower layers cached in {cache_seconds:.0f}s",
        file=sys.stderr,
        flush=True,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    curve: list[dict[str, float | None]] = []
    first_val = evaluate(model, val, first)
    curve.append({"step": 0, "seconds": 0.0, "train_loss": None, "val_loss": round(first_val, 4), "epoch": 0.0})
    print(f"step 0 val {first_val:.4f}", file=sys.stderr, flush=True)
    step, running, stopped, t0 = 0, list[float](), "steps", time.monotonic()
    order = list(range(len(train)))
    while step < total_steps and stopped == "steps":
        rng.shuffle(order)
        for k in range(0, len(order), args.batch):
            if step >= total_steps:
                break
            if time.monotonic() - started > args.minutes * 60:
                stopped = "time"
                break
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            group = [train[i] for i in order[k : k + args.batch]]
            count = sum(len(ex.targets) for ex in group)
            total = 0.0
            for ex in group:
                loss = loss_sum(model, ex, first) / count
                loss.backward()
                total += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad()
            step += 1
            running.append(total)
            if step % args.eval_every == 0 or step == total_steps:
                v = evaluate(model, val, first)
                elapsed = time.monotonic() - t0
                curve.append(
                    {
                        "step": step,
                        "seconds": round(elapsed, 1),
                        "train_loss": round(sum(running) / len(running), 4),
                        "val_loss": round(v, 4),
                        "epoch": round(step / steps_per_epoch, 2),
                    }
                )
                running = []
                print(
                    f"step {step}/{total_steps} epoch {curve[-1]['epoch']} train {curve[-1]['train_loss']:.4f} "
                    f"val {v:.4f} {elapsed:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
                export(out / "adapter.gguf", loras, args.alpha)  # a usable adapter at every checkpoint
            if step in marks:
                # kept for the curve of success against training seen (docs/benchmarks.md)
                (out / "checkpoints").mkdir(exist_ok=True)
                export(out / "checkpoints" / f"adapter-e{step / steps_per_epoch:.2f}.gguf", loras, args.alpha)
    if curve[-1]["step"] != step:
        v = evaluate(model, val, first)
        curve.append(
            {
                "step": step,
                "seconds": round(time.monotonic() - t0, 1),
                "train_loss": round(sum(running) / max(1, len(running)), 4),
                "val_loss": round(v, 4),
                "epoch": round(step / steps_per_epoch, 2),
            }
        )
    export(out / "adapter.gguf", loras, args.alpha)
    families: dict[str, int] = {}
    for r in train_recs:
        families[r["family"]] = families.get(r["family"], 0) + 1
    provenance = {
        "base_model": base.name,
        "base_sha256": sha256(base),
        "adapter_sha256": sha256(out / "adapter.gguf"),
        "data": {
            "file": str(args.data),
            "trajectories_train": len(train),
            "trajectories_val": len(val),
            "tokens_train": train_tokens,
            "tokens_taught": taught_tokens,
            "families": families,
        },
        "hyperparameters": {
            k: getattr(args, k)
            for k in ("seed", "rank", "alpha", "layers", "lr", "batch", "epochs", "val", "minutes", "threads", "limit")
        },
        "targets": sorted(TARGETS.values()),
        "steps": step,
        "stopped_by": stopped,
        "cache_seconds": round(cache_seconds, 1),
        "train_seconds": round(time.monotonic() - t0, 1),
        "curve": curve,
        "torch": torch.__version__,
    }
    (out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")
    print(
        f"wrote {out / 'adapter.gguf'} after {step} steps; val {curve[0]['val_loss']} -> {curve[-1]['val_loss']}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
