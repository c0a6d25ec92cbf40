"""Token counts with a real Hugging Face tokenizer (``tokenizer.json``), and a small
byte-level BPE trained from a store's texts for machines without downloads.

    counter = load_tokenizer("tokenizer.json")   # or the folder that holds it
    counter.count(["ls -la", "total 0"])          # [3, 2]

It also owns the chat template that SFT samples are rendered with (:data:`CHATML`), one
for the release and for training, and :func:`ship_tokenizer`, which puts the tokenizer in a
release folder so that ``AutoTokenizer.from_pretrained(<release>)`` renders the samples as
trajforge's training does.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from schemas.errors import ConfigError, MissingExtraError, one_line

# Qwen's ChatML layout: every message closed by <|im_end|> (the EOS) and a newline.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
EOS_TOKEN, PAD_TOKEN = "<|im_end|>", "<|endoftext|>"  # no BOS: ChatML starts each message with <|im_start|>
MODEL_MAX_LENGTH = 131_072  # the tokenizer's own limit (Qwen3's); a release's limits are its stages' max_tokens


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise MissingExtraError("token counts need the tokenizers package: pip install 'trajforge[release]'") from None
    return tokenizers


class TokenCounter:
    def __init__(self, path: str) -> None:
        tokenizers = _tokenizers()
        file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
        if not file.is_file():
            raise ConfigError(f"tokenizer: {path}: no tokenizer.json there")
        try:
            self.tokenizer = tokenizers.Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises plain Exceptions for bad files
            raise ConfigError(f"tokenizer: {file}: cannot load ({str(exc).splitlines()[0][:120]})") from None
        self.path = str(file)

    def count(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]


def load_tokenizer(path: str) -> TokenCounter:
    return TokenCounter(path)


def tokenizer_hash(path: str) -> str:
    """The tokenizer's identity in a release's manifest and input hash: its file's sha256, 16 digits."""
    return hashlib.sha256(Path(load_tokenizer(path).path).read_bytes()).hexdigest()[:16]


class PieceCounts:
    """Token counts of text pieces: each distinct piece is tokenized once (observations
    repeat as the next step's state, template lines repeat everywhere), misses in one
    batch. A sample's count is the sum of its pieces' counts."""

    def __init__(self, counter: TokenCounter, max_entries: int = 50_000) -> None:
        self.counter, self.max_entries = counter, max_entries
        self.cache: dict[str, int] = {}

    def warm(self, pieces) -> None:
        pieces = list(pieces)
        missing = list(dict.fromkeys(p for p in pieces if p not in self.cache))
        if missing:
            if len(self.cache) + len(missing) > self.max_entries:  # full: start again with just these pieces
                self.cache.clear()
                missing = list(dict.fromkeys(pieces))
            self.cache.update(zip(missing, self.counter.count(missing), strict=True))

    def __call__(self, pieces) -> int:
        pieces = list(pieces)
        self.warm(pieces)
        return sum(self.cache[p] for p in pieces)


def train_tokenizer(texts: Iterable[str], out: str, vocab_size: int = 4096) -> str:
    """Train a byte-level BPE (the GPT-2/Qwen family's kind) on ``texts``; write ``tokenizer.json``."""
    tokenizers = _tokenizers()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    path = Path(out)
    file = path / "tokenizer.json" if path.suffix != ".json" else path
    file.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(file))
    return str(file)


# -- the tokenizer a release ships ---------------------------------------------------------------
HF_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"tokenizer: {path}: unreadable ({one_line(str(exc), 120)})") from None
    if not isinstance(body, dict):
        raise ConfigError(f"tokenizer: {path}: not a JSON object")
    return body


def _write_json(path: Path, body: dict[str, Any]) -> None:
    path.write_text(json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _token(value: Any) -> str | None:
    """A special token as tokenizer_config.json holds it: a string or an AddedToken's fields."""
    value = value.get("content") if isinstance(value, dict) else value
    return value if isinstance(value, str) else None


def ship_tokenizer(source: str, dest: Path) -> dict[str, Any]:
    """Write the mixture's tokenizer into release folder ``dest``, loadable with
    ``transformers.AutoTokenizer.from_pretrained(dest)``; returns what the card states.

    - A bare ``tokenizer.json`` (a file, or a folder without ``tokenizer_config.json``) is
      copied as it is, with ``tokenizer_config.json``, ``special_tokens_map.json`` and
      ``chat_template.jinja`` written for it: ChatML (:data:`CHATML`), EOS ``<|im_end|>``,
      pad ``<|endoftext|>``, no BOS, what ``training.assets.load_tokenizer`` makes of the
      same file. Plain JSON, so releases need no transformers; the same bytes on a rerun.
    - A Hugging Face folder with its own ``tokenizer_config.json`` ships its tokenizer files
      as they are, its chat template with them (ChatML is added only when it has none, as
      training does).
    """
    counter = TokenCounter(source)  # ConfigError for a missing or unreadable tokenizer.json
    src, dest = Path(counter.path), Path(dest)
    config_file = src.parent / "tokenizer_config.json"
    if Path(source).is_dir() and config_file.is_file():
        files = [name for name in HF_FILES if (src.parent / name).is_file()]
        config = _read_json(config_file)
        special = _read_json(src.parent / "special_tokens_map.json") if "special_tokens_map.json" in files else {}
        for name in files:
            shutil.copyfile(src.parent / name, dest / name)
        template = "from the source tokenizer"
        if not (config.get("chat_template") or {"chat_template.jinja", "chat_template.json"} & set(files)):
            (dest / "chat_template.jinja").write_text(CHATML, encoding="utf-8")
            files.append("chat_template.jinja")
            template = "chatml"
        tokens = {k: _token(config.get(k, special.get(k))) for k in ("eos_token", "pad_token", "bos_token")}
    else:
        shutil.copyfile(src, dest / "tokenizer.json")
        tokens = {"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN, "bos_token": None}
        # chat_template both in the config (transformers < 4.47 reads it there) and in its own file (newer ones)
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **tokens,
            "model_max_length": MODEL_MAX_LENGTH,
            "chat_template": CHATML,
            "clean_up_tokenization_spaces": False,
        }
        _write_json(dest / "tokenizer_config.json", config)
        _write_json(dest / "special_tokens_map.json", {k: v for k, v in tokens.items() if v is not None})
        (dest / "chat_template.jinja").write_text(CHATML, encoding="utf-8")
        files = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"]
        template = "chatml"
    return {
        "files": sorted(files),
        "chat_template": template,
        **tokens,
        "sha256": hashlib.sha256((dest / "tokenizer.json").read_bytes()).hexdigest(),
        "vocab_size": counter.tokenizer.get_vocab_size(with_added_tokens=True),
    }
