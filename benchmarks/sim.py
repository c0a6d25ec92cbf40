"""Simulated against real steps per second, for terminal and SWE.

    python benchmarks/sim.py [--rounds 3] [--max-new-tokens 32,128] [--size tiny|0.6b] [--threads N] [--json out.json]

- **real**: each scripted task of ``examples/tasks/{terminal,swe}.yaml`` in the real
  environment (local bubblewrap sandbox), timing ``env.step`` (resets not counted);
- **sim, planted**: the same actions in ``SimEnv`` (reset from the real episode's first
  observation) with the planted tiny model (``simulate.tiny``): the whole step (the
  SFT prompt built by the release's code, generate, the format gate) at ~3 new tokens,
  i.e. the plumbing's own cost;
- **sim, N tokens**: the very prompts SimEnv built, answered by a model of ``--size`` with
  exactly N new tokens (``min_new_tokens = max_new_tokens = N``): the cost of a step whose
  observation is N tokens long. ``tiny`` is the tests' Qwen3 (hidden 32, 2 layers) on the
  CPU; ``0.6b`` a Qwen3-0.6B-shaped model (28 layers, hidden 1024, its 151,936-token
  vocabulary; random weights, nothing to download), bf16 on a GPU when there is one. The
  prompts are tokenized by a byte-level BPE of 8,192 tokens trained on them.

Prints a Markdown table; ``--json`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.env import load_suite
from collectors.registry import make_env
from sandboxes import SandboxConfig
from simulate.backends import LocalBackend, Recording
from simulate.compare import run_sides
from simulate.config import SimSection
from simulate.env import SimEnv
from simulate.tiny import planted_model

ROOT = Path(__file__).resolve().parents[1]
QWEN3_0_6B = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": True,
}
QWEN3_VOCAB = 151_936


def episodes(domain: str, planted: str, sandbox: SandboxConfig) -> tuple[list[float], list[float], list]:
    """Real and planted-sim step times (ms) of every scripted task of the domain, and the prompts."""
    tasks = load_suite(ROOT / "examples" / "tasks" / f"{domain}.yaml")
    rec = Recording(LocalBackend(planted))
    real_ms, sim_ms = [], []
    with make_env(domain, sandbox, tasks[0].env_id) as real:
        sim = SimEnv(domain, SimSection(model=planted, max_new_tokens=16), tasks[0].env_id, backend=rec)
        for task in tasks:
            sim.env_id = task.env_id
            ep = run_sides(real, sim, task, seed=0, max_steps=20)
            if ep.error:
                raise SystemExit(f"{task.id}: {ep.error}")
            real_ms += ep.real_ms
            sim_ms += ep.sim_ms
    return real_ms, sim_ms, [messages for messages, _ in rec.calls]


def decode_model(size: str, prompts: list, work: Path):
    """A model of ``size`` (random weights) and a tokenizer trained on the prompts."""
    import torch

    from pipelines.release.tokens import train_tokenizer
    from training.assets import load_model, load_tokenizer
    from training.config import ModelSpec, TrainConfig

    texts = [m["content"] for p in prompts for m in p]
    train_tokenizer(texts, str(work / "tok" / "tokenizer.json"), vocab_size=8192)
    tok = load_tokenizer(TrainConfig(stage="sft", model=ModelSpec(path=str(work / "tok"))))
    torch.manual_seed(0)
    model = load_model(ModelSpec(init=QWEN3_0_6B if size == "0.6b" else {}), tok)
    if size == "0.6b":
        model.resize_token_embeddings(QWEN3_VOCAB)
    if torch.cuda.is_available():
        model = model.to("cuda", torch.bfloat16)
    return LocalBackend.of(model.eval(), tok, f"qwen3-{size}-random")


def decode_ms(backend: LocalBackend, prompts: list, n: int) -> tuple[list[float], list[int]]:
    times, lengths = [], []
    for messages in prompts:
        t0 = time.perf_counter()
        c = backend.complete(messages, temperature=0.0, top_p=1.0, max_new_tokens=n, min_new_tokens=n, seed=0)
        if backend.torch.cuda.is_available():
            backend.torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
        lengths.append(c.prompt_tokens)
    return times, lengths


def rate(ms: list[float]) -> float:
    return len(ms) / (sum(ms) / 1000) if ms else 0.0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", default="32,128", help="comma-separated decode lengths")
    ap.add_argument("--size", choices=["tiny", "0.6b"], default="tiny")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (a tiny model decodes fastest on one)")
    ap.add_argument("--domains", default="terminal,swe")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.max_new_tokens.split(",")]
    import torch

    torch.set_num_threads(args.threads)
    sandbox = SandboxConfig(backend="local", memory_mb=512, run_id="bench-sim", exec_timeout_s=60)
    out: dict = {"size": args.size, "rounds": args.rounds, "threads": args.threads, "machine": platform.machine(), "domains": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        planted = planted_model(work / "planted", "ok\n[exit 0] /work$")
        backend = None
        for domain in args.domains.split(","):
            rounds: dict[str, list[float]] = {"real": [], "planted": [], **{f"decode_{n}": [] for n in lengths}}
            prompt_tokens: list[int] = []
            for _ in range(args.rounds):
                real_ms, sim_ms, prompts = episodes(domain, planted, sandbox)
                backend = backend or decode_model(args.size, prompts, work)
                rounds["real"].append(rate(real_ms))
                rounds["planted"].append(rate(sim_ms))
                for n in lengths:
                    ms, prompt_tokens = decode_ms(backend, prompts, n)
                    rounds[f"decode_{n}"].append(rate(ms))
            out["domains"][domain] = {k: statistics.median(v) for k, v in rounds.items()} | {
                "steps": len(prompts),
                "median_prompt_tokens": statistics.median(prompt_tokens) if prompt_tokens else 0,
            }
        out["device"] = "cuda" if backend is not None and backend.torch.cuda.is_available() else "cpu"
    print(table(out, lengths))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


def table(out: dict, lengths: list[int]) -> str:
    cols = ["planted", *(f"decode_{n}" for n in lengths)]
    head = " | ".join(f"sim {c.replace('decode_', '')} tok/step" if c != "planted" else "sim planted" for c in cols)
    lines = [
        f"simulated vs real steps/s ({out['size']} model on {out['device']}, median of {out['rounds']} rounds)",
        "",
        f"| domain | steps | median prompt tokens | real | {head} |",
        "|" + "---|" * (len(cols) + 4),
    ]
    for d, r in out["domains"].items():
        cells = " | ".join(f"{r[c]:.2f} ({r[c] / r['real']:.2f}x)" for c in cols)
        lines.append(f"| {d} | {r['steps']} | {r['median_prompt_tokens']:.0f} | {r['real']:.2f} | {cells} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
