"""What a training run loads: the release's files for a stage and split (Hugging Face
``datasets``, Parquet layout), the tokenizer and the model. Every check that can fail
runs here, before any training starts, and fails with one line naming what is wrong.

- A ``tokenizer.json`` alone (the one a store trains with ``trajforge tokenizer train``)
  becomes a ``PreTrainedTokenizerFast`` with a ChatML template (``<|im_start|>``/
  ``<|im_end|>``, Qwen's); a tokenizer folder or hub name loads with ``AutoTokenizer``.
  A release ships the same tokenizer (``pipelines.release.tokens.ship_tokenizer``): loaded
  from the release folder it renders the samples exactly as this does.
- ``model.init`` builds a Qwen3 of that size with random weights (nothing to download);
  ``model.path`` loads any causal LM with ``AutoModelForCausalLM``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.release.tokens import CHATML, EOS_TOKEN, PAD_TOKEN  # the one template: releases ship it too
from schemas.errors import ConfigError, MissingExtraError, TrainingError
from training.config import ModelSpec, TrainConfig

if TYPE_CHECKING:
    from pipelines.store import Store

# A tiny Qwen3 (the architecture of the user's reference model) unless model.init says otherwise.
TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
}
COLUMNS = {
    "cpt": ["text"],
    "sft": ["prompt", "completion"],
    "rl": ["prompt", "ground_truth", "format", "domain", "volatile_spans"],
}


def need(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(module, "train") from None


@dataclass(frozen=True)
class Release:
    """A release opened for training: the files of one stage and split, checked against
    its manifest (``pipelines.release.manifest``) before anything reads them."""

    root: Path
    manifest_sha256: str
    tokenizer_sha256: str | None
    checked: dict[tuple[str, str], list[str]]

    def files(self, stage: str, split: str) -> list[str]:
        if (stage, split) not in self.checked:
            raise TrainingError(f"{self.root}: the {stage} {split} files were not opened with open_release")
        return self.checked[(stage, split)]


def release_stages(store: Store | str, release: str, split: str) -> list[str]:
    """The stages of release ``NAME/VERSION`` that have this split, from its manifest."""
    from pipelines.release import manifest

    rel = manifest.open_release(manifest.in_store(store, release))
    return sorted({f.stage for f in rel.manifest.files if f.stage and f.split == split})


def open_release(store: Store | str, release: str, stage: str, split: str) -> Release:
    """Release ``NAME/VERSION`` of a store, its ``stage``/``split`` files hashed against the
    manifest (a changed, missing or extra file is a one-line ShardError naming it)."""
    from pipelines.release import manifest

    rel = manifest.open_release(manifest.in_store(store, release))
    entries = rel.entries(stage, split)
    if not entries:
        have = rel.stages()
        what = f"no {split!r} split of stage {stage!r}" if stage in have else f"no {stage!r} stage"
        raise TrainingError(f"{rel.sfs.uri()}: release has {what} (stages: {', '.join(have) or 'none'})")
    return Release(Path(rel.root), rel.manifest_sha256, rel.manifest.tokenizer_sha256, {(stage, split): rel.check(entries)})


def load_split(
    rel: Release,
    stage: str,
    split: str,
    *,
    streaming: bool = False,
    max_samples: int | None = None,
    columns: list[str] | None = None,
):
    datasets = need("datasets")
    ds = datasets.load_dataset("parquet", data_files={split: rel.files(stage, split)}, split=split, streaming=streaming)
    if max_samples is not None:
        ds = ds.take(max_samples) if streaming else ds.select(range(min(max_samples, len(ds))))
    return ds.select_columns(columns or COLUMNS[stage])


def _tokenizer_file(path: str) -> Path | None:
    """A bare tokenizer.json (or a folder holding one without a tokenizer_config.json)."""
    p = Path(path)
    if p.is_file() and p.suffix == ".json":
        return p
    if p.is_dir() and (p / "tokenizer.json").is_file() and not (p / "tokenizer_config.json").is_file():
        return p / "tokenizer.json"
    return None


def tokenizer_source(cfg: TrainConfig) -> tuple[str, Path | None]:
    """Where the tokenizer comes from, and the bare ``tokenizer.json`` when it is one."""
    path = cfg.tokenizer or cfg.model.path or str(Path(cfg.store or ".", "tokenizer.json"))
    return path, _tokenizer_file(path)


def load_tokenizer(cfg: TrainConfig):
    transformers = need("transformers")
    path, bare = tokenizer_source(cfg)
    try:
        if bare is not None:
            tok = transformers.PreTrainedTokenizerFast(
                tokenizer_file=str(bare), eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, bos_token=None
            )
        else:
            tok = transformers.AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # transformers raises OSError, ValueError, HF hub errors...
        raise ConfigError(f"tokenizer: {path}: cannot load ({_first_line(exc)})") from None
    if not tok.chat_template:
        tok.chat_template = CHATML
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def attn_implementation(spec: ModelSpec) -> str:
    if spec.attn_implementation != "auto":
        return spec.attn_implementation
    import torch

    # variable-length FlashAttention where it is installed; else SDPA, with the block-diagonal mask that
    # transformers derives from position ids restarting at 0 (no attention across packed samples)
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def check_model(spec: ModelSpec) -> None:
    """A model path must hold (or name) a causal LM config: read only its config, not its weights."""
    if spec.path is None:
        return
    transformers = need("transformers")
    try:
        config = transformers.AutoConfig.from_pretrained(spec.path)
    except Exception as exc:
        raise ConfigError(f"model.path: {spec.path}: cannot load a causal LM ({_first_line(exc)})") from None
    if type(config) not in transformers.AutoModelForCausalLM._model_mapping:
        raise ConfigError(f"model.path: {spec.path}: {config.model_type!r} is not a causal language model")


def load_model(spec: ModelSpec, tokenizer, *, dtype=None):
    transformers = need("transformers")
    attn = attn_implementation(spec)
    if spec.init is not None:
        try:
            config = transformers.Qwen3Config(
                **{
                    **TINY,
                    **spec.init,
                    "vocab_size": len(tokenizer),
                    "eos_token_id": tokenizer.eos_token_id,
                    "pad_token_id": tokenizer.pad_token_id,
                }
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"model.init: not a Qwen3 config ({_first_line(exc)})") from None
        config._attn_implementation = attn
        model = transformers.Qwen3ForCausalLM(config)
        return model.to(dtype) if dtype is not None else model
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(spec.path, dtype=dtype or "auto", attn_implementation=attn)
    except Exception as exc:
        raise ConfigError(f"model.path: {spec.path}: cannot load a causal LM ({_first_line(exc)})") from None
    if model.get_input_embeddings().num_embeddings < len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    return model
