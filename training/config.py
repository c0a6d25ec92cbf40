"""The training config (YAML), one per stage, checked before any model or data is loaded.

    stage: sft
    model:
      path: Qwen/Qwen3-0.6B        # a Hugging Face name or a local folder ...
      # init: {hidden_size: 32, ...} # ... or a Qwen3 built from this config, random weights
    release: wm/1                   # NAME/VERSION under STORE/releases
    store: demo-store
    output: runs/sft
    max_length: 4096
    train: {max_steps: 1000, learning_rate: 1.0e-5, per_device_batch_size: 8}

``trajforge train STAGE CONFIG --store --release --output`` override the same keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from schemas.config import StrictConfig as Strict
from schemas.config import load_yaml_model

Stage = Literal["cpt", "sft", "rl"]
RELEASE = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"  # NAME/VERSION: two folder names, no ..
Scheduler = Literal[  # transformers' SchedulerType: a typo fails here, not after the model has loaded
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
]


class ModelSpec(Strict):
    path: str | None = None  # Hugging Face causal LM: hub name (cached) or local folder
    init: dict[str, Any] | None = None  # Qwen3Config keys: a new model with random weights (tests, GPU checks)
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = "auto"

    @model_validator(mode="after")
    def _one(self) -> ModelSpec:
        if (self.path is None) == (self.init is None):
            raise ValueError("give exactly one of model.path (a checkpoint) and model.init (a config for new weights)")
        for key, value in (self.init or {}).items():  # sizes and counts: a 0 or -1 would fail deep inside torch
            if (
                key.endswith(("_size", "_dim", "_layers", "_heads", "_embeddings"))
                and not key.startswith(("tie_", "use_"))
                and (isinstance(value, bool) or not isinstance(value, int) or value < 1)
            ):
                raise ValueError(f"init.{key} must be a positive integer, got {value!r}")
        return self


class Optim(Strict):
    max_steps: int = Field(-1, ge=-1)  # -1: run num_epochs
    num_epochs: float = Field(1.0, gt=0)
    learning_rate: float = Field(1e-5, gt=0, lt=1e3)
    warmup_ratio: float = Field(0.03, ge=0, lt=1)
    lr_scheduler: Scheduler = "cosine"
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    per_device_batch_size: int = Field(1, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    gradient_checkpointing: bool = False
    bf16: Literal["auto", True, False] = "auto"  # auto: bf16 on a CUDA GPU, fp32 on the CPU
    save_steps: int = Field(100, ge=1)  # a checkpoint every N steps; a rerun resumes from the last one
    save_total_limit: int | None = Field(3, ge=1)
    logging_steps: int = Field(10, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _steps(self) -> Optim:
        if self.save_steps % self.logging_steps:
            # the NaN check runs on logged losses: a checkpoint between two logs could hold NaN weights
            raise ValueError(f"save_steps ({self.save_steps}) must be a multiple of logging_steps ({self.logging_steps})")
        return self


class Judge(Strict):
    """An LLM judge through an OpenAI-compatible endpoint (AgentWorldBench's five dimensions)."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(60.0, gt=0)
    retries: int = Field(2, ge=0)
    concurrency: int = Field(8, ge=1)


class RewardWeights(Strict):
    rule: float = Field(1.0, ge=0)
    judge: float = Field(0.0, ge=0)


class RL(Strict):
    num_generations: int = Field(4, ge=2)
    max_completion_length: int = Field(512, ge=1)
    temperature: float = Field(1.0, gt=0)
    epsilon: float = Field(3e-4, gt=0)  # GSPO's sequence-level clip range (the paper's 3e-4 and 4e-4)
    epsilon_high: float = Field(4e-4, gt=0)
    weights: RewardWeights = RewardWeights()
    judge: Judge | None = None

    @model_validator(mode="after")
    def _judge(self) -> RL:
        if self.weights.judge > 0 and self.judge is None:
            raise ValueError("weights.judge > 0 needs a judge: {base_url, model}")
        if self.weights.rule + self.weights.judge <= 0:
            raise ValueError("reward weights sum to 0")
        return self


class EvalSpec(Strict):
    max_samples: int = Field(200, ge=1)  # per domain
    max_new_tokens: int = Field(512, ge=1)
    rollout_steps: int = Field(3, ge=1)  # open-loop depth K
    rollouts: int = Field(20, ge=0)  # trajectories rolled open-loop, per domain


class TrainConfig(Strict):
    stage: Stage
    model: ModelSpec
    tokenizer: str | None = None  # default: the model's; with model.init: STORE/tokenizer.json
    release: str | None = Field(None, pattern=RELEASE)
    store: str | None = None
    output: str | None = None
    split: Literal["train", "validation", "test"] = "train"
    max_length: int = Field(2048, ge=16)  # CPT: packed sequence length; SFT: longer samples are left out, not cut
    packing: bool = True  # best-fit-decreasing packing, no attention across samples
    max_samples: int | None = Field(None, ge=1)  # take the first N samples (smoke runs)
    streaming: bool = False  # read the release as an IterableDataset (needs train.max_steps)
    train: Optim = Optim()
    rl: RL = RL()
    eval: EvalSpec = EvalSpec()

    @model_validator(mode="after")
    def _checks(self) -> TrainConfig:
        if self.streaming and self.train.max_steps < 1:
            raise ValueError("streaming needs train.max_steps (an iterable dataset has no length)")
        return self

    def override(self, **flags: Any) -> TrainConfig:
        """The command line's --store/--release/--output/--model win over the file (and are checked like it)."""
        from pydantic import ValidationError

        from schemas.config import validation_message
        from schemas.errors import ConfigError

        given = {k: v for k, v in flags.items() if v is not None}
        try:
            return TrainConfig.model_validate({**self.model_dump(), **given})
        except ValidationError as exc:
            raise ConfigError(f"--{validation_message(exc, show_input=True)}") from None

    def missing(self) -> list[str]:
        return [k for k in ("release", "store", "output") if getattr(self, k) is None]


def load_train_config(path: str | Path, stage: str | None = None) -> TrainConfig:
    cfg = load_yaml_model(path, TrainConfig, "training config", show_input=True)
    if stage is not None and cfg.stage != stage:
        from schemas.errors import ConfigError

        raise ConfigError(f"{path}: stage: this config is for {cfg.stage}, not {stage}")
    return cfg
