"""An OpenAI-compatible ``/chat/completions`` client with bounded retries (vLLM, SGLang,
hosted APIs): one POST, retried on 408/409/429/5xx and connection errors with exponential
backoff, then one ``ChatError`` naming the endpoint and the last problem."""

from __future__ import annotations

import time
from typing import Any

from schemas.errors import TrajforgeError


class ChatError(TrajforgeError):
    """The chat endpoint failed after retries."""


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


__all__ = ["ChatError", "post_chat"]
