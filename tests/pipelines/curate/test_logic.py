"""Each curation stage's logic on hand-made cases."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest

from pipelines.curate.config import Quality, Scrub, load_curation
from pipelines.curate.logic import (
    EvalIndex,
    nondeterministic,
    normalise,
    scrub_text,
    scrub_transition,
    secret_rows,
    step_summary,
    trajectory_key,
    trajectory_problem,
    transition_flags,
    transition_key,
    word_signature,
)
from pipelines.curate.minhash import bucket_ids, estimated_jaccard, similar_band_pairs
from schemas import Action, Observation, Provenance, Transition, VolatileSpan, transition_problems
from schemas.errors import ConfigError


def step(next_text, *, state="$ ", action="ls", spans=(), traj="t1", i=0, error=None, truncated=False):
    return Transition.create(
        trajectory_id=traj,
        step=i,
        domain="terminal",
        env_id="bash",
        task_id="task",
        state=Observation.make(state, "terminal"),
        action=Action.make("run", command=action),
        next_state=Observation.make(next_text, "terminal", spans=spans, truncated=truncated),
        provenance=Provenance(run_id="r"),
        action_error=error,
        instruction="do it",
    )


def date_ls(ts: str, pid: str) -> Transition:
    text = f"{ts}\nproc {pid}\na.txt b.txt\n"
    spans = [VolatileSpan(0, len(ts), "timestamp"), VolatileSpan(len(ts) + 6, len(ts) + 6 + len(pid), "pid")]
    return step(text, action="date; ls", spans=spans)


def test_volatile_masking_makes_two_runs_of_date_ls_equal():
    a, b = date_ls("Sun Nov 29 10:00:01 UTC 2026", "123"), date_ls("Mon Dec  1 23:59:59 UTC 2026", "98765")
    assert a.next_state.text != b.next_state.text
    assert transition_key(a) == transition_key(b)
    assert trajectory_key([transition_key(a)]) == trajectory_key([transition_key(b)])
    assert transition_key(a) != transition_key(
        date_ls("x", "1").__class__.create(
            **{
                **{f: getattr(a, f) for f in ("trajectory_id", "step", "domain", "env_id", "task_id", "state", "provenance")},
                "action": a.action,
                "next_state": Observation.make("different\n", "terminal"),
            }
        )
    )


def test_normalise_strips_ansi_control_and_blank_runs():
    assert normalise("\x1b[31ma\x1b[0m  b\t\tc \r\n\x07d\x00 \n") == "a b c\nd"


def test_secrets_in_commands_and_output_are_scrubbed_keeping_the_shape():
    secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
    cmd = f"export OPENAI_API_KEY={secret}; mysql --password=hunter22 -u root; git clone https://bob:pa55w0rd@host/x"
    out, counts = scrub_text(cmd + " mail me: alice@example.com", ["openai_key", "password_arg", "url_credentials", "email"])
    assert secret not in out and "hunter22" not in out and "pa55w0rd" not in out and "alice@example.com" not in out
    assert len(out) == len(cmd + " mail me: alice@example.com")
    assert counts == {"openai_key": 1, "password_arg": 1, "url_credentials": 1, "email": 1}
    assert "<openai_key>" in out and scrub_text("find -print", ["password_arg"])[0] == "find -print"
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n-----END OPENSSH PRIVATE KEY-----"
    t = step(f"cat id_rsa\n{key}\n", action=f"echo {secret}")
    clean, counts = scrub_transition(t, ["private_key", "openai_key"])
    assert counts == {"private_key": 1, "openai_key": 1}
    assert "PRIVATE KEY" not in clean.next_state.text and secret not in clean.action.canonical
    assert json.loads(clean.action.canonical)["command"].startswith("echo <openai_key>")
    assert transition_problems(clean) == []  # ids kept, content hash recomputed, JSON still valid


def test_13_gram_from_an_eval_file_is_caught(tmp_path):
    evals = tmp_path / "bench.jsonl"
    sentence = "the quick brown fox jumps over the lazy dog near the quiet river bank today"
    evals.write_text(json.dumps({"id": "bench-7", "instruction": sentence, "repo": "acme/x", "commit": "abc"}) + "\n")
    index = EvalIndex.from_files([str(evals)], n=13)
    leaked = step("Notes: " + " ".join(sentence.split()[1:14]) + " etc")
    assert index.contamination([leaked]) == ("contaminated_text", "13-gram overlap with bench.jsonl")
    twelve = step("Notes: " + " ".join(sentence.split()[1:13]))
    assert index.contamination([twelve]) is None
    assert index.contamination([replace(twelve, task_id="bench-7")]) == ("contaminated_task", "task id bench-7 is in bench.jsonl")
    repo = replace(twelve, provenance=replace(twelve.provenance, extra=json.dumps({"repo": "acme/x", "commit": "abc"})))
    assert index.contamination([repo]) == ("contaminated_repo", "repo acme/x at abc is in bench.jsonl")


def test_similar_band_pairs_confirm_a_bands_pairs_like_the_pairwise_estimate():
    rng = np.random.default_rng(5)
    base = rng.integers(0, 1 << 63, size=10, dtype=np.uint64)
    names = ["a", "b", "c", "d", "e"]
    agree = {"e": 10, "a": 8, "c": 7, "b": 9, "d": 3}  # leading positions equal to base
    sigs = np.stack([base.copy() for _ in names])
    for row, name in enumerate(names):
        sigs[row, agree[name] :] = rng.integers(0, 1 << 63, size=10 - agree[name], dtype=np.uint64)
    ids = bucket_ids(sigs, 10, 1)  # ten one-row bands: all five share band 0
    found = [(names[i], names[j]) for i, j in similar_band_pairs(sigs, ids, 0, 0.8).tolist()]
    brute = [(names[i], names[j]) for i in range(5) for j in range(i + 1, 5) if estimated_jaccard(sigs[i], sigs[j]) >= 0.8]
    assert sorted(found) == brute == [("a", "b"), ("a", "e"), ("b", "e")]  # 0.8 exactly counts; 0.7 does not
    assert len(similar_band_pairs(sigs, ids, 0, 0.0)) == 10
    assert len(similar_band_pairs(sigs, ids, 1, 0.0)) == 0  # every pair that shares band 1 shared band 0 first
    assert len(similar_band_pairs(sigs[:1], ids[:1], 0, 0.0)) == 0


def test_quality_drops_degenerate_trajectories_and_flags_steps():
    cfg = Quality(max_repeated_action=3, max_state_loop=3)
    same = [step(f"out {i}", action="ls", i=i) for i in range(4)]

    def problem(traj):
        return trajectory_problem([step_summary(t) for t in traj], cfg)

    assert problem(same) == ("repeated_action", "degenerate: the same action 4 times in a row")
    loop = [step("same screen", action=f"cmd{i}", i=i) for i in range(5)]
    assert problem(loop) == ("state_loop", "degenerate: a loop through the same state 5 times")
    cut = [step("x", action=f"c{i}", i=i, truncated=i < 2) for i in range(3)]
    assert problem(cut)[0] == "truncated_observations" and problem(cut)[1].startswith("truncated observations: 67%")
    fine = [step(f"out {i}", action=f"c{i}", i=i) for i in range(3)]
    assert problem(fine) is None
    assert transition_flags(step("   "), cfg) == ["exclude:empty_next_state"]
    assert transition_flags(step("$ ", error="bad action"), cfg) == ["exclude:error_only"]
    assert "exclude:non_text" in transition_flags(step("\ufffd\ufffd\x01ab"), cfg)


def test_nondeterminism_is_flagged_not_dropped():
    same, other = "alpha beta gamma delta epsilon zeta", "something else entirely happened here today"
    sigs = [word_signature(t) for t in (same, other, same)]
    assert nondeterministic(sigs, 0.5) == {0, 1, 2}
    assert nondeterministic([sigs[0], sigs[2]], 0.5) == set()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("near_dedup: {num_perm: 128, bands: 20, rows: 5}", "near_dedup: bands x rows must equal num_perm: 20 x 5 != 128"),
        ("near_dedup: {threshold: 1.5}", "near_dedup.threshold: Input should be less than or equal to 1"),
        ("dedupe: {}", "dedupe: unknown key"),
        ("decontaminate: {eval_sets: [missing.jsonl]}", "decontaminate.eval_sets: missing.jsonl not found"),
        ("domains: [desktop]", "domains: unknown domain 'desktop'"),
    ],
)
def test_bad_curation_configs_are_refused(tmp_path, body, message):
    path = tmp_path / "cur.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_curation(path)
    assert str(info.value) == f"{path}: {message}"


def test_batched_minhash_gives_datasketch_values():
    from datasketch import MinHash

    from pipelines.curate.minhash import BLOCK, MinHasher, shingles

    rng = random.Random(4)
    texts = ["".join(rng.choice("abc de\n") for _ in range(rng.randint(1, 900))) for _ in range(40)]
    docs = [shingles(t, words=False, n=5) for t in texts] + [shingles("x" * 3 * BLOCK + "yz" * BLOCK, words=False, n=5)]
    sigs = MinHasher(64).signatures(docs)
    for doc, sig in zip(docs, sigs, strict=True):
        m = MinHash(num_perm=64, seed=1, scheme="affine64", hashfunc=lambda x: x)
        m.update_batch(doc)
        assert sig.tolist() == m.hashvalues.tolist()


def test_shingle_hashes_are_polynomial_hashes_of_each_ngram():
    from pipelines.curate.minhash import mix64, shingles

    p, mask = 1099511628211, (1 << 64) - 1

    def poly(units):
        h = 0
        for u in units:
            h = (h * p + u) & mask
        return h

    text = "héllo wörld  of\tcode"
    data = text.encode()
    want = [poly(data[i : i + 5]) for i in range(len(data) - 4)]
    assert shingles(text, words=False, n=5).tolist() == mix64(np.array(want, dtype=np.uint64)).tolist()
    words = shingles(text, words=True, n=2)
    assert len(words) == 3  # (héllo wörld) (wörld of) (of code): whitespace runs split words
    assert shingles("of code", words=True, n=2).tolist() == words[-1:].tolist()


def test_only_rows_with_a_secret_literal_are_scrubbed():
    from schemas.arrow import to_record_batch

    clean = step("total 0\nREADME.md\n", i=0)
    leaky = step("user admin@example.com logged in", i=1)
    password = step("ok", action="mysql --password=hunter2 db", i=2)
    batch = to_record_batch([clean, leaky, password])
    kinds = Scrub().kinds
    assert secret_rows(batch, kinds) == [False, True, True]
    assert secret_rows(batch, ["aws_key"]) == [False, False, False]


def test_an_order_sorts_as_its_index_text_and_reads_back():
    from pipelines.curate.records import Order

    orders = [
        Order(1, "2026-01-01T00:00:00+00:00", "b"),
        Order(1, "2026-01-01T00:00:00.500000+00:00", "a"),
        Order(0, "2026-02-01T00:00:00+00:00", "z"),
        Order(1, "2026-01-01T00:00:00+00:00", "a|x"),
    ]
    assert sorted(orders) == sorted(orders, key=Order.text)
    assert [Order.parse(o.text()) for o in orders] == orders


def test_the_curation_tally_merges_its_json_parts():
    from pipelines.curate.output import CurationTally

    parts = []
    for n, tree in enumerate(("curated", "rejected")):
        part = CurationTally(transitions_in=1)
        row = {
            "domain": "terminal",
            "duplicate_of": None,
            "stage": "quality",
            "reason": "state_loop",
            "flags": ["exclude:non_text"],
            "cluster": "c",
            "trajectory_id": f"t{n}",
        }
        part.add(tree, [row])
        parts.append(json.loads(json.dumps(part.to_json())))
    total = CurationTally()
    for part in parts:
        total.merge(part)
    assert total.to_json() == {
        "transitions_in": 2,
        "kept": 1,
        "rejected": 1,
        "repeats": 0,
        "stage": {"quality": 1},
        "reason": {"state_loop": 1},
        "flags": {"non_text": 2},
        "scrubbed": {},
        "domain": {"terminal": {"kept": 1, "rejected": 1}},
        "cluster_trajs": [("c", "t0"), ("c", "t1")],
    }
    assert total.cluster_sizes() == {"2": 1}
