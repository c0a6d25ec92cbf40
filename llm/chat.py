"""OpenAI-compatible ``/chat/completions`` clients with bounded retries (vLLM, SGLang,
hosted APIs).

- ``post_chat``: one blocking POST, retried on 408/409/429/5xx and connection errors with
  exponential backoff, then one ``ChatError`` naming the endpoint and the last problem.
- ``AsyncChat``: the official ``openai`` async client on one sized connection pool, for
  many episodes in flight. Its own retries are off: ours wait ``Retry-After`` when the
  server names it, else a jittered exponential backoff, and count every retry, so each
  step records what it cost. A context-length error (``ContextLengthError``) and a spent
  budget or refused key (``PolicyError``) are never retried; whatever is still failing
  after the retries is a ``ChatError``, an infrastructure failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from schemas.errors import ConfigError, TrajforgeError


class ChatError(TrajforgeError):
    """The chat endpoint failed after retries (an infrastructure failure)."""


class ContextLengthError(TrajforgeError):
    """The prompt no longer fits the model's context: the episode ends, never retried."""


class PolicyError(TrajforgeError):
    """The endpoint refused the request for good (a budget spent, a bad key, a bad request)."""


def post_chat(
    base_url: str, body: dict[str, Any], *, api_key: str = "", retries: int = 4, timeout_s: float = 60.0
) -> dict[str, Any]:
    """POST to an OpenAI-compatible ``/chat/completions``; retries 408/409/429/5xx and
    connection errors with exponential backoff, then raises ``ChatError``."""
    import requests

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    delay = 0.5
    for attempt in range(retries + 1):
        try:
            resp = requests.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=timeout_s)
            if resp.status_code == 200:
                return resp.json()
            retryable = resp.status_code in (408, 409, 429) or resp.status_code >= 500
            problem = f"HTTP {resp.status_code}: {resp.text[:200]}"
        except requests.RequestException as exc:
            retryable, problem = True, f"{type(exc).__name__}: {exc}"
        if not retryable or attempt == retries:
            raise ChatError(f"{base_url}: {problem}")
        time.sleep(delay)
        delay = min(delay * 2, 8.0)
    raise ChatError(f"{base_url}: no answer")


@dataclass(frozen=True)
class ChatReply:
    """One completion and what it cost: tokens (as the server counted them), seconds from
    the first try to the answer, and how many tries failed before it."""

    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    retries: int
    finish_reason: str | None = None


_CONTEXT_CODES = ("context_length_exceeded", "string_above_max_length")
_CONTEXT_WORDS = ("maximum context length", "context length", "too many tokens", "prompt is too long")


def retry_after(headers: Any) -> float | None:
    """Seconds a ``Retry-After`` (or ``retry-after-ms``) header asks for: a number or an HTTP date."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        with contextlib.suppress(ValueError):
            return max(0.0, float(ms) / 1000)
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    with contextlib.suppress(TypeError, ValueError, IndexError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return None


class AsyncChat:
    """``POST /chat/completions`` from many coroutines over one connection pool of
    ``max_connections``; ``retries`` tries after the first, each after ``Retry-After`` or
    a jittered backoff (``base_delay_s`` doubling to ``max_delay_s``)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str = "",
        max_connections: int = 64,
        retries: int = 4,
        timeout_s: float = 60.0,
        base_delay_s: float = 0.5,
        max_delay_s: float = 8.0,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise ConfigError("LLM policies need the openai client: pip install 'trajforge[llm]'") from None

        self.base_url, self.retries, self.timeout_s = base_url.rstrip("/"), retries, timeout_s
        self.base_delay_s, self.max_delay_s = base_delay_s, max_delay_s
        limits = {"max_connections": max_connections, "max_keepalive_connections": max_connections}
        self._openai = openai
        from openai.types.chat import ChatCompletion

        self._completion = ChatCompletion
        self.client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or "none",
            max_retries=0,
            timeout=timeout_s,
            http_client=openai.DefaultAsyncHttpxClient(limits=_limits(**limits), timeout=timeout_s),
        )

    async def complete(self, body: dict[str, Any]) -> ChatReply:
        openai = self._openai
        t0 = time.monotonic()
        delay = self.base_delay_s
        problem = "no answer"
        for attempt in range(self.retries + 1):
            wait: float | None = None
            try:
                # the client's own request path, without ``create``'s recursive transform of the
                # body (a plain JSON object already): that transform was 60% of a call's CPU and
                # grows with the history
                reply = await self.client.post("/chat/completions", body=body, cast_to=self._completion)
                return _reply(reply, (time.monotonic() - t0) * 1000, attempt)
            except openai.APIStatusError as exc:
                problem = f"HTTP {exc.status_code}: {_body_text(exc)}"
                code = _error_code(exc)
                if exc.status_code in (400, 413, 422) and _is_context_error(code, problem):
                    raise ContextLengthError(f"{self.base_url}: {problem}") from None
                if code == "insufficient_quota" or exc.status_code in (401, 402, 403):
                    raise PolicyError(f"{self.base_url}: {problem}") from None
                if not (exc.status_code in (408, 409, 429) or exc.status_code >= 500):
                    raise PolicyError(f"{self.base_url}: {problem}") from None
                wait = retry_after(exc.response.headers)
            except openai.APIConnectionError as exc:  # timeouts, resets, refused connections
                problem = f"{type(exc).__name__}: {exc.__cause__ or exc}"
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a 200 that is no completion
                raise PolicyError(f"{self.base_url}: not a chat completion ({type(exc).__name__}: {exc})") from None
            if attempt == self.retries:
                break
            if wait is None:
                wait = random.uniform(0.5, 1.0) * delay  # jitter: retries of many episodes do not march together
                delay = min(delay * 2, self.max_delay_s)
            await _sleep(min(wait, 60.0))
        raise ChatError(f"{self.base_url}: {problem} (after {self.retries + 1} tries)")

    async def aclose(self) -> None:
        await self.client.close()


_sleep = asyncio.sleep  # the retries' waits (a test records them)


def _limits(**kw: int) -> Any:
    import httpx2

    return httpx2.Limits(**kw)


def _body_text(exc: Any) -> str:
    with contextlib.suppress(Exception):
        return exc.response.text[:200]
    return str(exc)[:200]


def _error_code(exc: Any) -> str | None:
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    error = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
    code = error.get("code") or getattr(exc, "code", None)
    return code if isinstance(code, str) else None


def _is_context_error(code: str | None, text: str) -> bool:
    return code in _CONTEXT_CODES or any(w in text.lower() for w in _CONTEXT_WORDS)


def _reply(reply: Any, latency_ms: float, retries: int) -> ChatReply:
    choice = reply.choices[0]
    usage = reply.usage
    message = choice.message.model_dump(exclude_none=True)
    return ChatReply(
        message,
        int(getattr(usage, "prompt_tokens", 0) or 0),
        int(getattr(usage, "completion_tokens", 0) or 0),
        latency_ms,
        retries,
        choice.finish_reason,
    )


__all__ = ["AsyncChat", "ChatError", "ChatReply", "ContextLengthError", "PolicyError", "post_chat", "retry_after"]
