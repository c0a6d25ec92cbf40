"""Why a curation drops a transition: a fixed vocabulary for ``reason``, free text for ``detail``.

Every rejected row of a curation's ``attributes.parquet`` has ``reason``, one name of
``REASONS`` (so ``GROUP BY reason`` gives one row per kind of drop), and ``detail``, the
text with the ids and numbers of that one drop (``exact duplicate of <trajectory>``).
Each stage names its reason where it decides (``logic.trajectory_problem``,
``EvalIndex.contamination``, ``beam.ExactDuplicates`` ...); validation problems, which
``schemas.validate`` words as ``field: problem``, are named here by their field.

    >>> validation_reason("content_hash: does not match state, action and next_state")
    'content_hash_mismatch'
"""

from __future__ import annotations

REASONS: dict[str, str] = {
    # validate: a shard or record that cannot be trusted (quarantined, in the attributes only)
    "unreadable_shard": "the input shard cannot be opened or read, or differs from its manifest",
    "unreadable_record": "no transition can be built from the row (unknown domain, bad format or step, ...)",
    "bad_transition_id": "transition_id is not derived from trajectory_id and step",
    "missing_id": "trajectory_id, env_id or task_id is empty",
    "bad_extra": "an observation's extra is not a JSON object",
    "bad_volatile_span": "a volatile span ends beyond its observation's text",
    "bad_action": "action.canonical is not valid JSON of the action's kind in canonical form",
    "bad_reward": "the reward is not finite",
    "bad_timing": "action_ms, observe_ms or settle_ms is negative or not finite",
    "missing_run_id": "provenance.run_id is empty",
    "content_hash_mismatch": "content_hash does not match state, action and next_state",
    "invalid_record": "any other failed record check",
    # decontaminate: the trajectory overlaps an evaluation set
    "contaminated_task": "the task id is in an evaluation set",
    "contaminated_repo": "the repository at that commit is in an evaluation set",
    "contaminated_text": "an n-gram of the instruction or an observation is in an evaluation set (decontaminate.ngram)",
    # quality: rules over the whole trajectory
    "empty_trajectory": "the trajectory has no steps",
    "truncated_observations": "too many steps have truncated observations (quality.max_truncated_ratio)",
    "repeated_action": "the same action too many times in a row (quality.max_repeated_action)",
    "state_loop": "a loop through the same state too many times (quality.max_state_loop)",
    "all_actions_failed": "every action of the trajectory failed",
    # dedup: a copy of an earlier kept trajectory (of this or an earlier curation)
    "exact_duplicate": "the same trajectory (masked states, actions, observations) as an earlier kept one",
    "near_duplicate": "a near-duplicate (exact Jaccard >= near_dedup.threshold) of an earlier kept trajectory",
}

_BY_FIELD = {
    "transition_id": "bad_transition_id",
    "trajectory_id": "missing_id",
    "env_id": "missing_id",
    "task_id": "missing_id",
    "state.extra": "bad_extra",
    "next_state.extra": "bad_extra",
    "action.canonical": "bad_action",
    "reward": "bad_reward",
    "action_ms": "bad_timing",
    "observe_ms": "bad_timing",
    "settle_ms": "bad_timing",
    "provenance.run_id": "missing_run_id",
    "content_hash": "content_hash_mismatch",
}


def validation_reason(problem: str) -> str:
    """The ``REASONS`` name of one ``schemas.validate.transition_problems`` string."""
    field = problem.split(": ", 1)[0]
    if ".volatile_spans[" in field:
        return "bad_volatile_span"
    return _BY_FIELD.get(field, "invalid_record")
