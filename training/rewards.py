"""Rewards for RL of the world model (TRL reward functions), and the LLM judge.

For one completion::

    gate   = 1 if exactly one closed <predicted_observation> block (valid JSON where the
             domain's format is JSON) else 0        -- failing it gives 0, nothing else runs
    rule   = metrics.rule_score(body, ground_truth) -- masked exact match, chrF, JSON F1,
             exit code and cwd (weights in metrics.RULE_WEIGHTS)
    judge  = (mean of the five 1-5 scores - 1) / 4  -- Format, Factuality, Consistency,
             Realism, Quality (AgentWorldBench's dimensions); optional
    reward = gate * (w_rule * rule + w_judge * judge) / (w_rule + w_judge)

When the judge fails on a completion (network, bad JSON after retries) that completion's
reward is its rule score alone and the failure is counted (``reward/judge_failures``);
training never stops for the judge. ``reward/rule_judge_gap`` (judge - rule, mean over
the completions both scored) is logged each step: a gap that keeps growing means the
policy pleases the judge without matching the environment (reward hacking).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from training.config import RL, Judge
from training.metrics import parse_completion, rule_score

DIMENSIONS = ("format", "factuality", "consistency", "realism", "quality")
_JUDGE_SYSTEM = (
    "You grade a world model: a model that predicts what an environment (terminal, code repository, web page, desktop, "
    "phone, tool server, search engine) shows after an agent's action. Compare the PREDICTED observation with the "
    "REAL one the environment produced, given the interaction so far. Score each dimension 1 (bad) to 5 (perfect): "
    "format (the observation's shape and syntax), factuality (facts agree with the real observation), consistency "
    "(agrees with the history and the action), realism (could a real environment print this), quality (overall). "
    'Answer with JSON only: {"format": n, "factuality": n, "consistency": n, "realism": n, "quality": n}.'
)


def _text(completion: Any) -> str:
    """TRL passes conversational completions as message lists, standard ones as strings."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


def _history(prompt: Any, limit: int = 6000) -> str:
    if isinstance(prompt, str):
        return prompt[-limit:]
    text = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in prompt if m["role"] != "system")
    return text[-limit:]


def parse_scores(content: str) -> dict[str, int]:
    """The five scores from a judge's answer (the first JSON object in it); ValueError otherwise."""
    m = re.search(r"\{.*\}", content or "", re.S)
    if not m:
        raise ValueError("no JSON object in the judge's answer")
    raw = json.loads(m.group(0))
    scores = {d: int(raw[d]) for d in DIMENSIONS}
    if not all(1 <= v <= 5 for v in scores.values()):
        raise ValueError(f"scores outside 1-5: {scores}")
    return scores


def judge_normalised(scores: dict[str, int]) -> float:
    return (sum(scores.values()) / len(scores) - 1) / 4


class LLMJudge:
    """Scores predictions through an OpenAI-compatible endpoint, many at once (threads
    under asyncio; the shared ``post_chat`` retries 429/5xx like the chat policy)."""

    def __init__(self, cfg: Judge) -> None:
        self.cfg = cfg
        self.api_key = os.environ.get(cfg.api_key_env, "")
        self.failures = 0
        self._sem: asyncio.Semaphore | None = None

    def _ask(self, prompt: Any, predicted: str, real: str) -> dict[str, int]:
        from llm.chat import post_chat

        user = f"HISTORY AND ACTION:\n{_history(prompt)}\n\nREAL OBSERVATION:\n{real}\n\nPREDICTED OBSERVATION:\n{predicted}"
        body = {
            "model": self.cfg.model,
            "temperature": 0.0,
            "max_tokens": 200,
            "messages": [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}],
        }
        reply = post_chat(self.cfg.base_url, body, api_key=self.api_key, retries=self.cfg.retries, timeout_s=self.cfg.timeout_s)
        return parse_scores(reply["choices"][0]["message"].get("content") or "")

    async def score(self, prompt: Any, predicted: str, real: str) -> dict[str, int] | None:
        """The five scores, or None (counted) when the judge cannot give them."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.cfg.concurrency)
        async with self._sem:
            try:
                return await asyncio.to_thread(self._ask, prompt, predicted, real)
            except Exception:  # any judge failure is data, never a crash of training
                self.failures += 1
                return None

    async def score_many(self, items: Sequence[tuple[Any, str, str]]) -> list[dict[str, int] | None]:
        return await asyncio.gather(*(self.score(*item) for item in items))

    def score_many_sync(self, items: Sequence[tuple[Any, str, str]]) -> list[dict[str, int] | None]:
        """``score_many`` from synchronous code, in a thread of its own (this thread may
        already run an event loop: a notebook, or a Playwright driver)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, self.score_many(items)).result()


def make_reward(cfg: RL):
    """The combined reward as one async TRL reward function (TRL runs it on its event loop)."""
    judge = LLMJudge(cfg.judge) if cfg.judge is not None and cfg.weights.judge > 0 else None
    w_rule, w_judge = cfg.weights.rule, cfg.weights.judge

    async def world_model_reward(
        prompts, completions, ground_truth, format, domain, volatile_spans, log_metric=None, **_: Any
    ) -> list[float]:
        bodies = [parse_completion(_text(c), f or "text") for c, f in zip(completions, format, strict=True)]
        rules = [
            None if b is None else rule_score(b, g, fmt=f or "text", domain=d, spans=s or ())["score"]
            for b, g, f, d, s in zip(bodies, ground_truth, format, domain, volatile_spans, strict=True)
        ]
        judged: list[float | None] = [None] * len(bodies)
        failures_before = judge.failures if judge else 0
        if judge is not None:
            todo = [i for i, b in enumerate(bodies) if b is not None]
            scores = await judge.score_many([(prompts[i], bodies[i], ground_truth[i]) for i in todo])
            for i, s in zip(todo, scores, strict=True):
                judged[i] = None if s is None else judge_normalised(s)
        rewards = []
        for rule, jud in zip(rules, judged, strict=True):
            if rule is None:
                rewards.append(0.0)  # the format gate
            elif jud is None:
                rewards.append(rule)
            else:
                rewards.append((w_rule * rule + w_judge * jud) / (w_rule + w_judge))
        if log_metric is not None:
            passed = [r for r in rules if r is not None]
            log_metric("reward/format_ok", len(passed) / max(len(rules), 1))
            log_metric("reward/rule", sum(passed) / len(passed) if passed else 0.0)
            if judge is not None:
                both = [(j, r) for j, r in zip(judged, rules, strict=True) if j is not None and r is not None]
                log_metric("reward/judge_failures", float(judge.failures - failures_before))
                if both:
                    log_metric("reward/judge", sum(j for j, _ in both) / len(both))
                    log_metric("reward/rule_judge_gap", sum(j - r for j, r in both) / len(both))
        return rewards

    world_model_reward.judge = judge  # type: ignore[attr-defined]  (tests and the report read its failure count)
    return world_model_reward
