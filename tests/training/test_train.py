"""Training end to end on the CPU: a tiny Qwen3 built in code and a release of synthetic
data made here, through the real front door and TRL. CPT loss goes down, SFT then RL run
and save, eval prints its table, a killed run resumes with the same data order, packed
documents do not attend to each other, and bad input fails before training starts."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipelines.release.build import create_release
from pipelines.release.config import MixtureConfig, load_mixture
from schemas.errors import TrainingError
from tests.conftest import cli
from tests.pipelines.release.test_release import IN_MEMORY, curated_store
from training import assets
from training.config import TrainConfig, load_train_config

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "training"
# the shipped tiny Qwen3, with its own position and embedding defaults
TINY = {k: v for k, v in assets.TINY.items() if k not in ("max_position_embeddings", "tie_word_embeddings")}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A store with a release whose samples are short (256-token prompts, 512-token CPT documents)."""
    root = tmp_path_factory.mktemp("train")
    store = curated_store(root / "s", n=400)
    cfg = load_mixture("examples/mixtures/default.yaml", store).model_dump()
    for st in ("cpt", "sft", "rl"):
        cfg["stages"][st].update(context_tokens=512, max_prompt_tokens=256)
    cfg["splits"] = {"validation": 0.1, "test": 0.3}
    create_release(MixtureConfig.model_validate(cfg), store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None)
    return store


def config(path: Path, stage: str, **over) -> str:
    body = {
        "stage": stage,
        "model": {"init": TINY},
        "release": "wm/1",
        "max_length": 512,
        "train": {"max_steps": 6, "learning_rate": 3e-3, "per_device_batch_size": 2, "save_steps": 2, "logging_steps": 1},
    }
    for k, v in over.items():
        body[k] = {**body[k], **v} if isinstance(v, dict) and isinstance(body.get(k), dict) else v
    path.write_text(yaml.safe_dump(body))
    return str(path)


def report(out) -> dict:
    return json.loads(Path(out, "training_report.json").read_text())


def test_examples_run_cpt_sft_rl_then_eval(release, tmp_path):
    """The shipped tiny configs, in order, as a user runs them (paths relative to the working folder)."""
    work = tmp_path / "w"
    work.mkdir()

    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "trajforge", *a],
            capture_output=True,
            text=True,
            cwd=work,
            env={**os.environ, "PYTHONPATH": str(EXAMPLES.parents[1])},
            timeout=600,
        )

    for stage in ("cpt", "sft", "rl"):
        proc = run("train", stage, str(EXAMPLES / f"tiny-{stage}.yaml"), "--store", release, "--release", "wm/1")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"{stage}: " in proc.stdout and "tokens/s" in proc.stdout
    out = {st: work / "demo-store" / "runs" / f"tiny-{st}" for st in ("cpt", "sft", "rl")}
    cpt = report(out["cpt"])
    losses = [h["loss"] for h in cpt["log_history"] if "loss" in h]
    assert len(losses) >= 10 and sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1  # CPT loss goes down
    assert cpt["packing_efficiency"] >= 0.9 and cpt["tokenizer_matches_release"] is True
    manifest = Path(release, "releases", "wm", "1", "manifest.json")
    assert cpt["manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert report(out["sft"])["config"]["model"]["path"] == "demo-store/runs/tiny-cpt"
    rl = report(out["rl"])
    assert rl["steps"] == 3 and any("reward/format_ok" in h for h in rl["log_history"])
    for d in out.values():
        assert (d / "model.safetensors").is_file() and (d / "loss.png").read_bytes()[:4] == b"\x89PNG"
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(out["rl"]).config.model_type == "qwen3"
    proc = run(
        "train",
        "eval",
        "--model",
        str(out["sft"]),
        "--store",
        release,
        "--release",
        "wm/1",
        "--max-samples",
        "2",
        "--max-new-tokens",
        "16",
        "--rollout-steps",
        "2",
        "--rollouts",
        "1",
        "--out",
        str(tmp_path / "eval.json"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| domain | samples | format_ok | exact | chrf | rouge_l |" in proc.stdout
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["domains"] and all(0 <= m["chrf"] <= 1 and m["samples"] <= 2 for m in result["domains"].values())
    assert all(len(v) == 2 for v in result["open_loop"].values()) and result["open_loop"]
    again = run("train", "cpt", str(EXAMPLES / "tiny-cpt.yaml"), "--store", release, "--release", "wm/1")
    assert again.returncode == 2 and "holds a finished run" in again.stderr


def test_packed_documents_do_not_attend_to_each_other():
    import torch

    from training.assets import load_model

    class Tok:
        eos_token_id, pad_token_id = 1, 0

        def __len__(self):
            return 50

    torch.manual_seed(0)
    from training.config import ModelSpec

    model = load_model(ModelSpec(init={**TINY, "num_hidden_layers": 2}, attn_implementation="sdpa"), Tok()).eval()
    a, b = torch.randint(2, 50, (1, 7)), torch.randint(2, 50, (1, 5))
    packed = torch.cat([a, b], dim=1)
    positions = torch.cat([torch.arange(7), torch.arange(5)]).unsqueeze(0)
    with torch.no_grad():  # use_cache=False as TRL's SFTTrainer passes in training (a cache turns the packed mask off)
        alone = model(input_ids=b, use_cache=False).logits[0]
        in_pack = model(input_ids=packed, position_ids=positions, use_cache=False).logits[0, 7:]
        no_reset = model(input_ids=packed, use_cache=False).logits[0, 7:]  # one long document: b sees a
    assert torch.allclose(alone, in_pack, atol=1e-5)
    assert not torch.allclose(alone, no_reset, atol=1e-3)


def _weights(path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(path, "model.safetensors")))


def test_resume_after_kill_continues_the_same_run(release, tmp_path):
    cfg = config(tmp_path / "c.yaml", "cpt", train={"max_steps": 24, "save_steps": 4, "logging_steps": 1, "learning_rate": 1e-3})
    ref = tmp_path / "ref"
    cli("train", "cpt", cfg, "--store", release, "--output", str(ref))
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajforge", "train", "cpt", cfg, "--store", release, "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    from training.train import last_checkpoint

    def whole(step: int) -> bool:  # trainer_state.json can exist before it is fully written
        try:
            json.loads((out / f"checkpoint-{step}" / "trainer_state.json").read_text())
            return True
        except (OSError, ValueError):
            return False

    while not whole(8) and time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "training_report.json").exists()

    newest = int(last_checkpoint(out).rsplit("-", 1)[1])
    folders = [int(p.name.rsplit("-", 1)[1]) for p in out.glob("checkpoint-*")]
    half = out / f"checkpoint-{max(folders) + 4}"  # as if killed while saving a later checkpoint: passed over
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"partial")
    done = cli("train", "cpt", cfg, "--store", release, "--output", str(out))
    assert "resumed from" in done.stdout
    resumed = report(out)
    start = int(resumed["resumed_from"].rsplit("-", 1)[1])
    assert 8 <= start == newest < 24
    ref_loss = {h["step"]: h["loss"] for h in report(ref)["log_history"] if "loss" in h}
    got_loss = {h["step"]: h["loss"] for h in resumed["log_history"] if "loss" in h}
    after = [s for s in sorted(got_loss) if s > start]
    assert after and [got_loss[s] for s in after] == pytest.approx([ref_loss[s] for s in after], rel=1e-4)
    a, b = _weights(ref), _weights(out)
    assert a.keys() == b.keys() and all(a[k].allclose(b[k], atol=1e-5) for k in a)


def test_nan_loss_stops_with_the_step_and_last_good_checkpoint(release, tmp_path):
    import torch
    from transformers import TrainerCallback

    class Poison(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step == 3:
                with torch.no_grad():
                    next(model.parameters()).fill_(float("nan"))

    from training.train import run

    cfg = load_train_config(config(tmp_path / "c.yaml", "cpt")).override(store=release, output=str(tmp_path / "o"))
    with pytest.raises(TrainingError, match=r"loss is nan at step 4; last good checkpoint: .*checkpoint-2$"):
        run(cfg, extra_callbacks=[Poison()])
    assert not (tmp_path / "o" / "checkpoint-4").exists()


def test_bad_input_fails_before_training(release, tmp_path):
    copy = tmp_path / "s"
    shutil.copytree(Path(release, "releases"), copy / "releases")
    shutil.rmtree(copy / "releases" / "wm" / "1" / "data" / "rl")  # and from the manifest: a release without RL
    manifest = copy / "releases" / "wm" / "1" / "manifest.json"
    body = json.loads(manifest.read_text())
    body["files"] = [f for f in body["files"] if f.get("stage") != "rl"]
    manifest.write_text(json.dumps(body))
    cases = [
        (config(tmp_path / "a.yaml", "rl"), ["--store", str(copy)], "release has no 'rl' stage (stages: cpt, sft)"),
        (config(tmp_path / "b.yaml", "cpt", model={"init": None, "path": str(tmp_path)}), ["--store", release], "model.path: "),
        (config(tmp_path / "c.yaml", "cpt", epochs=3), ["--store", release], "epochs: unknown key"),
        (config(tmp_path / "d.yaml", "cpt"), ["--store", release, "--release", "nope/1"], "not a release"),
        (config(tmp_path / "e.yaml", "cpt", tokenizer=str(tmp_path / "none.json")), ["--store", release], "tokenizer: "),
        (
            config(tmp_path / "f.yaml", "cpt", train={"save_steps": 3, "logging_steps": 2}),
            ["--store", release],
            "must be a multiple of logging_steps",
        ),
        (
            config(tmp_path / "h.yaml", "cpt"),
            ["--store", release, "--model", str(tmp_path / "no-ckpt")],
            f"model.path: {tmp_path / 'no-ckpt'}: cannot load",
        ),  # --model wins over the config's model.init
    ]
    for path, flags, message in cases:
        proc = cli(
            "train", yaml.safe_load(Path(path).read_text())["stage"], path, *flags, "--output", str(tmp_path / "out"), check=False
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not (tmp_path / "out" / "checkpoint-2").exists()
    wrong = cli("train", "sft", config(tmp_path / "g.yaml", "cpt"), "--store", release, check=False)
    assert wrong.returncode == 2 and "this config is for cpt, not sft" in wrong.stderr


def test_every_shipped_config_loads():
    for path in sorted(EXAMPLES.glob("*.yaml")):
        cfg = load_train_config(path)
        assert isinstance(cfg, TrainConfig) and cfg.stage in path.name and cfg.release and cfg.output


def test_streaming_reads_the_release_as_an_iterable(release, tmp_path):
    from training.train import run

    for stage in ("cpt", "sft"):
        path = config(tmp_path / f"{stage}.yaml", stage, streaming=True, max_length=1024, train={"max_steps": 2})
        out = tmp_path / stage
        got = run(load_train_config(path).override(store=release, output=str(out)))
        assert got.steps == 2 and got.samples is None and got.train_tokens > 0 and (out / "model.safetensors").is_file()
    assert got.left_out_too_long is None  # not known ahead when streaming
    with pytest.raises(ValueError, match=r"streaming needs train\.max_steps"):
        TrainConfig.model_validate({"stage": "cpt", "model": {"init": {}}, "streaming": True})


def test_gpu_check_script_runs_its_plumbing_on_the_cpu(tmp_path):
    """training/gpu_check.sh is meant for a CUDA GPU; SIZE=tiny runs every step of it here."""
    env = {**os.environ, "SIZE": "tiny", "STEPS": "2", "TRANSITIONS": "1500", "WORK": str(tmp_path / "g"), "PY": sys.executable}
    proc = subprocess.run(
        ["bash", str(EXAMPLES.parents[1] / "training" / "gpu_check.sh")], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "| cpt |" in proc.stdout and "| sft |" in proc.stdout and "MFU" in proc.stdout
    assert "world-model fidelity" in proc.stdout and "gpu_check: done" in proc.stdout
    assert json.loads((tmp_path / "g" / "eval.json").read_text())["domains"]
