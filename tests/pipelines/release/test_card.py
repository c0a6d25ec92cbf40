"""The data card: its charts rendered as the card shows them (pixel sizes, every label present
and inside the image, one bar per reason, lengths on a log axis over the real range), and its
YAML keys (Hugging Face's licence and language keys, where the defaults come from)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from pipelines.release.card import DPI, _plots, charts, front_matter, license_of
from pipelines.release.config import MixtureConfig, Stage
from pipelines.release.stats import Stats
from schemas.errors import ConfigError

pytest.importorskip("matplotlib")
DROPS = {
    "exact_duplicate": 154,
    "near_duplicate": 119,
    "degenerate_loop": 30,
    "degenerate_repeat": 7,
    "empty": 1,
    "a reason someone wrote at great length, with its trajectory id t-0123456789abcdef": 3,
}


def planted_stats() -> tuple[MixtureConfig, Stats, dict]:
    cfg = MixtureConfig(stages={"cpt": Stage(max_tokens=8192), "sft": Stage(max_tokens=4096), "rl": Stage(max_tokens=4096)})
    stats = Stats()
    rng = np.random.default_rng(0)
    for stage in ("cpt", "sft", "rl"):
        for domain in ("android", "mcp", "os", "search", "swe", "terminal", "web"):
            stats.add(stage, {"split": "train", "domain": domain, "tokens": int(rng.integers(10_000, 200_000))})
    lengths = {st: rng.integers(300, 4096, 500) for st in ("cpt", "sft", "rl")}
    lengths["cpt"][0] = 8000
    return cfg, stats, lengths


def rendered(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def inside(fig) -> bool:
    """Everything drawn (tick labels, titles, legends) lies within the image."""
    box, page = fig.get_tightbbox(rendered(fig)), fig.bbox
    scale = fig.dpi  # get_tightbbox is in inches
    x0, y0, x1, y1 = (v * scale for v in (box.x0, box.y0, box.x1, box.y1))
    return x0 >= -1 and y0 >= -1 and x1 <= page.width + 1 and y1 <= page.height + 1


def test_charts_are_readable_at_the_size_the_card_shows_them(tmp_path):
    cfg, stats, lengths = planted_stats()
    figures = charts(cfg, stats, lengths, DROPS)
    assert set(figures) == {"domain_mix.png", "token_lengths.png", "curation_drops.png"}
    for name, fig in figures.items():
        assert inside(fig), name
    drops = figures["curation_drops.png"].axes[0]
    labels = [t.get_text() for t in drops.get_yticklabels()]
    by_size = sorted(DROPS, key=lambda r: -DROPS[r])
    assert labels == [r if len(r) <= 48 else r[:47] + "…" for r in by_size]  # every reason, cut with an ellipsis past 48
    ys = [t.get_position()[1] for t in drops.get_yticklabels()]
    assert ys == sorted(ys, reverse=True)  # the largest on top
    renderer = rendered(figures["curation_drops.png"])
    bars = sorted((p.get_window_extent(renderer) for p in drops.patches), key=lambda b: b.y0)
    assert len(bars) == len(DROPS) and all(a.y1 < b.y0 for a, b in itertools.pairwise(bars))  # apart, not merged
    texts = sorted((t.get_window_extent(renderer) for t in drops.get_yticklabels()), key=lambda b: b.y0)
    assert all(a.y1 <= b.y0 + 0.5 for a, b in itertools.pairwise(texts))  # labels do not overlap each other
    assert all(t.get_fontsize() >= 8 for t in drops.get_yticklabels())
    lengths_ax = figures["token_lengths.png"].axes[0]
    assert lengths_ax.get_xscale() == "log" and 8000 <= lengths_ax.get_xlim()[1] <= 8192 * 1.06  # the real range, not 1M
    assert "log scale" in lengths_ax.get_xlabel() and {t.get_text().split()[0] for t in lengths_ax.get_legend().get_texts()} == {
        "cpt",
        "sft",
        "rl",
    }
    mix = figures["domain_mix.png"].axes
    assert [ax.get_title() for ax in mix] == [f"{st}: train tokens by domain" for st in ("cpt", "sft", "rl")]
    assert [t.get_text() for t in mix[0].get_xticklabels()] == ["android", "mcp", "os", "search", "swe", "terminal", "web"]

    saved = _plots(tmp_path, cfg, stats, lengths, DROPS)  # the files the card links, at their figure size x DPI
    for name in saved:
        fig_size = {
            "domain_mix.png": (3.4 * 3, 3.4),
            "token_lengths.png": (7, 3.6),
            "curation_drops.png": (7, 0.9 + 0.38 * len(DROPS)),
        }[name]
        with Image.open(tmp_path / name) as img:
            assert img.size == (round(fig_size[0] * DPI), round(fig_size[1] * DPI)), name
            assert 600 <= img.size[0] <= 1100  # shown as is in the card: wide enough to read, no wider than a page


def test_card_yaml_uses_hugging_face_keys_and_says_where_the_licence_came_from():
    report = SimpleNamespace(samples={"sft": {"train": 10, "validation": 0, "test": 2}}, tokens={})
    cfg = MixtureConfig(stages={"sft": Stage()})
    yaml = front_matter(cfg, "wm", "1", report, {"unspecified": 5})
    assert (yaml["license"], yaml["license_name"], yaml["license_link"], yaml["language"]) == (
        "other",
        "unspecified-collected-data",
        "README.md#license",
        ["en"],
    )
    files = [{"split": "train", "path": "data/sft/train-*.parquet"}, {"split": "test", "path": "data/sft/test-*.parquet"}]
    assert yaml["configs"] == [{"config_name": "sft", "data_files": files}]  # empty splits left out
    assert yaml["dataset_info"][0]["splits"] == [
        {"name": "train", "num_bytes": 0, "num_examples": 10},
        {"name": "test", "num_bytes": 0, "num_examples": 2},
    ]
    assert license_of(cfg, {"cc-by-4.0": 3})[0] == {"license": "cc-by-4.0"}  # the sources name one: it
    mixed, why = license_of(cfg, {"cc-by-4.0": 3, "mit": 1, "unspecified": 2})
    assert mixed["license"] == "other" and mixed["license_name"] == "mixed-source-licenses" and "mit (1)" in why
    set_here = MixtureConfig(stages={"sft": Stage()}, license="apache-2.0", language=["en", "zh"])
    yaml = front_matter(set_here, "wm", "1", report, {"cc-by-4.0": 3})
    assert yaml["license"] == "apache-2.0" and "license_name" not in yaml and yaml["language"] == ["en", "zh"]
    other = MixtureConfig(license="other", license_name="my-terms", license_link="https://example.org/terms")
    assert license_of(other, {})[0] == {
        "license": "other",
        "license_name": "my-terms",
        "license_link": "https://example.org/terms",
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("license: apache-2.0\nlicense_name: mine", "license_name and license_link go with license: other, not 'apache-2.0'"),
        ("license: Apache 2.0", "license: String should match pattern"),
        ("language: [english]", "language: give ISO 639 language codes such as [en] or [en, zh], got ['english']"),
    ],
)
def test_bad_licence_and_language_are_refused_in_one_line(tmp_path, body, message):
    from pipelines.release.config import load_mixture

    path = tmp_path / "mix.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_mixture(path)
    assert message in str(info.value) and "\n" not in str(info.value)
