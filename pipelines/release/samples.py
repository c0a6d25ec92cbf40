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

**Lengths.** A stage's ``max_tokens`` is a hard limit per sample. SFT and RL samples drop
their oldest history turns (like ``max_prompt_tokens``) until prompt and target fit; the
target is never cut. A sample that cannot fit even without history is dropped and counted
under a reason of :data:`LENGTH_REASONS`; so is a CPT part longer than ``max_tokens`` (a
single turn with its header and state).

**Token counts.** SFT and RL counts are of the chat as training renders it with the ChatML
template (:func:`render_chat`: ``<|im_start|>role\ncontent<|im_end|>\n`` per message):
``tokens`` of an SFT sample is ``len(apply_chat_template(prompt + completion))``, of an RL
sample ``len(apply_chat_template(prompt, add_generation_prompt=True))``; ``prompt_tokens``
and ``completion_tokens`` are the rendered messages' shares. They are exact when the
tokenizer holds ``<|im_start|>`` and ``<|im_end|>`` as added tokens (trajforge's trained
tokenizers and Qwen's do): the tokenizer then splits the text at them, so each message's
``role\ncontent`` is tokenized on its own, and each distinct message is counted once.
With another tokenizer they are off by about a token per message. CPT counts are sums over
a document's pieces (each distinct piece tokenized once): a merge across a piece boundary
can move the true count by about a token per piece (tested within 2%).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipelines.release.config import MixtureConfig
from pipelines.release.tokens import PieceCounts
from schemas.domains import DESCRIPTIONS
from schemas.transition import Transition

ENVIRONMENTS = DESCRIPTIONS  # domain -> what the environment is, from its spec (schemas.domains)
OPEN, CLOSE = "<predicted_observation>", "</predicted_observation>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
LENGTH_REASONS = {
    "target_too_long": "SFT/RL: the target with the system prompt alone is longer than max_tokens",
    "prompt_too_long": "SFT/RL: the prompt without history (task, current state, action) and the target exceed max_tokens",
    "turn_too_long": "CPT: one turn with its header and state is longer than max_tokens",
}


def render_chat(messages: Sequence[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """The text the ChatML template renders (``tokens.CHATML``; tested to match ``apply_chat_template``)."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def _message(role: str, content: str) -> tuple[str, ...]:
    """One rendered message as pieces split where the tokenizer splits it (at its added tokens)."""
    return IM_START, f"{role}\n{content}", IM_END, "\n"


GENERATION_PROMPT = (IM_START, "assistant\n")


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
        return {
            "domain": t.domain,
            "env_id": t.env_id,
            "task_id": t.task_id,
            "trajectory_id": t.trajectory_id,
            "curation_id": self.curation_id,
        }


SEP = "\n\n"


def _header(t: Transition) -> tuple[str, ...]:
    return f"# Environment: {t.domain} ({t.env_id})\n{ENVIRONMENTS[t.domain]}\n\n## Task\n", t.instruction or "(none)"


def _start(i: int, t: Transition) -> tuple[str, ...]:
    return ("## Initial State\n" if i == 0 else f"## Current State (before turn {i + 1})\n"), t.state.text


def _turn(i: int, t: Transition) -> tuple[str, ...]:
    return f"### Turn {i + 1}\n**Action:**\n", t.action.canonical, "\n\n**Environment Observation:**\n", t.next_state.text


def _observations(t: Transition) -> tuple[str, ...]:
    return f"{OPEN}\n", t.next_state.text, f"\n{CLOSE}"


def _user(t: Transition) -> tuple[str, ...]:
    return "## Action\n", t.action.canonical


def _user_first(t: Transition, dropped: int) -> tuple[str, ...]:
    note = (f"({dropped} earlier turns omitted)\n\n",) if dropped else ()
    return (
        "## Task\n",
        t.instruction or "(none)",
        "\n\n",
        *note,
        "## Current State\n",
        t.state.text,
        "\n\n## Action\n",
        t.action.canonical,
    )


def _warm(traj: Trajectory, tokens: PieceCounts) -> None:
    """Count a trajectory's texts in one batch: each observation once."""
    tokens.warm([p for t in traj.steps for p in (t.state.text, t.next_state.text, t.action.canonical)])


def cpt_documents(
    traj: Trajectory, tokens: PieceCounts, context_tokens: int, max_tokens: int | None = None, drops: Counter | None = None
) -> list[dict[str, Any]]:
    steps = traj.steps
    _warm(traj, tokens)
    header = _header(traj.first)
    n_header, n_sep = tokens(header), tokens([SEP])
    n_start = [tokens(_start(i, t)) + n_sep for i, t in enumerate(steps)]
    n_turn = [tokens(_turn(i, t)) + n_sep for i, t in enumerate(steps)]
    docs, first = [], 0
    used = n_header + n_start[0]
    for i in range(len(steps)):
        if i > first and used + n_turn[i] > context_tokens:
            docs.append((first, i))
            first, used = i, n_header + n_start[i]
        used += n_turn[i]
    docs.append((first, len(steps)))
    meta = traj.meta()
    out = []
    for k, (a, b) in enumerate(docs):
        n = n_header + n_start[a] + sum(n_turn[a:b])
        if max_tokens is not None and n > max_tokens:  # one turn alone past the limit: a part too long to train on
            if drops is not None:
                drops["turn_too_long"] += 1
            continue
        text = SEP.join(["".join(header), "".join(_start(a, steps[a])), *("".join(_turn(i, steps[i])) for i in range(a, b))])
        out.append(
            {
                "id": sample_id("cpt", meta["trajectory_id"], k),
                "text": text,
                "tokens": n,
                "part": k,
                "parts": len(docs),
                "first_turn": a + 1,
                "last_turn": b,
                **meta,
            }
        )
    return out


def prompts(
    traj: Trajectory,
    tokens: PieceCounts,
    max_prompt_tokens: int,
    max_tokens: int | None = None,
    target: Callable[[int], int] | None = None,
    drops: Counter | None = None,
) -> list[dict[str, Any]]:
    """One prompt per target step: messages, rendered token counts, history kept and dropped.

    History is dropped oldest first while the prompt is over ``max_prompt_tokens`` or the
    prompt and the target (``target(step)`` rendered tokens; default: the observation
    wrapped) are over ``max_tokens``. A step that does not fit ``max_tokens`` even without
    history gives no prompt and is counted in ``drops`` under its reason."""
    from itertools import accumulate

    steps = traj.steps
    system = system_prompt(traj.first.domain, traj.first.env_id)
    tokens.warm(
        [
            p
            for t in steps
            for role, text in (("assistant", "".join(_observations(t))), ("user", "".join(_user(t))))
            for p in _message(role, text)
        ]
    )  # one batch for the trajectory's messages
    n_sys = tokens(_message("system", system))
    n_obs = [tokens(_message("assistant", "".join(_observations(t)))) for t in steps]
    users_upto = [0, *accumulate(tokens(_message("user", "".join(_user(t)))) for t in steps)]  # action messages [:i]
    obs_upto = [0, *accumulate(n_obs)]
    first: dict[int, int] = {}  # the opening user message when history starts at turn j

    def size(j: int, k: int) -> int:  # history from turn j to the action of step k
        if j not in first:
            first[j] = tokens(_message("user", "".join(_user_first(steps[j], j))))
        return n_sys + first[j] + users_upto[k + 1] - users_upto[j + 1] + obs_upto[k] - obs_upto[j]

    out = []
    for k, t in enumerate(steps):
        if t.transition_id in traj.excluded:
            continue
        n_target = target(k) if target is not None else n_obs[k]
        limit = max_tokens - n_target if max_tokens is not None else None

        def over(j: int, k: int = k, limit: int | None = limit) -> bool:
            n = size(j, k)
            return n > max_prompt_tokens or (limit is not None and n > limit)

        j = 0  # the first kept turn: drop the oldest while the prompt does not fit
        while j < k and over(j):
            j += 1
        if limit is not None and size(j, k) > limit:
            if drops is not None:
                drops["target_too_long" if n_sys + n_target > max_tokens else "prompt_too_long"] += 1
            continue
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "".join(_user_first(steps[j], j))}]
        for i in range(j, k):
            messages.append({"role": "assistant", "content": "".join(_observations(steps[i]))})
            messages.append({"role": "user", "content": "".join(_user(steps[i + 1]))})
        out.append(
            {
                "step": k,
                "messages": messages,
                "prompt_tokens": size(j, k),
                "history_turns": k - j,
                "dropped_turns": j,
                "total_turns": len(steps),
                "transition": t,
                "next_tokens": n_obs[k],
            }
        )
    return out


def _completion(traj: Trajectory, t: Transition) -> str:
    reasoning = (traj.reasoning.get(t.transition_id) or "").strip()
    return f"{reasoning}\n{''.join(_observations(t))}" if reasoning else "".join(_observations(t))


def sft_samples(traj: Trajectory, tokens: PieceCounts, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    meta = traj.meta()
    out = []
    for p in items:
        t = p["transition"]
        content = _completion(traj, t)
        n = tokens(_message("assistant", content))
        out.append(
            {
                "id": sample_id("sft", t.transition_id),
                "prompt": p["messages"],
                "completion": [{"role": "assistant", "content": content}],
                "tokens": p["prompt_tokens"] + n,
                "prompt_tokens": p["prompt_tokens"],
                "completion_tokens": n,
                "history_turns": p["history_turns"],
                "dropped_turns": p["dropped_turns"],
                "has_reasoning": content != "".join(_observations(t)),
                "step": p["step"],
                "total_turns": p["total_turns"],
                "transition_id": t.transition_id,
                **meta,
            }
        )
    return out


def rl_samples(traj: Trajectory, tokens: PieceCounts, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    meta = traj.meta()
    n_gen = tokens(GENERATION_PROMPT)
    return [
        {
            "id": sample_id("rl", p["transition"].transition_id),
            "prompt": p["messages"],
            "ground_truth": p["transition"].next_state.text,
            "format": p["transition"].next_state.format,
            "volatile_spans": [
                {"start": s.start, "end": s.end, "kind": s.kind} for s in p["transition"].next_state.volatile_spans
            ],
            "tokens": p["prompt_tokens"] + n_gen,
            "history_turns": p["history_turns"],
            "dropped_turns": p["dropped_turns"],
            "step": p["step"],
            "total_turns": p["total_turns"],
            "transition_id": p["transition"].transition_id,
            **meta,
        }
        for p in items
    ]


def build_samples(
    traj: Trajectory, tokens: PieceCounts, cfg: MixtureConfig, drops: dict[str, Counter] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Samples of every enabled stage; samples dropped for length counted in ``drops[stage][reason]``.
    RL's target is the observation; SFT's is its completion (with reasoning when distilled)."""
    out, made = {}, {}  # prompts are built once per budget and target (SFT and RL usually share them)
    drops = drops if drops is not None else {}
    for stage in cfg.enabled():
        s = cfg.stages[stage]
        counted = drops.setdefault(stage, Counter())
        if stage == "cpt":
            out[stage] = cpt_documents(traj, tokens, s.context_tokens, s.max_tokens, counted)
            continue
        reasoned = stage == "sft" and any(t.transition_id in traj.reasoning for t in traj.steps)
        key = (s.max_prompt_tokens, s.max_tokens, reasoned)
        if key not in made:
            target = (lambda k: tokens(_message("assistant", _completion(traj, traj.steps[k])))) if reasoned else None
            dropped: Counter = Counter()
            made[key] = (prompts(traj, tokens, s.max_prompt_tokens, s.max_tokens, target, dropped), dropped)
        items, dropped = made[key]
        counted.update(dropped)
        out[stage] = sft_samples(traj, tokens, items) if stage == "sft" else rl_samples(traj, tokens, items)
    return out
