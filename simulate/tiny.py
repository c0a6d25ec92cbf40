"""A planted tiny world model: a real Qwen3 causal LM folder (weights + ``tokenizer.json``)
whose greedy reply to any prompt is ``wrap(observation)``. A random tiny model never closes
its ``<predicted_observation>`` tag, so tests, the demo and the benchmark's plumbing need
one whose replies are well formed; this one is built in well under a second, no training.

    path = planted_model("tiny-wm", "ok\\n[exit 0] /work$")

How: the reply's three pieces (open tag, observation, close tag) are tokens of their own;
every layer's output projections are zero, so each position's hidden state is its own
token's embedding, and the untied output head maps the prompt's last token to the first
piece, each piece to the next and the last to the end of turn (a bigram chain). Any
backend loads it: transformers locally, or ``trajforge sim serve`` behind the OpenAI API.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from pipelines.release.samples import CLOSE, OPEN, system_prompt
from schemas.errors import TrainingError


def planted_model(out: str | Path, observation: str, *, seed: int = 0) -> str:
    """Write the model to ``out``; checks that it reproduces ``wrap(observation)``."""
    pieces = [f"{OPEN}\n", observation, f"\n{CLOSE}"]
    return planted_chain(out, pieces, [system_prompt("terminal", "default"), observation] * 3, seed=seed)


def planted_chain(
    out: str | Path, pieces: list[str], texts: list[str], *, chat_template: str | None = None, seed: int = 0
) -> str:
    """A model folder whose greedy reply to any chat prompt is ``pieces`` joined, then the
    end of turn; ``texts`` train its byte-level tokenizer, ``chat_template`` (default:
    ChatML) is the one its prompts are made with (the caller sets it on the tokenizer it
    loads: a bare ``tokenizer.json`` carries none)."""
    import tokenizers
    import torch

    from pipelines.release.tokens import train_tokenizer
    from training.assets import load_model, load_tokenizer
    from training.config import ModelSpec, TrainConfig

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    file = train_tokenizer(texts, str(out / "tokenizer.json"), vocab_size=300)
    raw = tokenizers.Tokenizer.from_file(file)
    raw.add_tokens([tokenizers.AddedToken(p, normalized=False) for p in pieces])
    raw.save(file)
    tok = load_tokenizer(TrainConfig(stage="sft", model=ModelSpec(path=str(out))))
    if chat_template is not None:
        tok.chat_template = chat_template
    torch.manual_seed(seed)
    model = load_model(ModelSpec(init={"tie_word_embeddings": False}), tok).eval()
    start = tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True)
    chain = [
        tok(start, add_special_tokens=False)["input_ids"][-1],
        *(tok.convert_tokens_to_ids(p) for p in pieces),
        tok.eos_token_id,
    ]
    if len(set(chain)) != len(chain):
        raise TrainingError(f"planted model: the pieces {pieces!r} are not distinct tokens")
    with torch.no_grad():
        for layer in model.model.layers:  # each layer passes the residual through unchanged
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        emb.normal_()
        head = model.lm_head.weight
        head.zero_()
        for a, b in itertools.pairwise(chain):
            h = emb[a] / emb[a].pow(2).mean().sqrt()  # what the final RMSNorm makes of it (its weight is 1)
            head[b] += 4.0 * h / h.norm()
    ids = tok(start, return_tensors="pt", add_special_tokens=False)["input_ids"]
    got = model.generate(
        ids, max_new_tokens=len(pieces) + 4, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
    )
    if got[0, ids.shape[1] :].tolist() != chain[1:]:
        raise TrainingError(f"planted model: does not reproduce {pieces!r}")
    model.save_pretrained(str(out))
    return str(out)
