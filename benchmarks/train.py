"""Training benchmark: data loading into packed batches against training speed, and packing efficiency.

    python benchmarks/train.py [--transitions 5000] [--repeats 3] [--store STORE --release NAME/VERSION]

Without ``--store``: synthetic transitions, the default curation, a 4,096-token BPE and a
release (CPT documents split at 2,048 tokens, SFT prompts at 1,536); none of that is timed.
Then, median of ``--repeats``:

- loading: the CPT train split read with ``datasets``, tokenised and packed (TRL's
  best-fit-decreasing, ``bfd_split``) into 2,048-token sequences, then every batch collated
  (position ids, sequence boundaries), in one process: tokens/s per core;
- training: the tiny Qwen3 (hidden 32, 2 layers) on the same batches, 30 steps of 4 x 2,048
  tokens on all cores: tokens/s;
- packing efficiency: non-pad tokens / all tokens of the collated batches, and the bin
  fill (real tokens / (sequences x length)) for CPT and SFT at 1,024, 2,048 and 4,096
  tokens, against padding every sample to the length (no packing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "trajforge", *args], check=True, capture_output=True, cwd=ROOT)


def make_release(work: Path, n: int) -> tuple[str, str]:
    store = work / "store"
    _cli("synth", str(store), "-n", str(n), "--seed", "5", "--duplicates", "0.05")
    _cli("curate", "examples/curation/default.yaml", "--store", str(store))
    _cli("tokenizer", "train", "--store", str(store), "--out", str(store / "tokenizer.json"), "--vocab-size", "4096")
    mix = (ROOT / "examples/mixtures/default.yaml").read_text()
    mix = mix.replace("context_tokens: 4096", "context_tokens: 2048")
    mix = mix.replace("max_prompt_tokens: 4096", "max_prompt_tokens: 1536")
    (work / "mix.yaml").write_text(mix)
    _cli("release", "create", str(work / "mix.yaml"), "--store", str(store), "--name", "bench", "--version", "1")
    return str(store), "bench/1"


def _config(store: str, release: str, stage: str, max_length: int, out: str, steps: int = 30):
    from training.config import TrainConfig

    return TrainConfig.model_validate(
        {
            "stage": stage,
            "model": {"init": {}},
            "store": store,
            "release": release,
            "output": out,
            "max_length": max_length,
            "train": {
                "max_steps": steps,
                "per_device_batch_size": 4,
                "learning_rate": 1e-3,
                "save_steps": 1000,
                "logging_steps": 10,
            },
        }
    )


def _trainer(cfg):
    """The SFTTrainer exactly as ``training.train.run`` builds it; (None, (0, total)) when no SFT sample fits."""
    from schemas.errors import TrainingError
    from training.assets import load_model, load_split, load_tokenizer, open_release
    from training.train import _common_args, sft_trainer

    tok = load_tokenizer(cfg)
    rel = open_release(cfg.store, cfg.release, cfg.stage, "train")
    try:
        trainer, ds, _ = sft_trainer(cfg, rel, tok, load_model(cfg.model, tok), _common_args(cfg, cfg.output, True, False))
    except TrainingError:
        return None, (0, len(load_split(rel, cfg.stage, "train")))
    return trainer, ds


def loading(store: str, release: str, work: Path) -> tuple[float, int, float]:
    import datasets

    datasets.disable_caching()  # every repeat tokenises again
    t0 = time.perf_counter()
    trainer, _ = _trainer(_config(store, release, "cpt", 2048, str(work / "load")))
    computed = 0
    for batch in trainer.get_train_dataloader():
        computed += int(batch["input_ids"].numel())  # every position the model computes, padding included
    seconds = time.perf_counter() - t0
    real = sum(sum(x) for x in trainer.train_dataset["seq_lengths"])
    return real / seconds, real, real / computed


def training(store: str, release: str, work: Path) -> float:
    from training.train import run

    out = work / "train"
    shutil.rmtree(out, ignore_errors=True)
    report = run(_config(store, release, "cpt", 2048, str(out)))
    return report.tokens_per_s


def packing(store: str, release: str, work: Path) -> list[tuple]:
    rows = []
    for stage in ("cpt", "sft"):
        for length in (1024, 2048, 4096):
            trainer, raw = _trainer(_config(store, release, stage, length, str(work / "pack")))
            if trainer is None:
                rows.append((stage, length, None, None, f"0 of {raw[1]:,}"))
                continue
            kept = f"{len(raw):,}" if stage == "cpt" else f"{len(raw):,} of {len(load_all(store, release, stage)):,}"
            packed = list(trainer.train_dataset["seq_lengths"])
            real = sum(sum(x) for x in packed)
            sizes = [sum(x) for x in packed]
            # without packing: one sample per row, padded to the length (long CPT documents cut in length-sized rows)
            rows_unpacked = sum(-(-n // length) for n in _sample_lengths(trainer, raw, stage, length))
            rows.append((stage, length, real / (len(sizes) * length), real / (rows_unpacked * length), kept))
    return rows


def load_all(store: str, release: str, stage: str):
    from training.assets import load_split, open_release

    return load_split(open_release(store, release, stage, "train"), stage, "train")


def _sample_lengths(trainer, raw, stage: str, length: int) -> list[int]:
    tok = trainer.processing_class
    if stage == "cpt":
        return [len(x) + 1 for x in tok(list(raw["text"]), add_special_tokens=False)["input_ids"]]  # + EOS
    chats = [p + c for p, c in zip(list(raw["prompt"]), list(raw["completion"]), strict=True)]
    return [len(x) for x in tok.apply_chat_template(chats, tokenize=True, return_dict=True)["input_ids"]]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transitions", type=int, default=5_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--store")
    ap.add_argument("--release")
    args = ap.parse_args(argv)
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    work = Path(tempfile.mkdtemp(prefix="trajforge-train-"))
    try:
        store, release = (args.store, args.release) if args.store else make_release(work, args.transitions)
        loads, trains = [], []
        for _ in range(args.repeats):  # alternate, so both see the same machine noise
            rate, tokens, nonpad = loading(store, release, work)
            loads.append(rate)
            trains.append(training(store, release, work))
        pack = packing(store, release, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cores = os.cpu_count() or 1
    load, train = statistics.median(loads), statistics.median(trains)
    print(
        f"\n### Training data path ({time.strftime('%Y-%m-%d')}, {cores} cores, {args.transitions:,} transitions, "
        f"CPT train split {tokens:,} tokens packed at 2,048, median of {args.repeats})\n"
    )
    print("| what | tokens/s | per core | runs |")
    print("|---|---|---|---|")
    print(
        f"| loading: read + tokenise + BFD pack + collate (1 process) | {load:,.0f} | {load:,.0f} | "
        f"{', '.join(f'{x:,.0f}' for x in loads)} |"
    )
    print(
        f"| training: tiny Qwen3, 4 x 2,048 tokens a step ({cores} cores) | {train:,.0f} | {train / cores:,.0f} | "
        f"{', '.join(f'{x:,.0f}' for x in trains)} |"
    )
    print(
        f"\nLoading per core / training per core: {load / (train / cores):.1f}x. Non-pad tokens / all tokens in the "
        f"collated CPT batches: {nonpad:.3f} (padding-free batches: packed sequences are concatenated, not padded)\n"
    )
    print("Bin fill of the packed sequences (real tokens / (sequences x length)): what a fixed-shape batch would carry.\n")
    print(
        "| stage | length | samples that fit (SFT: none is cut) | packing efficiency (BFD) | padding each sample (no packing) |"
    )
    print("|---|---|---|---|---|")
    for stage, length, eff, unpacked, kept in pack:
        cells = f"{eff:.3f} | {unpacked:.3f}" if eff is not None else "- | -"
        print(f"| {stage} | {length:,} | {kept} | {cells} |")


if __name__ == "__main__":
    main()
