"""Training samples of a language world model from one curated trajectory (plain functions).

- **CPT**: one document per trajectory, in a layout close to AgentWorldBench's::

      # Environment: terminal (bash)
      <what the environment is>

      ## Task
      <instruction>

      ## Initial State
      <state of step 0>

      ### Turn 1
      **Action:**
      <canonical action>

      **Environment Observation:**
      <next state>

  A trajectory longer than ``context_tokens`` is split at turn boundaries; each later
  part starts with the header and ``## Current State (before turn k)``.
- **SFT**: the model plays the environment. ``prompt`` = system message for the domain,
  then one user message per agent action and one assistant message per observation
  (history), then the current action; ``completion`` = the next state inside
  ``<predicted_observation>...</predicted_observation>`` (after a reasoning text, when a
  distillation job wrote one). The first user message holds the task and the state the
  kept history starts from; history that does not fit ``max_prompt_tokens`` is dropped
  oldest first and the number dropped is recorded.
- **RL**: the SFT prompt plus ``ground_truth``, ``format`` and ``volatile_spans`` for
  rule and rubric rewards.

Steps that curation marked ``exclude_as_target`` (repeats of a kept step, empty or
error-only results) give no SFT or RL sample; they stay in other samples' history.
Token counts: CPT documents are counted whole; SFT and RL count each message's content
(the chat template's own tokens are not included).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.release.config import MixtureConfig
from pipelines.release.tokens import TokenCounter
from schemas.transition import Transition

ENVIRONMENTS = {
    "terminal": "A Linux terminal running bash. An observation is the output of the command followed by the prompt "
    "line `[exit N] CWD$`.",
    "swe": "A software repository with tools to view, search and edit files and to run tests. An observation is "
    "the tool's result.",
    "web": "A web browser. An observation is the accessibility tree of the page.",
    "os": "A Linux desktop. An observation is the accessibility tree of the open windows.",
    "android": "An Android phone. An observation is the screen's UI hierarchy (UIAutomator XML).",
    "mcp": "A server of MCP tools. An observation is the JSON result of the tool call.",
    "search": "A search engine. An observation is a page of results.",
}
OPEN, CLOSE = "<predicted_observation>", "</predicted_observation>"


def system_prompt(domain: str, env_id: str) -> str:
    return (
        f"You are a world model of this environment: {ENVIRONMENTS[domain]} (environment: {env_id})\n"
        "Given the task, the interaction so far and the agent's next action, predict the environment's next "
        f"observation exactly as the environment would show it, inside {OPEN}{CLOSE}."
    )


def sample_id(*parts: Any) -> str:
    return hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=12).hexdigest()


def wrap(observation: str, reasoning: str | None = None) -> str:
    body = f"{OPEN}\n{observation}\n{CLOSE}"
    return f"{reasoning.strip()}\n{body}" if reasoning else body


def unwrap(completion: str) -> str:
    """The observation inside the tags (the whole text when there are none)."""
    start = completion.find(OPEN)
    end = completion.rfind(CLOSE)
    if start < 0 or end < start:
        return completion
    body = completion[start + len(OPEN) : end]
    return body.removeprefix("\n").removesuffix("\n")  # wrap() adds exactly one of each


@dataclass(frozen=True)
class Trajectory:
    """One curated trajectory: its steps in order and which of them are not targets."""

    steps: Sequence[Transition]
    excluded: frozenset[str]  # transition ids marked exclude_as_target
    curation_id: str
    reasoning: dict[str, str]  # transition id -> reasoning text (distillation), may be empty

    @property
    def first(self) -> Transition:
        return self.steps[0]

    def meta(self) -> dict[str, Any]:
        t = self.first
        return {"domain": t.domain, "env_id": t.env_id, "task_id": t.task_id, "trajectory_id": t.trajectory_id,
                "curation_id": self.curation_id}  # fmt: skip


def _header(t: Transition) -> str:
    return f"# Environment: {t.domain} ({t.env_id})\n{ENVIRONMENTS[t.domain]}\n\n## Task\n{t.instruction or '(none)'}"


def _turn(k: int, t: Transition) -> str:
    return f"### Turn {k}\n**Action:**\n{t.action.canonical}\n\n**Environment Observation:**\n{t.next_state.text}"


def cpt_documents(traj: Trajectory, tokens: TokenCounter, context_tokens: int) -> list[dict[str, Any]]:
    steps = traj.steps
    header = _header(traj.first)
    turns = [_turn(i + 1, t) for i, t in enumerate(steps)]
    starts = ["## Initial State\n" + steps[0].state.text] + [
        f"## Current State (before turn {i + 1})\n{t.state.text}" for i, t in enumerate(steps) if i > 0
    ]
    n_header, *rest = tokens.count([header, *starts, *turns])
    n_start, n_turn = rest[: len(starts)], rest[len(starts) :]
    docs, first = [], 0
    used = n_header + n_start[0]
    for i in range(len(steps)):
        if i > first and used + n_turn[i] > context_tokens:
            docs.append((first, i))
            first, used = i, n_header + n_start[i]
        used += n_turn[i]
    docs.append((first, len(steps)))
    texts = ["\n\n".join([header, starts[a], *turns[a:b]]) for a, b in docs]
    counts = tokens.count(texts)
    meta = traj.meta()
    return [
        {"id": sample_id("cpt", meta["trajectory_id"], k), "text": text, "tokens": n, "part": k, "parts": len(docs),
         "first_turn": a + 1, "last_turn": b, **meta}
        for k, ((a, b), text, n) in enumerate(zip(docs, texts, counts, strict=True))
    ]  # fmt: skip


def _user_first(t: Transition, state_text: str, dropped: int) -> str:
    note = f"({dropped} earlier turns omitted)\n\n" if dropped else ""
    return f"## Task\n{t.instruction or '(none)'}\n\n{note}## Current State\n{state_text}\n\n## Action\n{t.action.canonical}"


def _user(t: Transition) -> str:
    return f"## Action\n{t.action.canonical}"


def prompts(traj: Trajectory, tokens: TokenCounter, max_prompt_tokens: int) -> list[dict[str, Any]]:
    """One prompt per target step: messages, token counts, history kept and dropped."""
    from itertools import accumulate

    steps = traj.steps
    first = traj.first
    system = system_prompt(first.domain, first.env_id)
    users = [_user(t) for t in steps]
    observations = [wrap(t.next_state.text) for t in steps]
    n = len(steps)
    counts = tokens.count([system, *users, *observations])
    n_sys, n_obs = counts[0], counts[n + 1 : 2 * n + 1]
    users_upto = [0, *accumulate(counts[1 : n + 1])]  # tokens of users[:i]
    obs_upto = [0, *accumulate(n_obs)]
    first: dict[int, int] = {}  # tokens of the opening message when history starts at turn j (counted when needed)

    def size(j: int, k: int) -> int:  # history from turn j to the action of step k
        if j not in first:
            first[j] = tokens.count([_user_first(steps[j], steps[j].state.text, 0)])[0]
        return n_sys + first[j] + users_upto[k + 1] - users_upto[j + 1] + obs_upto[k] - obs_upto[j]

    out = []
    for k, t in enumerate(steps):
        if t.transition_id in traj.excluded:
            continue
        j = 0  # the first kept turn: drop the oldest while the prompt does not fit
        while j < k and size(j, k) > max_prompt_tokens:
            j += 1
        opening = _user_first(steps[j], steps[j].state.text, j)
        prompt_tokens = size(j, k) if not j else size(j, k) - first[j] + tokens.count([opening])[0]
        messages = [{"role": "system", "content": system}, {"role": "user", "content": opening}]
        for i in range(j, k):
            messages.append({"role": "assistant", "content": observations[i]})
            messages.append({"role": "user", "content": users[i + 1]})
        out.append({"step": k, "messages": messages, "prompt_tokens": prompt_tokens, "history_turns": k - j,
                    "dropped_turns": j, "total_turns": n, "transition": t, "next_tokens": n_obs[k]})  # fmt: skip
    return out


def sft_samples(traj: Trajectory, tokens: TokenCounter, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    reasoning = [traj.reasoning.get(p["transition"].transition_id) for p in items]
    completions = [wrap(p["transition"].next_state.text, r) for p, r in zip(items, reasoning, strict=True)]
    recount = [i for i, r in enumerate(reasoning) if r]  # without reasoning the completion is a counted observation
    n_completion = [p["next_tokens"] for p in items]
    for i, n in zip(recount, tokens.count([completions[i] for i in recount]), strict=True):
        n_completion[i] = n
    meta = traj.meta()
    return [
        {"id": sample_id("sft", p["transition"].transition_id), "prompt": p["messages"],
         "completion": [{"role": "assistant", "content": c}], "tokens": p["prompt_tokens"] + nc,
         "prompt_tokens": p["prompt_tokens"], "completion_tokens": nc, "history_turns": p["history_turns"],
         "dropped_turns": p["dropped_turns"], "has_reasoning": p["transition"].transition_id in traj.reasoning,
         "step": p["step"], "total_turns": p["total_turns"], "transition_id": p["transition"].transition_id, **meta}
        for p, c, nc in zip(items, completions, n_completion, strict=True)
    ]  # fmt: skip


def rl_samples(traj: Trajectory, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    meta = traj.meta()
    return [
        {"id": sample_id("rl", p["transition"].transition_id), "prompt": p["messages"],
         "ground_truth": p["transition"].next_state.text, "format": p["transition"].next_state.format,
         "volatile_spans": [{"start": s.start, "end": s.end, "kind": s.kind} for s in p["transition"].next_state.volatile_spans],
         "tokens": p["prompt_tokens"], "history_turns": p["history_turns"], "dropped_turns": p["dropped_turns"],
         "step": p["step"], "total_turns": p["total_turns"], "transition_id": p["transition"].transition_id, **meta}
        for p in items
    ]  # fmt: skip


def build_samples(traj: Trajectory, tokens: TokenCounter, cfg: MixtureConfig) -> dict[str, list[dict[str, Any]]]:
    out, made = {}, {}  # prompts are built once per history budget (SFT and RL usually share one)
    for stage in cfg.enabled():
        s = cfg.stages[stage]
        if stage == "cpt":
            out[stage] = cpt_documents(traj, tokens, s.context_tokens)
            continue
        if s.max_prompt_tokens not in made:
            made[s.max_prompt_tokens] = prompts(traj, tokens, s.max_prompt_tokens)
        items = made[s.max_prompt_tokens]
        out[stage] = sft_samples(traj, tokens, items) if stage == "sft" else rl_samples(traj, items)
    return out
