"""The model clients every layer shares: an OpenAI-compatible chat endpoint and its errors.

It sits at the bottom beside ``schemas`` (it imports nothing else of trajforge), so LLM
policies (collectors), distillation (pipelines), judge rewards (training) and remote world
models (simulate) all use one client.
"""

from __future__ import annotations

from llm.chat import ChatError, post_chat

__all__ = ["ChatError", "post_chat"]
