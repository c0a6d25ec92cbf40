"""Token counts with a real Hugging Face tokenizer (``tokenizer.json``), and a small
byte-level BPE trained from a store's texts for machines without downloads.

    counter = load_tokenizer("tokenizer.json")   # or the folder that holds it
    counter.count(["ls -la", "total 0"])          # [3, 2]
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from schemas.errors import ConfigError, MissingExtraError


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
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)  # fmt: skip
    tok.train_from_iterator(texts, trainer=trainer)
    path = Path(out)
    file = path / "tokenizer.json" if path.suffix != ".json" else path
    file.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(file))
    return str(file)
