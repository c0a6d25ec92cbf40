"""``trajforge train eval``: how faithfully a model plays the environment, per domain.

Teacher-forced (one step, the recorded history): format validity, masked exact match,
chrF, ROUGE-L and JSON F1 (JSON observations only) of greedy predictions against the
recorded next observation, read from the release's RL records (ground truth and volatile
spans; the SFT records when the release has no RL stage).

Open-loop (K steps): for trajectories whose first K steps are in the split, the model
predicts step 1, then step 2 with ITS prediction of step 1 in the history instead of the
recorded one (also where a dropped history restates it as the current state), and so on; chrF at each depth shows how errors
compound, which one-step scores hide. ``consistency`` is chrF at depth K over chrF at
depth 1 (1.0: no drift).

With a judge, the same predictions get the five AgentWorldBench scores as a second table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.release.samples import unwrap, wrap
from training.assets import load_split, need, open_release, release_stages
from training.config import EvalSpec, Judge, ModelSpec, TrainConfig
from training.metrics import json_f1, mask, parse_completion, rouge_l, rule_score

if TYPE_CHECKING:
    from pipelines.store import Store


@dataclass
class EvalReport:
    model: str
    release: str
    split: str
    domains: dict[str, dict[str, float]] = field(default_factory=dict)  # domain -> metric -> mean
    open_loop: dict[str, list[float]] = field(default_factory=dict)  # domain -> chrF at depth 1..K
    judge: dict[str, dict[str, float]] = field(default_factory=dict)


def _load_records(store: Store, release: str, split: str) -> list[dict[str, Any]]:
    """The RL records (ground truth, format, volatile spans); the SFT ones when there are none."""
    stage = "rl" if "rl" in release_stages(store, release, split) else "sft"
    rel = open_release(store, release, stage, split)
    base = ["id", "prompt", "domain", "trajectory_id", "step", "dropped_turns"]
    if stage == "rl":
        return load_split(rel, "rl", split, columns=[*base, "ground_truth", "format", "volatile_spans"]).to_list()
    rows = load_split(rel, "sft", split, columns=[*base, "completion"]).to_list()
    for r in rows:
        r.update(ground_truth=unwrap(r.pop("completion")[0]["content"]), format="text", volatile_spans=[])
    return rows


class Generator:
    def __init__(self, model_dir: str, max_new_tokens: int, batch_size: int = 8) -> None:
        from training.assets import load_model, load_tokenizer

        self.torch = need("torch")
        cfg = TrainConfig(stage="sft", model=ModelSpec(path=model_dir))
        self.tok = load_tokenizer(cfg)
        self.tok.padding_side = "left"
        self.model = load_model(cfg.model, self.tok).eval()
        if self.torch.cuda.is_available():
            self.model = self.model.cuda()
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size

    def __call__(self, prompts: list[list[dict[str, str]]]) -> list[str]:
        out = []
        for i in range(0, len(prompts), self.batch_size):
            texts = [
                self.tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                for p in prompts[i : i + self.batch_size]
            ]
            enc = self.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
            with self.torch.no_grad():
                ids = self.model.generate(
                    **enc,
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    pad_token_id=self.tok.pad_token_id,
                    eos_token_id=self.tok.eos_token_id,
                )
            out += self.tok.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        return out


def score(completion: str, r: dict[str, Any]) -> dict[str, float]:
    body = parse_completion(completion, r["format"] or "text")
    pred = body if body is not None else unwrap(completion)
    parts = rule_score(pred, r["ground_truth"], fmt=r["format"] or "text", domain=r["domain"], spans=r["volatile_spans"] or ())
    gold = mask(r["ground_truth"], r["volatile_spans"] or ())
    row = {
        "format_ok": float(body is not None),
        "exact": parts["exact"],
        "chrf": parts["chrf"],
        "rouge_l": rouge_l(mask(pred), gold),
        "rule_score": parts["score"],
    }
    if r["format"] == "json":
        row["json_f1"] = json_f1(pred, r["ground_truth"])
    return row


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r})
    return {k: sum(r[k] for r in rows if k in r) / sum(1 for r in rows if k in r) for k in keys} | {"samples": len(rows)}


def _rollout_chains(records: list[dict[str, Any]], depth: int, per_domain: int) -> list[list[dict[str, Any]]]:
    """Trajectories whose steps 0..K-1 all have a record in the split, up to ``per_domain`` each."""
    by_traj: dict[str, dict[int, dict]] = defaultdict(dict)
    for r in records:
        by_traj[r["trajectory_id"]][r["step"]] = r
    chains: dict[str, list] = defaultdict(list)
    for tid in sorted(by_traj):
        chain = [by_traj[tid].get(k) for k in range(depth)]
        if all(c is not None for c in chain) and len(chains[chain[0]["domain"]]) < per_domain:
            chains[chain[0]["domain"]].append(chain)
    return [c for d in sorted(chains) for c in chains[d]]


def open_loop_prompt(chain: list[dict[str, Any]], k: int, preds: list[str]) -> list[dict[str, str]]:
    """Step k's prompt with the model's own earlier predictions where the recorded
    observations stood: the assistant turns (steps j..k-1, j = turns dropped for the budget)
    and, when history was dropped, the state restated in the first user message."""
    messages = [dict(m) for m in chain[k]["prompt"]]
    j = chain[k]["dropped_turns"]
    if j > 0:
        first = next(m for m in messages if m["role"] == "user")
        first["content"] = first["content"].replace(chain[j - 1]["ground_truth"], preds[j - 1], 1)
    step = j
    for m in messages:
        if m["role"] == "assistant":
            m["content"] = wrap(preds[step])
            step += 1
    return messages


def evaluate(
    model_dir: str,
    store: Store | str,
    release: str,
    split: str = "test",
    spec: EvalSpec | None = None,
    judge: Judge | None = None,
    log=lambda m: None,
) -> EvalReport:
    from pipelines.store import Store

    spec = spec or EvalSpec()
    records = _load_records(Store.open(store), release, split)
    gen = Generator(model_dir, spec.max_new_tokens)
    picked: dict[str, list] = defaultdict(list)
    for r in records:
        if len(picked[r["domain"]]) < spec.max_samples:
            picked[r["domain"]].append(r)
    flat = [r for d in sorted(picked) for r in picked[d]]
    log(f"eval: {len(flat)} teacher-forced samples in {len(picked)} domains")
    completions = gen([r["prompt"] for r in flat])
    rows = [score(c, r) for c, r in zip(completions, flat, strict=True)]
    report = EvalReport(model=model_dir, release=release, split=split)
    for d in sorted(picked):
        report.domains[d] = _mean([row for row, r in zip(rows, flat, strict=True) if r["domain"] == d])
    chains = _rollout_chains(records, spec.rollout_steps, spec.rollouts) if spec.rollouts else []
    log(f"eval: {len(chains)} open-loop rollouts of {spec.rollout_steps} steps")
    depth_scores: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in range(spec.rollout_steps)])
    predictions: list[list[str]] = [[] for _ in chains]
    for k in range(spec.rollout_steps):
        prompts = [open_loop_prompt(chain, k, preds) for chain, preds in zip(chains, predictions, strict=True)]
        for chain, preds, out in zip(chains, predictions, gen(prompts), strict=True):
            preds.append(unwrap(out))
            depth_scores[chain[0]["domain"]][k].append(score(out, chain[k])["chrf"])
    for d, per_depth in sorted(depth_scores.items()):
        report.open_loop[d] = [sum(x) / len(x) for x in per_depth]
        if report.open_loop[d][0] >= 0.05:  # a ratio of near-zero scores says nothing
            report.domains.setdefault(d, {})["consistency"] = report.open_loop[d][-1] / report.open_loop[d][0]
    if judge is not None:
        report.judge = _judge_table(judge, flat, completions)
    return report


def _judge_table(judge: Judge, records: list[dict], completions: list[str]) -> dict[str, dict[str, float]]:
    from training.rewards import DIMENSIONS, LLMJudge

    items = [(r["prompt"], unwrap(c), r["ground_truth"]) for r, c in zip(records, completions, strict=True)]
    scores = LLMJudge(judge).score_many_sync(items)
    out: dict[str, dict[str, float]] = {}
    for d in sorted({r["domain"] for r in records}):
        got = [s for s, r in zip(scores, records, strict=True) if r["domain"] == d and s is not None]
        tried = sum(1 for r in records if r["domain"] == d)
        out[d] = {dim: sum(s[dim] for s in got) / len(got) for dim in DIMENSIONS} if got else {}
        out[d]["failures"] = tried - len(got)
    return out


def table(report: EvalReport) -> str:
    cols = ["samples", "format_ok", "exact", "chrf", "rouge_l", "json_f1", "rule_score", "consistency"]
    lines = [
        f"world-model fidelity: {report.model} on {report.release} ({report.split})",
        "",
        "| domain | " + " | ".join(cols) + " | open-loop chrF by depth |",
        "|" + "---|" * (len(cols) + 2),
    ]
    for d, m in report.domains.items():
        cells = [f"{int(m[c])}" if c == "samples" else (f"{m[c]:.3f}" if c in m else "-") for c in cols]
        depth = " / ".join(f"{x:.3f}" for x in report.open_loop.get(d, [])) or "-"
        lines.append(f"| {d} | " + " | ".join(cells) + f" | {depth} |")
    if report.judge:
        from training.rewards import DIMENSIONS

        lines += ["", "| domain (judge, 1-5) | " + " | ".join(DIMENSIONS) + " | failures |", "|" + "---|" * 7]
        for d, m in report.judge.items():
            lines.append(
                f"| {d} | " + " | ".join(f"{m[k]:.2f}" if k in m else "-" for k in DIMENSIONS) + f" | {int(m['failures'])} |"
            )
    return "\n".join(lines)


def write(report: EvalReport, out: str | Path) -> None:
    Path(out).write_text(json.dumps(asdict(report), indent=1))
