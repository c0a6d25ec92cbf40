"""Where a simulated step's prediction comes from: a local transformers model, or any
OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, ``trajforge sim serve``).

Both take chat messages (exactly the SFT prompt) and sampling parameters and return the
completion with its token counts. A model is loaded once per process and shared by every
``SimEnv`` of that process (a collection worker runs many episodes).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from pipelines.release.samples import CLOSE
from schemas.errors import ConfigError
from simulate.config import SimSection


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int


class Counter(Protocol):
    def count(self, texts: list[str]) -> list[int]: ...


class Backend(Protocol):
    model_id: str

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        min_new_tokens: int = 0,
    ) -> Completion: ...

    def counter(self) -> Counter: ...


class HFCounter:
    """Token counts with a transformers tokenizer (the model's own)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def count(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []


class CharCounter:
    """An estimate (4 characters a token) for an endpoint whose tokenizer was not given."""

    def count(self, texts: list[str]) -> list[int]:
        return [len(t) // 4 + 1 for t in texts]


class LocalBackend:
    """A causal LM folder (or hub name) run with transformers, on the GPU when there is one.
    Decoding stops at ``</predicted_observation>`` or the end-of-turn token."""

    def __init__(self, model: str) -> None:
        from training.evaluate import Generator

        gen = Generator(model, max_new_tokens=1)  # loads tokenizer and model with the training code's checks
        self._use(gen.model, gen.tok, model)

    @classmethod
    def of(cls, model: Any, tokenizer: Any, model_id: str) -> LocalBackend:
        """A backend over a model already in memory (benchmarks build one from a config)."""
        self = cls.__new__(cls)
        self._use(model, tokenizer, model_id)
        return self

    def _use(self, model: Any, tokenizer: Any, model_id: str) -> None:
        import torch

        self.torch, self.tok, self.model, self.model_id = torch, tokenizer, model, model_id
        self.lock = threading.Lock()  # one generate at a time (sim serve answers from threads)

    def counter(self) -> Counter:
        return HFCounter(self.tok)

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        min_new_tokens: int = 0,
    ) -> Completion:
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        enc = self.tok(text, return_tensors="pt", add_special_tokens=False).to(self.model.device)
        kw: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "pad_token_id": self.tok.pad_token_id,
            "eos_token_id": self.tok.eos_token_id,
        }
        if min_new_tokens:  # benchmarks: a fixed decode length, whatever the model says
            kw["min_new_tokens"] = min_new_tokens
        else:
            kw.update(stop_strings=[CLOSE], tokenizer=self.tok)
        if temperature > 0:
            kw.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with self.lock, self.torch.no_grad():
            if temperature > 0:
                self.torch.manual_seed(seed)
            ids = self.model.generate(**enc, **kw)
        new = ids[0, enc["input_ids"].shape[1] :]
        return Completion(self.tok.decode(new, skip_special_tokens=True), int(enc["input_ids"].shape[1]), int(new.shape[0]))


class OpenAIBackend:
    """Any OpenAI-compatible chat endpoint; retries and errors as the OpenAI policy's."""

    def __init__(
        self, base_url: str, model: str, *, api_key_env: str | None = None, tokenizer: str | None = None, timeout_s: float = 120.0
    ) -> None:
        self.base_url, self.model_id, self.timeout_s = base_url.rstrip("/"), model, timeout_s
        self.api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        self.tokenizer = tokenizer

    def counter(self) -> Counter:
        if self.tokenizer is None:
            return CharCounter()
        from pipelines.release.tokens import load_tokenizer

        return load_tokenizer(self.tokenizer)

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        min_new_tokens: int = 0,
    ) -> Completion:
        from llm.chat import post_chat

        body = {
            "model": self.model_id,
            "messages": messages,
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": max_new_tokens,
            "seed": seed,
        }
        if min_new_tokens:
            body["min_tokens"] = min_new_tokens  # vLLM's extension
        reply = post_chat(self.base_url, body, api_key=self.api_key, timeout_s=self.timeout_s)
        try:
            text = reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            from llm.chat import ChatError

            raise ChatError(f"{self.base_url}: not a chat completion: {str(reply)[:200]}") from None
        usage = reply.get("usage") or {}
        return Completion(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))


class Recording:
    """A backend that passes every request to another and keeps each (messages, sampling):
    to look at what a model was asked, or replay the same prompts elsewhere (benchmarks)."""

    def __init__(self, inner: Backend) -> None:
        self.inner, self.model_id = inner, inner.model_id
        self.calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

    def counter(self) -> Counter:
        return self.inner.counter()

    def complete(self, messages: list[dict[str, str]], **sampling: Any) -> Completion:
        self.calls.append((messages, sampling))
        return self.inner.complete(messages, **sampling)


_BACKENDS: dict[tuple, Backend] = {}
_LOCK = threading.Lock()


def backend_for(options: SimSection) -> Backend:
    """The process's backend for these options (a local model is loaded once)."""
    key = (options.model, options.base_url, options.api_key_env, options.tokenizer, options.timeout_s)
    with _LOCK:
        if key not in _BACKENDS:
            if options.base_url:
                _BACKENDS[key] = OpenAIBackend(
                    options.base_url,
                    options.model,
                    api_key_env=options.api_key_env,
                    tokenizer=options.tokenizer,
                    timeout_s=options.timeout_s,
                )
            else:
                if not os.path.exists(options.model) and "/" not in options.model:
                    raise ConfigError(f"sim.model: {options.model}: no such model folder (or give base_url for an endpoint)")
                _BACKENDS[key] = LocalBackend(options.model)
        return _BACKENDS[key]
