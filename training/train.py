"""``trajforge train cpt|sft|rl``: one stage of training from a release, on TRL.

- **CPT**: whole CPT documents, tokenised, packed best-fit-decreasing into sequences of
  ``max_length`` (TRL's ``bfd_split``: a document longer than that continues in the next
  sequence, nothing is cut away); position ids restart per document and no token attends
  across documents (variable-length FlashAttention where installed, else SDPA with a
  block-diagonal mask built by transformers from those position ids); loss on every token.
- **SFT**: prompt-completion records, loss on the completion only, BFD packing; a sample
  longer than ``max_length`` is left out (counted in the report), never cut, since a cut
  target teaches the model half an observation.
- **RL**: GSPO, i.e. TRL's ``GRPOTrainer`` with ``importance_sampling_level="sequence"``
  and ``loss_type="grpo"``, no KL term, rewards from ``training.rewards``.

A run writes checkpoints every ``train.save_steps`` into OUTPUT; running the same command
again resumes from the last one with the same data order (the Trainer replays the seeded
sampler and skips the batches already seen). The end result is a Hugging Face model folder
(weights, config, tokenizer) with ``training_report.json`` and ``loss.png``. A NaN or
infinite loss stops the run, naming the step and the last good checkpoint.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemas.errors import ConfigError, TrainingError
from training.assets import check_model, load_model, load_split, load_tokenizer, need, open_release, tokenizer_source
from training.config import TrainConfig

if TYPE_CHECKING:
    from pipelines.store import Store

REPORT = "training_report.json"


@dataclass
class TrainReport:
    stage: str
    output: str
    release: str
    manifest_sha256: str
    steps: int = 0
    samples: int | None = None
    left_out_too_long: int | None = 0  # SFT samples longer than max_length (None: streaming, not counted)
    train_tokens: int = 0
    seconds: float = 0.0
    tokens_per_s: float = 0.0
    final_loss: float | None = None
    resumed_from: str | None = None
    packing_efficiency: float | None = None  # bin fill, real tokens / (sequences x max_length); batches carry no padding
    peak_gpu_mb: float | None = None
    parameters: int = 0
    tokenizer_matches_release: bool | None = None
    config: dict[str, Any] = field(default_factory=dict)
    log_history: list[dict[str, Any]] = field(default_factory=list)


def last_checkpoint(output: str | Path) -> str | None:
    """The newest complete checkpoint. The Trainer writes ``trainer_state.json`` last, so a
    run killed while saving leaves a folder without a readable one: it is passed over."""
    ckpts = [p for p in Path(output).glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    for ckpt in sorted(ckpts, key=lambda p: int(p.name.split("-")[-1]), reverse=True):
        try:
            json.loads((ckpt / "trainer_state.json").read_text())
            return str(ckpt)
        except (OSError, ValueError):
            continue
    return None


def _callbacks(output: str, progress_update):
    transformers = need("transformers")

    class Watch(transformers.TrainerCallback):
        """Stops on a NaN/inf loss (before the Trainer saves that step) and feeds the
        progress display with loss and tokens/s."""

        def __init__(self) -> None:
            self.t0, self.tokens0 = time.monotonic(), None

        def on_log(self, args, state, control, logs=None, **kw):
            logs = logs or {}
            loss = logs.get("loss")
            if loss is not None and not math.isfinite(loss):
                raise TrainingError(
                    f"loss is {loss} at step {state.global_step}; last good checkpoint: "
                    f"{last_checkpoint(output) or 'none (no checkpoint saved yet)'}"
                )
            tokens = logs.get("num_tokens")
            now = time.monotonic()
            info = f"loss {loss:.4f}" if loss is not None else ""
            if tokens is not None:
                if self.tokens0 is not None and now > self.t0:
                    info += f"  {(tokens - self.tokens0) / (now - self.t0):,.0f} tok/s"
                self.t0, self.tokens0 = now, tokens
            if "reward" in logs:
                info += f"  reward {logs['reward']:.3f}"
            progress_update(state.global_step, info)

    return [Watch()]


def _sft_length_filter(ds, tokenizer, max_length: int, streaming: bool):
    """Keep samples whose whole chat (prompt + completion) fits; count the others (not
    known ahead when streaming: the filter then runs as samples stream by)."""

    def size(batch):
        ids = tokenizer.apply_chat_template(
            [p + c for p, c in zip(batch["prompt"], batch["completion"], strict=True)], tokenize=True, return_dict=True
        )["input_ids"]
        return {"_n": [len(x) for x in ids]}

    sized = ds.map(size, batched=True, batch_size=256)
    kept = sized.filter(lambda n: n <= max_length, input_columns="_n").remove_columns("_n")
    return kept, None if streaming else len(sized) - len(kept)


def _common_args(cfg: TrainConfig, output: str, use_cpu: bool, bf16: bool) -> dict[str, Any]:
    o = cfg.train
    return {
        "output_dir": output,
        "max_steps": o.max_steps,
        "num_train_epochs": o.num_epochs,
        "learning_rate": o.learning_rate,
        "warmup_steps": o.warmup_ratio,
        "lr_scheduler_type": o.lr_scheduler,
        "weight_decay": o.weight_decay,
        "max_grad_norm": o.max_grad_norm,
        "per_device_train_batch_size": o.per_device_batch_size,
        "gradient_accumulation_steps": o.gradient_accumulation_steps,
        "activation_checkpointing": o.gradient_checkpointing,
        "bf16": bf16,
        "save_strategy": "steps",
        "save_steps": o.save_steps,
        "save_total_limit": o.save_total_limit,
        "logging_steps": o.logging_steps,
        "seed": o.seed,
        "data_seed": o.seed,
        "report_to": [],
        "disable_tqdm": True,
        "use_cpu": use_cpu,
        "dataloader_num_workers": 0,
        "logging_nan_inf_filter": False,  # the Trainer would hide a NaN loss behind the mean of earlier ones
    }


def sft_trainer(cfg: TrainConfig, rel, tokenizer, model, common: dict[str, Any], callbacks=()):
    """TRL's SFTTrainer for CPT (every token, ``bfd_split``) or SFT (completion only, BFD,
    over-long samples left out); tokenising and packing happen in its constructor.
    Returns (trainer, dataset, samples left out)."""
    trl = need("trl")
    ds = load_split(rel, cfg.stage, cfg.split, streaming=cfg.streaming, max_samples=cfg.max_samples)
    left_out = 0
    if cfg.stage == "sft":
        ds, left_out = _sft_length_filter(ds, tokenizer, cfg.max_length, cfg.streaming)
        if not cfg.streaming and len(ds) == 0:
            raise TrainingError(f"{rel.root}: no SFT sample fits max_length {cfg.max_length}")
    args = trl.SFTConfig(
        **common,
        max_length=cfg.max_length,
        packing=cfg.packing,
        packing_strategy="bfd_split" if cfg.stage == "cpt" else "bfd",
        completion_only_loss=cfg.stage == "sft",
        dataset_num_proc=None,
    )
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer, callbacks=list(callbacks))
    return trainer, ds, left_out


def prepare(cfg: TrainConfig, store: Store | None = None):
    """Every check and load that can fail, before any training: release, stage, tokenizer,
    model. ``store`` is the handle of ``cfg.store`` when the caller opened it already."""
    missing = cfg.missing()
    if missing:
        raise ConfigError(f"training config: {', '.join(missing)} not set (in the file or as --{missing[0]})")
    rel = open_release(store or cfg.store, cfg.release, cfg.stage, cfg.split)
    if Path(cfg.output, REPORT).exists():
        raise ConfigError(f"{cfg.output}: holds a finished run ({REPORT}); choose another --output")
    check_model(cfg.model)
    tokenizer = load_tokenizer(cfg)
    return rel, tokenizer


def run(
    cfg: TrainConfig, *, store: Store | None = None, progress_update=lambda step, info="": None, extra_callbacks=()
) -> TrainReport:
    """Train ``cfg.stage`` on the release (of ``store``, the opened ``cfg.store``, when given)."""
    torch = need("torch")
    trl = need("trl")
    need("datasets").disable_progress_bars()
    need("transformers").utils.logging.disable_progress_bar()
    rel, tokenizer = prepare(cfg, store)
    output = cfg.output
    use_cpu = not torch.cuda.is_available()
    bf16 = (not use_cpu and torch.cuda.is_bf16_supported()) if cfg.train.bf16 == "auto" else bool(cfg.train.bf16)
    torch.manual_seed(cfg.train.seed)
    model = load_model(cfg.model, tokenizer)
    report = TrainReport(
        stage=cfg.stage,
        output=output,
        release=cfg.release,
        manifest_sha256=rel.manifest_sha256,
        config=cfg.model_dump(mode="json"),
    )
    _, bare = tokenizer_source(cfg)
    if rel.tokenizer_sha256 and bare is not None:  # the release counted its tokens with this file?
        import hashlib

        report.tokenizer_matches_release = hashlib.sha256(bare.read_bytes()).hexdigest()[:16] == rel.tokenizer_sha256
    common = _common_args(cfg, output, use_cpu, bf16)
    callbacks = [*_callbacks(output, progress_update), *extra_callbacks]
    if cfg.stage in ("cpt", "sft"):
        trainer, ds, report.left_out_too_long = sft_trainer(cfg, rel, tokenizer, model, common, callbacks)
        if cfg.packing and not cfg.streaming:
            lengths = trainer.train_dataset["seq_lengths"] if "seq_lengths" in trainer.train_dataset.column_names else None
            if lengths is not None:
                report.packing_efficiency = sum(sum(x) for x in lengths) / (len(lengths) * cfg.max_length)
    else:
        from training.rewards import make_reward

        r = cfg.rl
        ds = load_split(rel, cfg.stage, cfg.split, streaming=cfg.streaming, max_samples=cfg.max_samples)
        args = trl.GRPOConfig(
            **common,
            num_generations=r.num_generations,
            max_completion_length=r.max_completion_length,
            temperature=r.temperature,
            importance_sampling_level="sequence",
            loss_type="grpo",
            beta=0.0,
            epsilon=r.epsilon,
            epsilon_high=r.epsilon_high,
        )
        reward = make_reward(r)
        trainer = trl.GRPOTrainer(
            model=model, reward_funcs=[reward], args=args, train_dataset=ds, processing_class=tokenizer, callbacks=callbacks
        )
    trainer.remove_callback(need("transformers").PrinterCallback)  # the progress display shows the logs
    report.samples = None if cfg.streaming else len(ds)
    report.parameters = sum(p.numel() for p in model.parameters())
    resume = last_checkpoint(output)
    report.resumed_from = resume
    t0 = time.monotonic()
    result = trainer.train(resume_from_checkpoint=resume)
    report.seconds = time.monotonic() - t0
    report.steps = trainer.state.global_step
    report.log_history = trainer.state.log_history
    losses = [h["loss"] for h in report.log_history if "loss" in h]
    report.final_loss = losses[-1] if losses else result.training_loss
    tokens = [h["num_tokens"] for h in report.log_history if "num_tokens" in h]
    report.train_tokens = int(tokens[-1]) if tokens else 0
    report.tokens_per_s = report.train_tokens / report.seconds if report.seconds else 0.0
    if not use_cpu:
        report.peak_gpu_mb = torch.cuda.max_memory_allocated() / 2**20
    trainer.save_model(output)
    tokenizer.save_pretrained(output)
    _write_report(report, Path(output))
    return report


def _write_report(report: TrainReport, out: Path) -> None:
    """The report and loss curves (the checkpoints stay, bounded by train.save_total_limit)."""
    plt = need("matplotlib.pyplot")
    hist = [h for h in report.log_history if "loss" in h and "step" in h]
    rewards = [h for h in report.log_history if "reward" in h]
    fig, axes = plt.subplots(1, 2 if rewards else 1, figsize=(10 if rewards else 6, 3.5), squeeze=False)
    axes[0][0].plot([h["step"] for h in hist], [h["loss"] for h in hist], marker=".")
    axes[0][0].set(xlabel="step", ylabel="loss", title=f"{report.stage} loss")
    if rewards:
        axes[0][1].plot([h["step"] for h in rewards], [h["reward"] for h in rewards], marker=".", label="reward")
        for key in ("reward/rule", "reward/judge"):
            pts = [h for h in rewards if key in h]
            if pts:
                axes[0][1].plot([h["step"] for h in pts], [h[key] for h in pts], marker=".", label=key.split("/")[1])
        axes[0][1].set(xlabel="step", title="reward")
        axes[0][1].legend()
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=100)
    plt.close(fig)
    tmp = out / f".{REPORT}.partial"
    tmp.write_text(json.dumps(asdict(report), indent=1, default=str))
    tmp.rename(out / REPORT)  # written last: its presence marks a finished run
