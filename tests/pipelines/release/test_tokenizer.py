"""The tokenizer a release ships: ``AutoTokenizer.from_pretrained(<release folder>)`` renders
every SFT sample exactly as trajforge's training does (``training.assets.load_tokenizer`` on
the store's bare ``tokenizer.json``), with EOS and pad set, and TRL's ``SFTTrainer`` takes it
as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.release.build import create_release
from pipelines.release.config import MixtureConfig, load_mixture
from pipelines.release.inspect import verify
from pipelines.release.tokens import CHATML, ship_tokenizer
from schemas.errors import ConfigError
from tests.pipelines.release.test_release import IN_MEMORY, curated_store
from training import assets
from training.config import ModelSpec, TrainConfig

transformers = pytest.importorskip("transformers")
FILES = ["chat_template.jinja", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A store with an SFT-only release wm/1, and the report of its build."""
    root = tmp_path_factory.mktemp("tokenizer")
    store = curated_store(root / "s", n=150)
    cfg = load_mixture("examples/mixtures/default.yaml", store).model_dump()
    cfg = MixtureConfig.model_validate({**cfg, "stages": {"sft": cfg["stages"]["sft"]}})
    report = create_release(cfg, store, "wm", "1", beam_args=IN_MEMORY, log=lambda m: None)
    return Path(store), report


def training_tokenizer(store: Path):
    """What trajforge's training loads for this store (its bare tokenizer.json)."""
    return assets.load_tokenizer(TrainConfig.model_validate({"stage": "sft", "model": {"init": {}}, "store": str(store)}))


def sft_samples(root: Path) -> list[dict]:
    return pq.read_table(sorted(root.glob("data/sft/*.parquet")), columns=["prompt", "completion"]).to_pylist()


def test_the_release_tokenizer_renders_every_sample_as_training_does(built):
    store, report = built
    root = store / "releases" / "wm" / "1"
    shipped, ours = transformers.AutoTokenizer.from_pretrained(str(root)), training_tokenizer(store)
    assert (shipped.eos_token, shipped.pad_token, shipped.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    assert {shipped.eos_token, shipped.pad_token} <= set(shipped.all_special_tokens)
    assert shipped.eos_token_id != shipped.pad_token_id and shipped.chat_template == CHATML == ours.chat_template
    samples = sft_samples(root)
    assert len(samples) > 20
    for s in samples:
        chat = s["prompt"] + s["completion"]
        text = shipped.apply_chat_template(chat, tokenize=False)
        assert text == ours.apply_chat_template(chat, tokenize=False)
        ids = shipped.apply_chat_template(chat, tokenize=True, return_dict=True)["input_ids"]
        assert ids == ours.apply_chat_template(chat, tokenize=True, return_dict=True)["input_ids"]
        # the completion is closed by EOS (then the template's newline, as Qwen's ChatML has it)
        assert text.endswith(s["completion"][0]["content"] + "<|im_end|>\n") and ids[-2] == shipped.eos_token_id
        prompt = shipped.apply_chat_template(s["prompt"], tokenize=False, add_generation_prompt=True)
        assert text.startswith(prompt) and prompt == ours.apply_chat_template(
            s["prompt"], tokenize=False, add_generation_prompt=True
        )
    # the card's facts, the manifest lists the files and the release checks clean
    assert report.tokenizer["files"] == FILES and report.tokenizer["chat_template"] == "chatml"
    assert report.tokenizer["eos_token"] == "<|im_end|>" and report.tokenizer["vocab_size"] == len(shipped)
    assert (root / "tokenizer.json").read_bytes() == (store / "tokenizer.json").read_bytes()
    listed = {f["path"] for f in json.loads((root / "manifest.json").read_text())["files"]}
    assert set(FILES) <= listed and verify(root) == []


def test_trl_sft_trainer_tokenizes_a_sample_as_trajforge_does(built, tmp_path):
    """TRL's own data preparation of prompt-completion chats, with the shipped tokenizer and
    no adaptation: the same input ids, and its labels leave out exactly the prompt."""
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    store, _ = built
    root = store / "releases" / "wm" / "1"
    shipped, ours = transformers.AutoTokenizer.from_pretrained(str(root)), training_tokenizer(store)
    rows = sorted(sft_samples(root), key=lambda s: len(json.dumps(s)))[:2]
    model = assets.load_model(ModelSpec(init={}), shipped)
    args = trl.SFTConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], max_length=None, max_steps=1)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(rows), processing_class=shipped)
    for row, prepared in zip(rows, trainer.train_dataset, strict=True):
        chat = row["prompt"] + row["completion"]
        want = ours.apply_chat_template(chat, tokenize=True, return_dict=True)["input_ids"]
        prompt = ours.apply_chat_template(row["prompt"], tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
        assert prepared["input_ids"] == want
        assert prepared["labels"] == [-100] * len(prompt) + want[len(prompt) :]  # the loss on the completion alone


def test_shipping_is_byte_identical_and_a_full_tokenizer_folder_ships_as_it_is(built, tmp_path):
    store, _ = built
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    first, again = ship_tokenizer(str(store / "tokenizer.json"), a), ship_tokenizer(str(store), b)
    assert first == again and all((a / f).read_bytes() == (b / f).read_bytes() for f in FILES)
    assert set(first) == {"files", "chat_template", "eos_token", "pad_token", "bos_token", "sha256", "vocab_size"}
    # a Hugging Face folder with its own template and tokens: its files, unchanged, and its template reported
    folder = tmp_path / "hf"
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(store / "tokenizer.json"), eos_token="<|endoftext|>")
    tok.chat_template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    tok.save_pretrained(str(folder))
    dest = tmp_path / "rel"
    dest.mkdir()
    info = ship_tokenizer(str(folder), dest)
    assert info["chat_template"] == "from the source tokenizer" and info["eos_token"] == "<|endoftext|>"
    assert info["files"] == sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in dest.iterdir())
    assert all((dest / n).read_bytes() == (folder / n).read_bytes() for n in info["files"])
    loaded = transformers.AutoTokenizer.from_pretrained(str(dest))
    assert loaded.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "[user] hi\n"
    # one without a template gets ChatML, as training gives it; a broken config is one line naming the file
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (plain := tmp_path / "plain").mkdir()
    assert ship_tokenizer(str(folder), plain)["chat_template"] == "chatml"
    assert transformers.AutoTokenizer.from_pretrained(str(plain)).chat_template == CHATML
    (folder / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"tokenizer_config\.json: unreadable") as info:
        ship_tokenizer(str(folder), tmp_path)
    assert "\n" not in str(info.value)
