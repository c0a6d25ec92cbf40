"""``trajforge distill``: reasoning texts for SFT completions from an OpenAI-compatible model.

For every kept target transition of a curation, a teacher model sees the prompt the world
model will see, the action and the true next observation, and writes a short explanation
of why the environment answers that way. The texts go beside the curated shards, one
Parquet file per shard (``<store>/distill/<curation>/<domain>/part-NNNNN.parquet``:
transition_id, trajectory_id, reasoning, model), so a release's SFT completions become
``reasoning`` + ``<predicted_observation>...``. Same retry rules as the chat policy; a
shard whose file exists is skipped, so a rerun after a crash continues where it stopped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.release.inputs import distill_path, excluded_ids
from pipelines.store import Store, read_shard
from schemas.errors import ConfigError

DISTILL = pa.schema(
    [("transition_id", pa.string()), ("trajectory_id", pa.string()), ("reasoning", pa.string()), ("model", pa.string())]
)
INSTRUCTION = (
    "You are shown one step of an agent acting in an environment, and what the environment answered. In at most "
    "{words} words, explain the reasoning a model of this environment needs to predict that answer from the state "
    "and the action (what the action does, which parts of the state it reads or changes). Do not quote the answer."
)


@dataclass
class DistillReport:
    shards: int = 0
    skipped_shards: int = 0
    written: int = 0


def distill(
    store: Store | str,
    curation_id: str,
    *,
    model: str,
    base_url: str,
    api_key_env: str = "OPENAI_API_KEY",
    max_words: int = 80,
    limit: int | None = None,
    retries: int = 4,
    log=print,
) -> DistillReport:
    from llm.chat import post_chat
    from schemas.arrow import from_record_batch

    store = Store.open(store)
    shards = sorted(s.path for s in store.readable_shards("curated") if s.run.run_id == curation_id)
    if not shards:
        raise ConfigError(f"--curation: {curation_id!r} has no curated shards in {store.uri}")
    excluded = excluded_ids(store, curation_id)
    api_key = os.environ.get(api_key_env, "")
    report = DistillReport()
    budget = limit
    for path in shards:
        if budget is not None and budget <= 0:
            break
        out = Path(distill_path(store, path))
        if out.exists():
            report.skipped_shards += 1
            continue
        rows = []
        for batch in read_shard(store.sfs, path):
            for t in from_record_batch(batch):
                if t.transition_id in excluded or (budget is not None and budget <= 0):  # a limit cuts the last shard
                    continue
                body = {
                    "model": model,
                    "temperature": 0.0,
                    "max_tokens": max_words * 3,
                    "messages": [
                        {"role": "system", "content": INSTRUCTION.format(words=max_words)},
                        {
                            "role": "user",
                            "content": f"Environment: {t.domain} ({t.env_id})\nTask: {t.instruction}\n\n"
                            f"State:\n{t.state.text}\n\nAction:\n{t.action.canonical}\n\nAnswer:\n{t.next_state.text}",
                        },
                    ],
                }
                answer = post_chat(base_url.rstrip("/"), body, api_key=api_key, retries=retries)
                text = (answer.get("choices") or [{}])[0].get("message", {}).get("content") or ""
                rows.append(
                    {
                        "transition_id": t.transition_id,
                        "trajectory_id": t.trajectory_id,
                        "reasoning": text.strip(),
                        "model": model,
                    }
                )
                if budget is not None:
                    budget -= 1
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".parquet.partial")
        pq.write_table(pa.Table.from_pylist(rows, schema=DISTILL), tmp, compression="zstd")
        os.replace(tmp, out)  # a shard's file appears whole or not at all
        report.shards += 1
        report.written += len(rows)
        log(f"distill: {out} ({len(rows)} reasoning texts)")
    return report
